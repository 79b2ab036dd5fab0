"""ipukern.validation and ``ipukern validate``: the model against published measurements."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import pytest

from ipukern import validation as v
from ipukern.cli import main
from ipukern.validation.models import parse_params


@pytest.fixture(scope="module")
def cli_out(tmp_path_factory):
    """One full ``ipukern validate --no-plot`` run (what CI runs), shared by the checks."""
    out = tmp_path_factory.mktemp("validate")
    assert main(["validate", "--no-plot", "--out", str(out), "-q", "--no-progress"]) == 0
    return out


def test_validate_cli_writes_csv_and_json_without_plot(cli_out):
    assert (cli_out / "validation.csv").is_file()
    assert not (cli_out / "validation.png").exists()
    data = json.loads((cli_out / "validation.json").read_text())
    assert set(data["variants"]) == {"default", "datasheet"}
    table = v.load_measurements()
    assert len(data["rows"]) == len(table)                        # nothing dropped
    assert {r["group"] for r in data["rows"]} == set(data["summary"])
    for r in data["rows"]:
        assert r["source"] and r["locator"] and r["hardware"]
        # every point is either modelled on both variants or says why it is not
        modelled = r["model_default"] is not None
        assert modelled == (r["model_datasheet"] is not None)
        assert modelled != bool(r["not_modelled"]), r["id"]
        if modelled:
            assert math.isclose(r["ratio_default"], r["model_default"] / r["measured"], rel_tol=1e-3)
    matmul = data["summary"]["matmul Bow (PopSparse)"]
    assert matmul["default"]["modelled"] >= 40
    assert matmul["default"]["mape_pct"] is not None and matmul["default"]["pearson_log"] > 0.9
    with open(cli_out / "validation.csv") as f:
        assert len(list(csv.DictReader(f))) == len(table)


def test_group_statistics_by_hand():
    m = v.Measurement("a", "g", "GC200", 1.325, "matmul", "", "q", "u", 1.0, "src", "loc")
    rows = [v.ValidationRow(replace(m, id="a", measured=1.0), {"default": 2.0}),
            v.ValidationRow(replace(m, id="b", measured=4.0), {"default": 2.0}),
            v.ValidationRow(replace(m, id="c", measured=10.0), {"default": 10.0}),
            v.ValidationRow(replace(m, id="d", measured=3.0), reason="not modelled: x")]
    s = v._group_stats(rows, "default")
    assert s["points"] == 4 and s["modelled"] == 3
    assert s["mape_pct"] == pytest.approx(100 * (1.0 + 0.5 + 0.0) / 3, abs=0.01)
    assert s["geomean_ratio"] == pytest.approx((2.0 * 0.5 * 1.0) ** (1 / 3), abs=1e-4)
    assert s["within_25pct"] == 1
    lx = [math.log(2), math.log(2), math.log(10)]
    ly = [0.0, math.log(4), math.log(10)]
    mx, my = sum(lx) / 3, sum(ly) / 3
    r = (sum((a - mx) * (b - my) for a, b in zip(lx, ly))
         / math.sqrt(sum((a - mx) ** 2 for a in lx) * sum((b - my) ** 2 for b in ly)))
    assert s["pearson_log"] == pytest.approx(r, abs=1e-4)
    assert v._pearson([1.0, 2.0], [1.0, 2.0]) is None          # too few points
    assert v._pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # constant side


def test_stream_model_by_hand():
    """The STREAM row's model value is the element-wise vertex cost, re-derived here."""
    rows = [m for m in v.load_measurements() if m.kind == "stream_triad"]
    res = v.run(rows)
    from ipukern import GC2
    from ipukern.core.cost import ELEMENTWISE_WORKER_OVERHEAD, SUPERVISOR_OVERHEAD
    n = 16384
    vw = GC2.vector_elems("float32")                       # 2 fp32 per 64-bit vector
    per_worker = math.ceil(n / 6)
    vectors = math.ceil(per_worker / vw)
    cycles = 6 * (ELEMENTWISE_WORKER_OVERHEAD + 2 * vectors) + SUPERVISOR_OVERHEAD + GC2.sync_cycles
    gbs = 3 * n * 4 * 1216 / (cycles / 1.6e9) / 1e9
    fp32 = next(r for r in res.rows if r.measurement.id == "stream-triad-fp32-optimised")
    assert fp32.model["default"] == pytest.approx(gbs, rel=1e-9)
    assert fp32.model["datasheet"] == fp32.model["default"]    # no exchange in a triad


def test_not_modelled_points_keep_their_reason():
    res = v.run([m for m in v.load_measurements() if m.not_modelled])
    assert res.rows and all(r.reason and not r.model for r in res.rows)
    for per in res.summary.values():
        assert per["default"]["modelled"] == 0 and per["default"]["mape_pct"] is None


def test_measurement_table_errors(tmp_path):
    good = (tmp_path / "good.csv")
    fields = ["id", "group", "hardware", "clock_ghz", "kind", "params", "quantity", "unit",
              "measured", "source", "locator", "note", "not_modelled"]
    base = {"id": "x", "group": "g", "hardware": "GC200", "clock_ghz": "1.325", "kind": "matmul",
                "params": "m=16;k=16;n=16", "quantity": "q", "unit": "TFLOP/s", "measured": "1.0",
                "source": "a paper", "locator": "Table 1", "note": "", "not_modelled": ""}

    def write(*rows):
        with good.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        return good

    assert v.load_measurements(write(base))[0].measured == 1.0
    for bad, msg in [({"source": ""}, "no source"), ({"measured": "-1"}, "positive"),
                     ({"measured": "abc"}, "line 2"), ({"kind": "warp"}, "unknown kind")]:
        with pytest.raises(ValueError, match=msg):
            v.load_measurements(write(base | bad))
    with pytest.raises(ValueError, match="duplicate"):
        v.load_measurements(write(base, base))
    with pytest.raises(ValueError, match="unknown group"):
        v.run(v.load_measurements(write(base)), groups=["nope"])
    with pytest.raises(ValueError, match="key=value"):
        parse_params("m=1;k")
    # a model error is the point's reason, not a crash
    res = v.run(v.load_measurements(write(base | {"params": "m=16;k=0;n=16"})))
    assert "model error" in res.rows[0].reason


def test_validate_cli_bad_input_one_line(tmp_path, capsys):
    # an unknown group is a usage error (exit 2), like an unknown model or preset
    assert main(["validate", "--out", str(tmp_path), "--group", "nope", "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown group" in err[0] and "--help" in err[0]
    assert main(["validate", "--systems", "--only", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown id" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["validate", "--out", str(f), "--no-plot"]) == 1


def test_plot_validation(tmp_path):
    pytest.importorskip("matplotlib")
    from ipukern.validation.plot import plot_validation
    res = v.run([m for m in v.load_measurements() if m.group.startswith(("STREAM", "latency"))])
    path = plot_validation(res, tmp_path / "v.png")
    assert path.stat().st_size > 10_000
