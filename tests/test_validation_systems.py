"""ipukern.validation.systems and ``ipukern validate --systems``: published training runs.

The full table (ResNet-50 and BERT-Large at MLPerf scale) is generated for docs/validation.rst; CI runs
the packaged rows that are cheap to model (the DGX A100 rows) and IPU rows rebuilt on a small
network, through the same code path, with nothing mocked.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources

import pytest

from ipukern.cli import main
from ipukern.validation import systems as vs

IMAGENET = 1_281_167


def test_packaged_table_is_sourced_and_consistent():
    runs = vs.load_published()
    assert len({r.id for r in runs}) == len(runs) >= 12
    for r in runs:
        assert r.source and r.locator, r.id
        assert r.published_minutes or r.published_throughput
        if r.benchmark == "ResNet-50" and r.train_items:
            # ImageNet epochs x 1,281,167: the time-to-train denominator is whole epochs
            assert r.train_items % IMAGENET == 0, r.id
        if r.kind == "ipu_training" and not r.not_modelled:
            assert r.replicas * (r.ipus_per_replica or 1) <= {"POD16": 16, "POD64": 64, "BOW_POD16": 16,
                                                            "BOW_POD64": 64}[r.system]
    mlperf = [r for r in runs if r.round.startswith("MLPerf")]
    # both rounds, both benchmarks, POD16, POD64 and the DGX A100
    assert {(r.round[-4:], r.benchmark, r.system) for r in mlperf} >= {
        (v, b, s) for v in ("v1.0", "v1.1") for b in ("ResNet-50", "BERT-Large")
        for s in ("POD16", "POD64", "DGX_A100_80GB")}
    # the global batch the logs print: replicas x micro-batch x accumulation x items per sample
    pod16 = next(r for r in runs if r.id == "mlperf1.0-bert-pod16")
    assert pod16.replicas * pod16.micro_batch * pod16.gradient_accumulation * pod16.items_per_sample == 3072
    # the ResNet-50 submissions that ran LARS (Graphcore v1.1; NVIDIA MXNet v1.0 and v1.1) run it
    lars = {r.id for r in mlperf if r.optimizer == "lars"}
    assert lars == {"mlperf1.1-resnet-pod16", "mlperf1.1-resnet-pod64", "mlperf1.0-resnet-dgxa100",
                    "mlperf1.1-resnet-dgxa100"}


def test_gpu_rows_modelled_with_ratios(tmp_path):
    ids = ["mlperf1.0-resnet-dgxa100", "mlperf1.1-bert-dgxa100"]
    rep = vs.systems_report(ids=ids)
    assert [r.run.id for r in rep.rows] == ids
    res, bert = rep.rows
    assert not res.reason and res.model_throughput > 0
    assert res.throughput_ratio == pytest.approx(res.model_throughput / res.run.published_throughput)
    assert res.model_minutes == pytest.approx(res.run.train_items / res.model_throughput / 60)
    assert res.minutes_ratio == pytest.approx(res.model_minutes / res.run.published_minutes)
    assert bert.throughput_ratio > 0 and bert.minutes_ratio > 0
    assert res.details["parts_ms"]["all_reduce_ms"] > 0
    # the row's optimizer (lars) reaches the GPU model: 7 fp32 words per parameter, not 5
    from ipukern.gpu import A100_40GB, A100_80GB
    from ipukern.gpu import estimate_network_gpu
    sgdm = estimate_network_gpu(vs._network(res.run), 408, "DGX_A100_40GB", training=True)   # 40 GB HBM
    assert res.details["parts_ms"]["optimizer_ms"] / (sgdm.optimizer_seconds * 1e3) == pytest.approx(
        7 / 5 * A100_40GB.hbm_bandwidth / A100_80GB.hbm_bandwidth, rel=2e-3)
    assert res.model_datasheet is None                                  # an IPU-only variant
    data = json.loads(rep.to_json(tmp_path / "s.json"))
    assert data["summary"]["modelled"] == 2 and len(data["rows"]) == 2
    assert any(ln.startswith("mlperf1.0-resnet-dgxa100 ") for ln in rep.format_table().splitlines())


@pytest.fixture(scope="module")
def small_pair():
    """The MLPerf v1.0 ResNet POD16 and POD64 rows rebuilt on ResNet-50 at 32x32 (same code
    path as the packaged rows, a fraction of the planning work)."""
    runs = {r.id: r for r in vs.load_published()}
    return [replace(runs[i], network_args="image_size=32", micro_batch=4, sample_bytes=3 * 32 * 32)
            for i in ("mlperf1.0-resnet-pod16", "mlperf1.0-resnet-pod64")]


def test_ipu_rows_and_scaling(small_pair):
    rep = vs.systems_report(small_pair)
    p16, p64 = rep.rows
    for r in rep.rows:
        assert not r.reason, r.reason
        assert r.details["step_ms"] > 0 and r.how
        # the datasheet's 8 TB/s exchange can only slow the step down
        assert 0 < r.model_datasheet <= r.model_throughput
        assert r.datasheet_ratio == pytest.approx(r.model_datasheet / r.run.published_throughput)
    # same per-replica work, 4x the replicas, fewer micro-batches per step on POD64
    assert 1.0 < p64.model_throughput / p16.model_throughput < 4.5
    (s,) = rep.scaling
    factor = p64.model_throughput / p16.model_throughput
    assert s["model_throughput_factor"] == pytest.approx(factor, rel=1e-3)
    assert s["published_throughput_factor"] == pytest.approx(83404 / 27527, rel=1e-3)
    assert s["published_time_factor"] == pytest.approx(37.115 / 14.485, rel=1e-3)


def test_recompute_checkpoints_trade_memory_for_cycles(small_pair):
    import ipukern as ik
    run = small_pair[0]
    net = ik.models.resnet50(image_size=32)
    kw = dict(micro_batch=4, gradient_accumulation=6, replicas=16, sample_bytes=3 * 32 * 32)
    plain = ik.estimate_training(net, "POD16", **kw)
    ck = ik.estimate_training(net, "POD16", recompute=run.recompute.split("|"), **kw)
    assert ck.step_seconds > plain.step_seconds
    assert ck.breakdown[0]["memory_bytes"] < plain.breakdown[0]["memory_bytes"]
    with pytest.raises(ValueError, match="recompute"):
        ik.estimate_training(net, "POD16", recompute="layer1.0.relu3", **kw)
    with pytest.raises(ValueError, match="not a layer"):
        ik.estimate_training(net, "POD16", recompute=["no.such.layer"], **kw)


def test_model_errors_become_reasons():
    run = next(r for r in vs.load_published() if r.id == "mlperf1.0-resnet-dgxa100")
    rep = vs.systems_report([replace(run, network="no_such_net")])
    assert rep.rows[0].reason.startswith("model error: unknown network")
    assert rep.summary()["modelled"] == 0
    not_modelled = [r for r in vs.load_published() if r.not_modelled]
    rep = vs.systems_report(not_modelled)
    assert all(r.reason == r.run.not_modelled and r.model_throughput is None for r in rep.rows)


def test_table_errors(tmp_path):
    good = (resources.files("ipukern.validation") / "published_systems.csv").read_text().splitlines()
    head, first = good[0], good[1]
    p = tmp_path / "t.csv"
    p.write_text("\n".join([head, first, first]))
    with pytest.raises(ValueError, match="duplicate id"):
        vs.load_published(p)
    p.write_text("id,kind\nx,ipu_training\n")
    with pytest.raises(ValueError, match="missing columns"):
        vs.load_published(p)
    cols = head.split(",")
    rec = dict(zip(cols, [""] * len(cols)))
    rec.update(id="x", kind="ipu_training", source="s", published_throughput="1", replicas="1",
               micro_batch="1", gradient_accumulation="1")
    for change, msg in (({"kind": "cpu"}, "kind must be"), ({"source": ""}, "no source"),
                        ({"published_throughput": ""}, "neither"), ({"replicas": "two"}, "line 2"),
                        ({"published_throughput": "nan"}, "finite"), ({"micro_batch": ""}, "needed unless"),
                        ({"kind": "gpu_training", "optimizer": "rmsprop"}, "unknown optimizer")):
        p.write_text(head + "\n" + ",".join((rec | change)[c] for c in cols))
        with pytest.raises(ValueError, match=msg):
            vs.load_published(p)
    with pytest.raises(ValueError, match="unknown id"):
        vs.systems_report(ids=["nope"])


def test_cli_systems(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["validate", "--systems", "--only", "mlperf1.1-resnet-dgxa100", "--out", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "mlperf1.1-resnet-dgxa100" in text and "geometric-mean" in text
    data = json.loads((out / "systems.json").read_text())
    assert math.isfinite(data["rows"][0]["throughput_ratio"])
    assert (out / "systems.csv").read_text().count("\n") == 2
    assert main(["validate", "--systems", "--only", "nope", "--out", str(out), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "unknown id" in err and len(err.strip().splitlines()) == 1
    assert main(["validate", "--only", "x", "--out", str(out), "--no-progress"]) != 0


def test_pipelined_bert_row_on_bert_base():
    """The BERT POD16 row's path (4-stage pipeline, per-stage recompute, LAMB state in
    Streaming Memory, sharding, 2 sequences per pack) on BERT-Base at 16 tokens."""
    run = next(r for r in vs.load_published() if r.id == "mlperf1.0-bert-pod16")
    q = "encoder.layer.{}.attention.self.query"
    small = replace(run, network="bert_base", network_args="seq_len=16",
                    pipeline="|".join(q.format(i) for i in (3, 6, 9)))
    (row,) = vs.systems_report([small], datasheet=False).rows
    assert not row.reason, row.reason
    assert row.details["stages"] == 4 and row.model_datasheet is None
    parts = row.details["parts_ms"]
    assert parts["streaming memory"] > 0 and parts["fill/drain"] > 0
    assert row.how.startswith("pipeline compute (slowest stage")
    # samples/s of packs x 2 sequences per pack = the step's sequences over its time
    seqs = run.replicas * run.micro_batch * run.gradient_accumulation * 2
    assert row.model_throughput == pytest.approx(seqs / (row.details["step_ms"] / 1e3), rel=1e-3)


def test_published_bert_stages_fit_as_they_ran():
    """With PopART's per-layer checkpoints and the configs' availableMemoryProportion the
    published BERT-Large POD16 stages fit their tiles (with stage recomputation and the
    default proportion they did not: 874,782 B > 638,976 B on stage 1)."""
    run = next(r for r in vs.load_published() if r.id == "mlperf1.0-bert-pod16")
    assert run.recompute == "every_layer" and run.available_memory_proportion == pytest.approx(0.2)
    (row,) = vs.systems_report([run], datasheet=False).rows
    assert not row.reason, row.reason
    assert row.details["memory"]["fits"], row.details["memory"]
    assert row.details["memory"]["peak_tile_bytes"] <= 638976
    stage = replace(run, recompute="stage", available_memory_proportion=None)
    (old,) = vs.systems_report([stage], datasheet=False).rows
    assert not old.details["memory"]["fits"]
    (bad,) = vs.systems_report([replace(run, network="resnet8", network_args="")], datasheet=False).rows
    assert "every_layer" in bad.reason


def test_every_layer_checkpoints_skip_each_stage_last_layer():
    """PopART's recompute_checkpoint_every_layer checkpoints every encoder layer's output but
    the last of each pipeline stage (copied to the next stage; Bert.should_checkpoint)."""
    run = next(r for r in vs.load_published() if r.id == "mlperf1.0-bert-pod64")
    net = vs._network(run)
    got = [int(c.split(".")[2]) for c in vs._every_layer_checkpoints(run, net)]
    # stages [0-2], [3-5], [6-8], [9-11], [12-15], [16-19], [20-23] after the embeddings' stage
    assert got == [0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22]
    one = vs._every_layer_checkpoints(replace(run, pipeline=""), net)
    assert len(one) == 23 and not one[-1].startswith("encoder.layer.23.")


def test_bow_bert_sl128_row_runs_its_published_config():
    """graphcore/examples' pretrain_large_128.json: LAMB state off chip (Streaming Memory),
    sharded, availableMemoryProportion 0.15 on the first IPU, per-layer checkpoints; with it
    the stages fit (as the chip-resident state and PopLibs' default proportion did not)."""
    run = next(r for r in vs.load_published() if r.id == "bow-bert-sl128-pod16")
    assert (run.optimizer_state, run.replicated_sharding, run.recompute) == ("streaming", 1, "every_layer")
    assert run.available_memory_proportion == pytest.approx(0.15)
    assert "pretrain_large_128.json" in run.note
    (row,) = vs.systems_report([run], datasheet=False).rows
    assert not row.reason and row.details["memory"]["fits"], row.details["memory"]
    assert row.details["parts_ms"]["streaming memory"] > 0
