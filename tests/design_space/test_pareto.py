"""Pareto fronts and their plot (ipukern.design_space.pareto)."""
import pytest

from ipukern.design_space import pareto_front, plot_pareto


def _rows():
    pts = [(1, 10.0), (2, 9.0), (2, 12.0), (3, 12.0), (4, 20.0), (5, 15.0)]
    rows = [{"network": "n", "status": "ok", "total_sram_bytes": c, "samples_per_second": v} for c, v in pts]
    rows.append({"network": "n", "status": "no-fit", "total_sram_bytes": 0, "samples_per_second": None})
    rows.append({"network": "m", "status": "ok", "total_sram_bytes": 1, "samples_per_second": 99.0})
    return rows


def test_front_is_cheapest_first_each_point_beating_every_cheaper_one():
    front = pareto_front(_rows(), "total_sram_bytes", network="n")
    got = [(r["total_sram_bytes"], r["samples_per_second"]) for r in front]
    assert got == [(1, 10.0), (2, 12.0), (4, 20.0)]
    assert [r["network"] for r in pareto_front(_rows(), "total_sram_bytes")] == ["m"]


def test_plot_is_written_and_bad_costs_are_refused(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_pareto(_rows(), tmp_path / "p.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="cost 'nope' is not a column"):
        plot_pareto(_rows(), tmp_path / "q.png", costs=["nope"])
    with pytest.raises(ValueError, match="no cost varies"):
        plot_pareto(_rows()[:1], tmp_path / "q.png")
