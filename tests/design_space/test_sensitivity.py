"""Sensitivity summary: hand-computed gains (ipukern.design_space.sensitivity)."""
import math

import pytest

from ipukern.design_space import sensitivity


def _row(net, xch, sram, sps, status="ok"):
    return {"network": net, "varied": "exchange_bandwidth,tile_bytes", "exchange_bandwidth": xch,
            "tile_bytes": sram, "setting_batch": 4, "status": status, "samples_per_second": sps}


def test_gain_is_the_geometric_mean_over_pairs_differing_in_one_constant():
    rows = [_row("a", 1.0, 10, 100.0), _row("a", 2.0, 10, 130.0),
            _row("a", 1.0, 20, 100.0), _row("a", 2.0, 20, 160.0),
            _row("b", 1.0, 10, 50.0), _row("b", 2.0, 10, 51.0),
            _row("b", 1.0, 20, 50.0, "no-fit"), _row("b", 2.0, 20, None, "no-fit")]
    got = {(s.network, s.constant): s for s in sensitivity(rows)}
    a = got["a", "exchange_bandwidth"]
    assert a.gain == pytest.approx(math.sqrt(1.3 * 1.6)) and a.pairs == 2 and a.skipped == 0
    assert got["a", "tile_bytes"].gain == pytest.approx(math.sqrt(1.0 * 160 / 130))
    b = got["b", "exchange_bandwidth"]
    assert b.gain == pytest.approx(1.02) and b.pairs == 1 and b.skipped == 1
    assert b.sentence() == "b gains 1.02x from 2x exchange_bandwidth (1 -> 2; 1 pair)"
    nofit = got["b", "tile_bytes"]
    assert nofit.gain is None and nofit.pairs == 0
    assert "no pair of points that both fit (2 left out)" in nofit.sentence()


def test_settings_split_the_pairs():
    rows = [_row("a", 1.0, 10, 100.0), _row("a", 2.0, 10, 200.0)]
    rows += [{**_row("a", 1.0, 10, 100.0), "setting_batch": 8},
             {**_row("a", 2.0, 10, 100.0), "setting_batch": 8}]
    s, = [s for s in sensitivity(rows) if s.constant == "exchange_bandwidth"]
    assert s.pairs == 2 and s.gain == pytest.approx(math.sqrt(2.0))
