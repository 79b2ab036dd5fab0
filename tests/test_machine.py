"""Machine presets: the constants the project and the datasheets give, and derivations."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.machine import DATASHEET_EXCHANGE, with_exchange_bandwidth


def test_presets_constants():
    assert (ik.GC2.n_tiles, ik.GC200.n_tiles, ik.BOW.n_tiles) == (1216, 1472, 1472)
    assert ik.GC2.tile_bytes == 256 * 1024 and ik.GC200.tile_bytes == 638_976 == ik.BOW.tile_bytes
    assert (ik.GC2.clock_hz, ik.GC200.clock_hz, ik.BOW.clock_hz) == (1.6e9, 1.325e9, 1.85e9)
    for m in ik.PRESETS.values():
        assert m.n_workers == 6
        assert (m.load_bytes_per_cycle, m.store_bytes_per_cycle) == (16, 8)
        assert m.vector_elems("float16") == 4 and m.vector_elems("float32") == 2


@pytest.mark.parametrize("machine, hh, hf, ff", [(ik.GC200, 64, 32, 16), (ik.BOW, 64, 32, 16),
                                                 (ik.GC2, 32, 32, 8)])
def test_amp_rates(machine, hh, hf, ff):
    assert machine.amp_macs_per_cycle("float16", "float16") == hh
    assert machine.amp_macs_per_cycle("half", "float") == hf
    assert machine.amp_macs_per_cycle("float32", "float32") == ff


def test_derived_figures_match_datasheets():
    # 250 TFLOPS FP16.16 and 62.5 TFLOPS FP32 on GC200; 1.394 PF / 4 on Bow; 124.5 Mk1 FP16.32
    assert ik.GC200.peak_flops("float16", "float16") == pytest.approx(249.65e12, rel=1e-3)
    assert ik.GC200.peak_flops("float32") == pytest.approx(62.4e12, rel=1e-3)
    assert ik.BOW.peak_flops("float16", "float16") * 4 == pytest.approx(1.394e15, rel=2e-3)
    assert ik.GC2.peak_flops("float16", "float32") == pytest.approx(124.5e12, rel=1e-3)
    assert ik.GC200.exchange_bandwidth == pytest.approx(47.5e12)
    assert ik.GC200.total_bytes == 1472 * 638_976


def test_replace_and_datasheet_exchange():
    slow = ik.GC200.replace(exchange_bandwidth=8e12)
    assert slow.exchange_bandwidth == pytest.approx(8e12)
    assert slow.exchange_bytes_per_cycle == pytest.approx(8e12 / 1472 / 1.325e9)
    assert slow.n_tiles == ik.GC200.n_tiles and ik.GC200.exchange_bandwidth == pytest.approx(47.5e12)
    # one datasheet figure, whatever the spelling (8 TB/s aggregate = 4.10 B/cycle/tile)
    sheet = ik.GC200.with_datasheet_exchange()
    assert sheet.exchange_bytes_per_cycle == slow.exchange_bytes_per_cycle
    assert sheet == with_exchange_bandwidth(ik.GC200, DATASHEET_EXCHANGE)
    assert sheet.name == "GC200-xch8TB" and DATASHEET_EXCHANGE == 8e12
    from ipukern.cli._common import DATASHEET_EXCHANGE as cli_figure
    assert cli_figure is DATASHEET_EXCHANGE
    assert ik.GC200.replace(clock_ghz=1.85).clock_hz == 1.85e9
    with pytest.raises(ValueError, match="n_tiles"):
        ik.GC200.replace(n_tiles=0)
    with pytest.raises(ValueError, match="reserved_bytes_per_tile"):
        ik.GC200.replace(reserved_bytes_per_tile=10**6)


def test_get_machine():
    assert ik.get_machine("gc200") is ik.GC200 and ik.get_machine(None) is ik.GC200
    with pytest.raises(ValueError, match="unknown machine"):
        ik.get_machine("GC300")
    with pytest.raises(TypeError):
        ik.get_machine(3)
    assert "1472" in ik.GC200.describe()


@pytest.mark.parametrize("change, match", [
    ({"n_tiles": True}, "n_tiles must be a positive int, got True"),
    ({"n_tiles": 2.0}, "n_tiles must be a positive int"),
    ({"n_links": -1}, "n_links must be an int >= 0"),
    ({"exchange_bytes_per_cycle": float("nan")}, "exchange_bytes_per_cycle must be a finite number > 0"),
    ({"link_bytes_per_second": float("nan")}, "link_bytes_per_second must be a finite number >= 0"),
    ({"host_bytes_per_second": -1.0}, "host_bytes_per_second must be a finite number > 0"),
    ({"clock_hz": float("inf")}, "clock_hz must be a finite number > 0"),
    ({"vector_width_bits": 24}, "vector_width_bits must be a multiple of 32"),
    ({"exchange_bytes_per_cycle": 2**70}, "exchange_bytes_per_cycle must be at most"),
    ({"exchange_bandwidth": 1e30}, "exchange_bytes_per_cycle must be at most"),
    ({"exchange_bandwidth": 2.2e-311}, "exchange_bytes_per_cycle must be at least"),   # a fuzz find
    ({"sync_cycles": 2**70}, "sync_cycles must be at most 4294967296"),
    ({"n_workers": 10**6}, "n_workers must be at most 64"),
    ({"amp_conv_units": {("float16", "float8"): 4}}, "amp_conv_units entries"),
])
def test_machine_spec_rejects_nonsense_in_one_line(change, match):
    with pytest.raises(ValueError, match=match) as e:
        ik.GC200.replace(**change)
    assert "\n" not in str(e.value)


def test_machine_spec_accepts_numpy_integers():
    m = ik.GC200.replace(n_tiles=np.int64(16))
    assert type(m.n_tiles) is int and m == ik.GC200.replace(n_tiles=16)
