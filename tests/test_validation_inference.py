"""ipukern.validation.inference and ``ipukern validate --inference``: published inference figures.

The packaged rows are checked for sources and for the way their values were read; every
modellable row runs through the same code path rebuilt on a smaller input (32x32 images,
32-token sequences), and one row runs in its published configuration through the CLI.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import replace

import pytest

import ipukern as ik
from ipukern.cli import main
from ipukern.validation import inference as vi


def test_packaged_table_is_sourced_and_consistent():
    runs = vi.load_inference()
    assert len({r.id for r in runs}) == len(runs) >= 5
    modelled = [r for r in runs if not r.not_modelled]
    assert len(modelled) >= 5
    for r in runs:
        assert r.source and r.locator and r.hardware, r.id
        assert r.published_throughput > 0
        assert r.published_seconds_per_batch == pytest.approx(r.batch / r.published_throughput)
    for r in modelled:
        assert r.machines and set(r.machines) <= set(ik.machine.PRESETS) | set(vi.CARDS), r.id
        # the published rate is batches over the wall time of `clients` host threads each
        # running one batch at a time: the mean latency of one call is ~clients batch times
        assert r.clients and r.published_latency_ms, r.id
        per_batch_ms = r.published_seconds_per_batch * 1e3
        assert r.published_latency_ms / per_batch_ms == pytest.approx(r.clients, rel=0.08), r.id


_CNN = ("resnet", "resnext", "efficientnet", "mobilenet")


def _small(run: vi.PublishedInference) -> vi.PublishedInference:
    """The row on a small input (same network, precision, machines, I/O tiles; batch <= 4)."""
    args = "image_size=32" if run.network.startswith(_CNN) else "seq_len=32"
    return replace(run, network_args=args, batch=min(run.batch, 4))


@pytest.fixture(scope="module")
def small_report():
    """Every modellable row, small; the CNN rows (2 s of conv planning per estimate) on their
    first machine and the default exchange only, the others on every machine and variant."""
    runs = [_small(r) for r in vi.load_inference() if not r.not_modelled]
    cnn = [replace(r, machines=r.machines[:1]) for r in runs if r.network.startswith(_CNN)]
    rest = [r for r in runs if not r.network.startswith(_CNN)]
    rows = vi.inference_report(cnn, datasheet=False).rows + vi.inference_report(rest).rows
    return vi.InferenceReport(rows)


def test_every_modelled_row_runs_small(small_report):
    rep = small_report
    for row in rep.rows:
        assert not row.reason, (row.run.id, row.reason)
        for m in row.run.machines:
            d = row.model[(m, "default")]
            assert row.ratio(m) == pytest.approx(d / row.run.published_throughput)
            assert row.model_seconds(m) == pytest.approx(row.run.batch / d)
            assert row.memory[m]["budget_bytes"] == vi.machine_spec(m).tile_bytes
            if (m, "datasheet") in row.model:
                # the datasheet's 8 TB/s exchange can only slow a batch down
                assert 0 < row.model[(m, "datasheet")] <= d, row.run.id
        # BOW is GC200 at a higher clock: faster on the same program
        if {"GC200", "BOW"} <= set(row.run.machines):
            assert row.model[("BOW", "default")] > row.model[("GC200", "default")]
    assert any((m, "datasheet") in r.model for r in rep.rows for m in r.run.machines)
    s = rep.summary()
    assert s["modelled"] == s["rows"] == sum(1 for r in vi.load_inference() if not r.not_modelled)
    assert set(s["geomean_ratio"]) >= {"GC200/default", "GC200/datasheet", "BOW/default"}
    table = rep.format_table()
    # a header and one line per row and machine, aligned text (not Markdown)
    assert table.count("\n") + 1 == 1 + sum(len(r.run.machines) for r in rep.rows)
    assert "|" not in table


def test_model_value_is_estimate_network_on_the_compute_tiles(small_report):
    """A row with I/O tiles is modelled on the preset less those tiles, nothing else changed."""
    row = next(r for r in small_report.rows if r.run.io_tiles)
    run = row.run
    spec = ik.GC200.replace(n_tiles=ik.GC200.n_tiles - run.io_tiles)
    assert vi._machine("GC200", run.io_tiles, False).n_tiles == spec.n_tiles == 1472 - run.io_tiles
    assert vi._machine("GC200", 0, True).exchange_bytes_per_cycle == \
        ik.GC200.with_datasheet_exchange().exchange_bytes_per_cycle
    prof = ik.estimate_network(ik.models.resnet50(image_size=32), batch=run.batch, dtype=run.dtype,
                               partials=run.partials, machine=spec, allow_overflow=True)
    assert row.model[("GC200", "default")] == pytest.approx(prof.samples_per_second, rel=1e-12)


def test_not_modelled_rows_keep_their_reason():
    runs = [r for r in vi.load_inference() if r.not_modelled]
    assert runs
    rep = vi.inference_report(runs)
    for row in rep.rows:
        assert row.reason == row.run.not_modelled and not row.model
        line = next(ln for ln in rep.format_table().splitlines() if ln.startswith(row.run.id + " "))
        assert "not modelled: " + row.run.not_modelled in line


def test_cli_inference_one_published_row(tmp_path, capsys):
    assert main(["validate", "--inference", "--only", "poprt-bert-base-sl128-b16", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^poprt-bert-base-sl128-b16 +16 ", out, re.MULTILINE)
    rows = list(csv.DictReader((tmp_path / "inference.csv").open()))
    assert [r["id"] for r in rows] == ["poprt-bert-base-sl128-b16"]
    r = rows[0]
    assert float(r["ratio_gc200_default"]) == pytest.approx(
        float(r["model_gc200_default"]) / float(r["published_throughput"]), rel=1e-3)
    data = json.loads((tmp_path / "inference.json").read_text())
    assert data["summary"]["modelled"] == 1 and data["rows"][0]["memory"]["GC200"]["fits"] in (True, False)


@pytest.mark.parametrize("argv, msg", [
    (["--systems", "--inference"], "give one"),
    (["--inference", "--only", "nope"], "unknown id"),
    (["--inference", "--group", "x"], "not --inference"),
])
def test_cli_bad_arguments(tmp_path, capsys, argv, msg):
    assert main(["validate", *argv, "--out", str(tmp_path), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


def _write(tmp_path, edit):
    """The packaged table with ``edit(rows)`` applied, written to a file."""
    from importlib import resources
    text = resources.files("ipukern.validation").joinpath("published_inference.csv").read_text()
    reader = csv.DictReader(text.splitlines())
    rows = list(reader)
    fields = list(reader.fieldnames)
    fields = edit(rows) or fields
    p = tmp_path / "t.csv"
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return p


def _set(key, value, i=0):
    def edit(rows):
        rows[i][key] = value
    return edit


@pytest.mark.parametrize("edit, msg", [
    (lambda rows: [c for c in rows[0] if c != "locator"], r"missing columns \['locator'\]"),
    (_set("batch", "eighty"), "poprt-resnet50-b80: invalid literal"),
    (_set("published_throughput", "-3"), "positive"),
    (_set("published_throughput", "nan"), "positive"),
    (_set("published_latency_ms", "0"), "positive"),
    (_set("source", ""), "needs a source"),
    (_set("machines", "GC200|TPU"), "unknown machine 'TPU'"),
    (_set("machines", ""), "no machine"),
    (_set("network", "vgg16"), "unknown network 'vgg16'"),
    (_set("io_tiles", "1472"), "no compute tile"),
    (_set("available_memory_proportion", "1.5"), r"\(0, 1\]"),
    (_set("batch", "0"), "batch and clients must be >= 1"),
    (_set("clients", "0"), "batch and clients must be >= 1"),
    (_set("clients", "four"), "invalid literal"),
    (_set("id", "poprt-resnet50-b80", 1), "duplicate id"),
])
def test_bad_table_is_a_clear_error(tmp_path, edit, msg):
    p = _write(tmp_path, edit)
    with pytest.raises(ValueError, match=msg):
        vi.load_inference(p)


def test_c600_is_the_gc200_tile_at_its_clock():
    c600 = vi.machine_spec("c600")
    assert c600.name == "C600" and c600.clock_hz == 1.5e9
    # 1,472 tiles of 624 KiB (900 MB); 280 TFLOPS FP16 at GC200's per-cycle rate needs ~1.49 GHz
    assert (c600.n_tiles, c600.tile_bytes) == (ik.GC200.n_tiles, ik.GC200.tile_bytes)
    assert c600.peak_flops("float16", "float16") == pytest.approx(280e12, rel=0.01)
    assert vi.machine_spec("GC200") is ik.GC200


def test_a_not_modelled_row_needs_no_machine(tmp_path):
    def edit(rows):
        rows[0]["machines"] = ""
        rows[0]["not_modelled"] = "a reason"
    assert vi.load_inference(_write(tmp_path, edit))[0].machines == ()


def test_eta_weights_count_the_distinct_planned_layers():
    """The ETA's cost proxy: estimates x distinct conv/matmul layers, so a ResNet-50 row weighs
    several BERT rows (the planner's search is most of an estimate) and a skip weighs nothing."""
    runs = {r.id: r for r in vi.load_inference()}
    resnet, bert = runs["poprt-resnet50-b1"], runs["poprt-bert-base-sl128-b16"]
    net = vi.build_network(resnet.network, resnet.network_args)
    convs = {(repr(layer), net.shapes(1)[name]) for name, layer in net.layers
             if type(layer).__name__ in ("Conv2d", "Linear")}
    assert vi._plans(resnet) == len(convs) > 3 * vi._plans(bert) > 0
    seen = []

    class Recorder:
        def set_costs(self, costs):
            seen.extend(costs)

        def __call__(self, done, total, label=""):
            pass

    small = replace(_small(resnet), machines=resnet.machines[:1])
    skipped = next(r for r in runs.values() if r.not_modelled)
    vi.inference_report([small, skipped], datasheet=False, progress=Recorder())
    assert seen == [vi._plans(small), 0.0]
