"""estimate_training composition (pipeline, data parallel, optimizer, memory) on
hand-computed per-layer costs, and its errors."""
import math

import pytest

import ipukern as ik
from ipukern.systems.collectives import collective_seconds, concurrent_seconds

CLOCK = 1.325e9
LANE = 128 * 2**30 / 8 * 0.85


def costs(n=8, fwd=1000, params=1000, out=4096):
    return [ik.LayerCost(f"l{i}", fwd * (i + 1), 2 * fwd * (i + 1), fwd * (i + 1), params, stash_bytes=out,
                         out_bytes=out) for i in range(n)]


def test_data_parallel_step_by_hand():
    c = costs()
    est = ik.estimate_training(system=ik.IPU_POD16, micro_batch=4, gradient_accumulation=3, costs=c,
                               sample_bytes=3 * 224 * 224, dtype="float16", optimizer="sgd_momentum")
    assert est.replicas == 16 and est.stages == [[x.name for x in c]]
    compute = sum(4 * x.fwd_cycles for x in c) / CLOCK             # fwd + bwd + wu = 4 x fwd
    params = 8 * 1000
    ar = collective_seconds(ik.IPU_POD16, "all_reduce", params * 2, range(16)).seconds
    # weight read + write and gradient read in float16, float32 momentum read + write
    opt = params * (3 * 2 + 2 * 4) / (1472 * 16) / CLOCK
    # one host, 2 x 100 GbE; no I/O tiles: each micro-batch's copy is waited for
    host = 192 * 3 * 224 * 224 / 25e9
    # a host handshake per synchronous input copy (3 micro-batches) and the step's output copy
    hsync = (3 + 1) * ik.IPU_POD16.host_sync_s
    assert est.step_seconds == pytest.approx(3 * compute + ar + opt + host + hsync)
    assert est.info["parts_s"]["host sync"] == pytest.approx(hsync) and est.info["host_syncs"] == 4
    assert est.info["parts_s"]["host I/O"] == pytest.approx(host) and not est.info["host_io_overlapped"]
    assert set(est.info["part_sources"]) == set(est.info["parts_s"])
    assert est.global_batch == 16 * 4 * 3
    assert est.samples_per_second == pytest.approx(192 / est.step_seconds)
    assert est.time_to_train(epochs=2, dataset_size=1000) == pytest.approx(2000 / est.samples_per_second)
    assert len(est.breakdown) == 16 and est.bottleneck == "host I/O"
    assert "IPU-POD16" in est.summary()
    # LARS: the momentum's update plus a second read of the weight and the gradient (float16)
    lars = ik.estimate_training(system=ik.IPU_POD16, micro_batch=4, gradient_accumulation=3, costs=c,
                                sample_bytes=3 * 224 * 224, dtype="float16", optimizer="lars")
    assert lars.info["parts_s"]["optimizer"] == pytest.approx(params * (5 * 2 + 2 * 4) / (1472 * 16) / CLOCK)
    assert lars.step_seconds - est.step_seconds == pytest.approx(params * 2 * 2 / (1472 * 16) / CLOCK)


def test_pipeline_fill_drain_links_and_sync_by_hand():
    c = costs(n=4)
    est = ik.estimate_training(system=ik.IPU_M2000, micro_batch=2, gradient_accumulation=8,
                               ipus_per_replica=2, pipeline=["l2"], costs=c, sample_bytes=0)
    assert est.replicas == 2 and est.stages == [["l0", "l1"], ["l2", "l3"]]
    stage1 = 4 * (3000 + 4000) / CLOCK                               # the slower stage
    link = 4096 / (6 * LANE) + 15e-9                                  # IPU 0 <-> 1: one rung
    sync = 2 * ik.IPU_M2000.sync_cycles(2) / CLOCK
    cycle = stage1 + link + sync
    assert est.info["pipeline_cycle_s"] == pytest.approx(cycle)
    assert est.info["parts_s"]["fill/drain"] == pytest.approx(cycle)
    # both stages' all-reduces at once (rails 0-2 and 1-3: no shared link, so the link time of
    # one; the lockstep syncs span the 4 IPUs)
    both = concurrent_seconds(ik.IPU_M2000, "all_reduce", [(2 * 2000, [0, 2]), (2 * 2000, [1, 3])])
    alone = collective_seconds(ik.IPU_M2000, "all_reduce", 2 * 2000, [0, 2])
    assert both.link_seconds == pytest.approx(alone.link_seconds)
    assert both.sync_seconds == pytest.approx(2 * (ik.IPU_M2000.sync_cycles(4) + 100) / CLOCK)
    ar = both.seconds
    opt = 2000 * (3 * 2 + 2 * 4) / (1472 * 16) / CLOCK
    # no inputs (sample_bytes 0): only the step's output copy meets the host
    assert est.step_seconds == pytest.approx((8 + 1) * cycle + ar + opt + ik.IPU_M2000.host_sync_s)
    assert "slowest stage 1" in est.bottleneck


def test_auto_pipeline_balances_cycles():
    c = costs(n=6)      # cycles 1..6: best 2-way split is [1..4] (10) | [5, 6] (11)
    est = ik.estimate_training(system=ik.IPU_M2000, micro_batch=1, ipus_per_replica=2, pipeline="auto",
                               costs=c, sample_bytes=0)
    assert est.stages == [["l0", "l1", "l2", "l3"], ["l4", "l5"]]


def test_auto_pipeline_counts_batch_norm_group_all_reduces():
    # layer cycles 400 .. 2400 (fwd 100 (i + 1), x 4 with bwd + wu); l0 a batch norm whose
    # group all-reduce (2 replicas, groups of 2) runs twice per micro-batch on its stage
    from ipukern.systems.bn_group import bn_all_reduce_cycles
    c = costs(n=6, fwd=100)
    c[0] = ik.LayerCost("l0", 100, 200, 100, 1000, 4096, 4096, bn_channels=64)
    kw = dict(system=ik.IPU_M2000, micro_batch=1, ipus_per_replica=2, pipeline="auto", costs=c,
              sample_bytes=0)
    bn = bn_all_reduce_cycles(ik.IPU_M2000, 2, 2, 2, 0, 64)
    assert bn == bn_all_reduce_cycles(ik.IPU_M2000, 2, 2, 2, 1, 64) and 1000 < 2 * bn < 3600
    cyc = [400 * (i + 1) for i in range(6)]
    # by hand: without the group all-reduces, split at l4: 4000 | 4400; with them, l4 gives
    # 4000 + 2 bn | 4400 and l3 gives 2400 + 2 bn | 6000, smaller while 2 bn > 2000
    assert ik.estimate_training(**kw).stages[1] == ["l4", "l5"]
    best = min(range(1, 6), key=lambda k: max(sum(cyc[:k]) + 2 * bn, sum(cyc[k:])))
    assert best == 3
    est = ik.estimate_training(bn_replica_group=2, **kw)
    assert est.stages == [["l0", "l1", "l2"], ["l3", "l4", "l5"]]
    slow = max(sum(cyc[:3]) + 2 * bn, sum(cyc[3:]))
    assert (est.info["parts_s"]["pipeline compute"] + est.info["parts_s"]["bn all-reduce"]) * CLOCK \
        == pytest.approx(slow)
    # with recomputation the forward and its group all-reduce run twice: by hand again
    rec = ik.estimate_training(bn_replica_group=2, recompute=True, **kw)
    cyc_r = [500 * (i + 1) for i in range(6)]
    best_r = min(range(1, 6), key=lambda k: max(sum(cyc_r[:k]) + 3 * bn, sum(cyc_r[k:])))
    assert rec.stages[1][0] == f"l{best_r}"


def test_recompute_streaming_and_sharding_change_what_they_should():
    c = costs(n=4, params=10_000_000)
    kw = dict(system=ik.IPU_POD16, micro_batch=2, gradient_accumulation=4, costs=c, sample_bytes=0)
    base = ik.estimate_training(**kw)
    rec = ik.estimate_training(recompute=True, **kw)
    assert rec.info["parts_s"]["pipeline compute"] == pytest.approx(
        base.info["parts_s"]["pipeline compute"] * 5 / 4)
    stream = ik.estimate_training(optimizer_state="streaming", **kw)
    # float32 momentum (the default state type): 4 bytes per parameter
    assert stream.breakdown[0]["memory_bytes"] == base.breakdown[0]["memory_bytes"] - 4e7 * 4
    assert stream.breakdown[0]["streaming_s"] == pytest.approx(2 * 4e7 * 4 / (25.6e9 / 4))
    shard = ik.estimate_training(replicated_sharding=True, **kw)
    assert shard.breakdown[0]["optimizer_s"] == pytest.approx(base.breakdown[0]["optimizer_s"] / 16)


def test_errors():
    c = costs(n=4)
    with pytest.raises(ik.SystemConfigError, match="= 32 IPUs, but IPU-POD16 has 16"):
        ik.estimate_training(system="POD16", micro_batch=1, replicas=16, ipus_per_replica=2, costs=c)
    with pytest.raises(ValueError, match="layer 'conv9'"):
        ik.estimate_training(system="M2000", micro_batch=1, ipus_per_replica=2, pipeline=["conv9"], costs=c)
    with pytest.raises(ValueError, match="2 stages but ipus_per_replica is 4"):
        ik.estimate_training(system="M2000", micro_batch=1, ipus_per_replica=4, pipeline=["l2"], costs=c)
    with pytest.raises(ValueError, match="GCL replica sizes"):
        ik.estimate_training(system="POD16", micro_batch=1, ipus_per_replica=3, costs=c)
    big = [ik.LayerCost("huge", 1, 1, 1, 10**9, 0, 0)] + c
    with pytest.raises(ik.StageMemoryError, match=r"stage 0 \(huge .. huge\) on IPU 0 needs .* B > budget"):
        ik.estimate_training(system="M2000", micro_batch=1, ipus_per_replica=2, pipeline=["l0"], costs=big)
    with pytest.raises(ValueError, match="optimizer"):
        ik.estimate_training(system="M2000", micro_batch=1, optimizer="rmsprop", costs=c)
    with pytest.raises(ValueError, match="micro_batch"):
        ik.estimate_training(system="M2000", micro_batch=0, costs=c)
    with pytest.raises(TypeError, match="LayerCost"):
        ik.estimate_training(system="M2000", micro_batch=1, costs=[1, 2])


def test_network_without_training_passes_says_so():
    net = ik.Network("t")
    x = net.input("x", (3, 8, 8))
    net.output(net.add(ik.nn.Conv2d(3, 4, 3, padding=1), x, name="c"))
    try:
        import ipukern.nn.training  # noqa: F401
    except ImportError:
        with pytest.raises(NotImplementedError, match="costs="):
            ik.estimate_training(net, "M2000", micro_batch=2)
    else:
        est = ik.estimate_training(net, "M2000", micro_batch=2)
        assert est.step_seconds > 0 and math.isfinite(est.samples_per_second)


def _costs_file(tmp_path):
    import json
    rows = [dict(name=c.name, fwd_cycles=c.fwd_cycles, bwd_cycles=c.bwd_cycles, wu_cycles=c.wu_cycles,
                 n_params=c.n_params, stash_bytes=c.stash_bytes, out_bytes=c.out_bytes) for c in costs(n=4)]
    p = tmp_path / "costs.json"
    p.write_text(json.dumps(rows))
    return str(p)


def test_cli_train_writes_breakdown_and_schedule(tmp_path, capsys):
    import csv
    import json

    from ipukern.cli import main
    out = tmp_path / "run"
    rc = main(["train", "--costs", _costs_file(tmp_path), "--system", "M2000", "--micro-batch", "2",
               "--gradient-accumulation", "4", "--ipus-per-replica", "2", "--pipeline", "l2",
               "--epochs", "1", "--dataset-size", "1000", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "2 replicas x 2 IPU(s)" in text and "time to train" in text
    rows = list(csv.DictReader(open(out / "train.csv")))
    assert len(rows) == 4 and rows[0]["stage"] == "0"
    data = json.loads((out / "train.json").read_text())
    assert data["stages"] == [["l0", "l1"], ["l2", "l3"]]
    assert (data["schema"], data["schema_version"]) == ("ipukern.training", 1)
    pytest.importorskip("matplotlib")
    assert (out / "train.png").stat().st_size > 1000


def test_cli_errors_are_one_line(tmp_path, capsys):
    from ipukern.cli import main
    f = _costs_file(tmp_path)
    assert main(["train", "--costs", f, "--pipeline", "conv9", "--ipus-per-replica", "2",
                 "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "conv9" in err[0]
    assert main(["train", "--costs", f, "--replicas", "9", "--ipus-per-replica", "2", "--system", "POD16",
                 "--out", str(tmp_path / "x")]) == 1
    assert "18 IPUs" in capsys.readouterr().err
    assert main(["compare", "--costs", f, "--training", "--systems", "POD16,POD64",
                 "--prices", "POD16=1e6"]) == 0
    out = capsys.readouterr().out
    assert "POD16" in out and "POD64" in out
    assert main(["compare", "--costs", f, "--training", "--systems", "DGX_A100"]) == 1
    assert "need a MODEL" in capsys.readouterr().err
    # a failing system after a good one: one error line and no partial table (an unknown
    # name is a usage error: exit 2, like an unknown --machine)
    assert main(["compare", "--costs", f, "--training", "--systems", "POD16,NOPE"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.strip().splitlines()) == 1 and "NOPE" in cap.err


def test_host_io_synchronous_per_pipeline_cycle_and_per_host():
    c = costs(n=4)
    # POD64: 4 hosts; 32 two-IPU replicas, 8 per host, one micro-batch per pipeline cycle
    est = ik.estimate_training(system=ik.IPU_POD64, micro_batch=2, gradient_accumulation=5,
                               ipus_per_replica=2, pipeline=["l2"], costs=c, sample_bytes=1000)
    per_mb = math.ceil(32 / 4) * 2 * 1000 / 25e9
    assert est.info["parts_s"]["host I/O"] == pytest.approx((5 + 2 - 1) * per_mb)


def test_io_tiles_overlap_host_io_and_shrink_the_compute_chip():
    net = ik.models.resnet8()
    base = dict(micro_batch=4, gradient_accumulation=2, replicas=1, sample_bytes=10**6)
    sync = ik.estimate_training(net, ik.IPU_M2000, **base)
    over = ik.estimate_training(net, ik.IPU_M2000, io_tiles=64, **base)
    assert over.info["host_io_overlapped"] and over.info["io_tiles"] == 64
    host = 2 * 4 * 10**6 / 25e9
    assert sync.info["parts_s"]["host I/O"] == pytest.approx(host)
    compute = over.info["parts_s"]["pipeline compute"]
    assert over.info["parts_s"]["host I/O"] == pytest.approx(max(0.0, host - compute))
    # fewer compute tiles: the passes cannot get faster
    assert compute >= sync.info["parts_s"]["pipeline compute"]


@pytest.mark.parametrize("bad, err", [(-1, ValueError), (1472, ValueError), (True, TypeError),
                                      (1.5, TypeError)])
def test_io_tiles_bad_values_are_refused(bad, err):
    with pytest.raises(err, match="io_tiles"):
        ik.estimate_training(ik.models.resnet8(), ik.IPU_M2000, micro_batch=1, replicas=1, io_tiles=bad)


def test_io_tiles_need_a_network():
    with pytest.raises(ValueError, match="io_tiles needs a network"):
        ik.estimate_training(system=ik.IPU_M2000, micro_batch=1, costs=costs(), io_tiles=8)


def test_cli_io_tiles(tmp_path, capsys):
    import json

    from ipukern.cli import main
    out = str(tmp_path / "t")
    assert main(["train", "resnet8", "--system", "M2000", "--micro-batch", "2", "--io-tiles", "32",
                 "--out", out]) == 0
    info = json.loads((tmp_path / "t" / "train.json").read_text())["info"]
    assert info["io_tiles"] == 32 and info["host_io_overlapped"]
    capsys.readouterr()
    assert main(["train", "resnet8", "--system", "M2000", "--io-tiles", "-3", "--out", out]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "io_tiles" in err[0]
    assert main(["train", "resnet8", "--system", "M2000", "--execute", "--io-tiles", "8", "--out", out]) == 1
    assert "apply to estimates" in capsys.readouterr().err


@pytest.mark.parametrize("seed", range(6))
def test_auto_split_table_matches_the_loop(seed):
    # the NumPy table of the lazy per-tile check gives the loop's split, ties included
    import importlib
    import random
    mod = importlib.import_module("ipukern.systems.training")
    rng = random.Random(seed)
    n, stages = rng.randint(4, 40), rng.randint(1, 4)
    costs = [mod.LayerCost(f"l{k}", rng.choice([0, 5, 7, 100]), rng.randint(0, 50), 0, 0, 0, 0)
             for k in range(n)]
    cyc = [[c.fwd_cycles + c.bwd_cycles + s for c in costs] for s in range(stages)]
    bad = {(rng.randrange(stages), i, rng.randint(i + 1, n)) for i in rng.sample(range(n), min(n, 12))}
    loop = lambda s, i, j: (s, i, j) not in bad  # noqa: E731
    try:
        want = mod._auto(costs, stages, loop, lambda s: cyc[s])
    except mod.StageMemoryError:
        with pytest.raises(mod.StageMemoryError):
            mod._auto(costs, stages, bad, lambda s: cyc[s])
        return
    assert mod._auto(costs, stages, bad, lambda s: cyc[s]) == want


def test_host_sync_counts_the_critical_path_host_exchanges():
    """One handshake per synchronous input copy (a pipeline cycle each) plus the step's output
    copy; with I/O tiles only the output copy; it scales with System.host_sync_s and is sourced."""
    c = costs(n=4)
    kw = dict(micro_batch=2, ipus_per_replica=2, pipeline=["l2"], costs=c, sample_bytes=1000)
    est = ik.estimate_training(system=ik.IPU_POD16, gradient_accumulation=5, **kw)
    assert est.info["host_syncs"] == (5 + 2 - 1) + 1
    assert est.info["parts_s"]["host sync"] == pytest.approx(7 * ik.IPU_POD16.host_sync_s)
    assert "gc-hostsynclatencytest" in est.info["part_sources"]["host sync"]
    assert "host sync" in dict(ik.IPU_POD16.sources)
    more = ik.estimate_training(system=ik.IPU_POD16, gradient_accumulation=9, **kw)
    assert more.info["host_syncs"] == 11       # one more per extra micro-batch
    slow = ik.IPU_POD16.replace(host_sync_s=1e-3)
    est2 = ik.estimate_training(system=slow, gradient_accumulation=5, **kw)
    assert est2.info["parts_s"]["host sync"] == pytest.approx(7e-3)
    assert est2.step_seconds - est.step_seconds == pytest.approx(7 * (1e-3 - ik.IPU_POD16.host_sync_s))
    assert all(r["host_sync_s"] == pytest.approx(7e-3) for r in est2.breakdown)
    assert any(p["phase"] == "host sync" for p in est2.schedule())
    net = ik.models.resnet8()
    over = ik.estimate_training(net, slow, micro_batch=4, gradient_accumulation=2, replicas=1,
                                sample_bytes=10**3, io_tiles=64)
    assert over.info["host_syncs"] == 1 and over.info["parts_s"]["host sync"] == pytest.approx(1e-3)
    with pytest.raises(ik.SystemConfigError, match="host_sync_s"):
        ik.IPU_POD16.replace(host_sync_s=-1.0)
