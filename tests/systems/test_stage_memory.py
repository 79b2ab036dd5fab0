"""Per-tile memory with liveness of pipeline stages (``ipukern.systems.stage_memory``): the
one-chip model restricted to a stage, the stash of the micro-batches in flight, and the
StageMemoryError naming the stage, IPU, tile, step, bytes and budget."""

import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import plan_context
from ipukern.nn.training import training_schedule
from ipukern.systems.stage_memory import in_flight, stage_liveness
from ipukern.systems.train_run import with_loss
from ipukern.systems.stage_memory import TileMemory

from tests._support.nets import data, tiny_cnn
from tests._support.train_check import CHIP


@pytest.fixture(scope="module")
def net():
    return tiny_cnn(bn=True)


def _tiles(net, *, recompute=False, m=1, state_bytes=0, checkpoints=None, stages=2):
    return TileMemory(net, 4, CHIP, "float32", "float", checkpoints, recompute, m, state_bytes, 1, stages)


def _live(tm, steps, k=1):
    return stage_liveness(tm.prog, tm.rows, steps, seg=tm.seg, checkpoints=tm.ckpt, n_in_flight=k,
                          outputs=tm.outputs, **tm.kw)


@pytest.mark.parametrize("checkpoints", [None, ["relu1"]])
def test_whole_network_as_one_stage_is_the_one_chip_liveness(net, checkpoints):
    tm = _tiles(net, checkpoints=checkpoints, stages=1)
    _, live, *_ = training_schedule(net, 4, plan_context("float32", "float", CHIP), recompute=checkpoints,
                                    optimizer=None)
    got = _live(tm, list(range(len(tm.prog.steps))))
    assert np.array_equal(got["live"], live)


def test_stage_stash_weights_and_micro_batches_in_flight_by_hand(net):
    # stage 0 = conv1, bn1, relu1 (split at conv2): across its forward -> backward boundary
    # it keeps x (conv1's weight update), conv1's output (bn1's backward) and relu1's output
    # (relu1's backward: popnn differentiates a ReLU from its output, so bn1's output, read
    # by no backward pass, dies at relu1's forward)
    tm = _tiles(net)
    nt = CHIP.n_tiles
    steps = [i for i, s in enumerate(tm.prog.steps) if s.node in ("conv1", "bn1", "relu1")]
    b = {n: tm.prog.layouts[n].bytes_per_tile(nt) for n in ("x", "conv1", "bn1", "relu1")}
    one = _live(tm, steps)
    assert np.array_equal(one["stash"], b["x"] + b["conv1"] + b["relu1"])
    w = sum(tm.prog.steps[i].plan.weight_bytes for i in steps)
    # conv1 (no bias), bn1 gamma and beta, float32
    assert np.array_equal(one["weights"], w) and w.sum() == 4 * (3 * 8 * 9 + 2 * 8)
    # k micro-batches in flight: k - 1 more stashes on every row
    three = _live(tm, steps, k=3)
    assert np.array_equal(three["live"] - one["live"], np.broadcast_to(2 * one["stash"], one["live"].shape))
    # stage recomputation keeps only the stage input and runs the forward rows twice
    rec = _live(_tiles(net, recompute=True), steps)
    assert np.array_equal(rec["stash"], b["x"])
    assert len(rec["row_names"]) == len(one["row_names"]) + sum(
        1 for n in one["row_names"] if n in ("conv1", "bn1.stats", "bn1", "relu1"))
    # optimizer state (float32 momentum: 4 bytes per parameter) on every row; float16
    # momentum (2 bytes per float32 parameter) is half of it
    mom = _live(_tiles(net, state_bytes=4), steps)
    assert np.array_equal(mom["live"] - one["live"], np.broadcast_to(w, one["live"].shape))
    half = _live(_tiles(net, state_bytes=2), steps)
    assert np.array_equal(half["live"] - one["live"], np.broadcast_to(w // 2, one["live"].shape))
    assert [in_flight(s, 4) for s in range(4)] == [7, 5, 3, 1]


def test_estimate_reports_per_tile_peak_and_caps_in_flight_at_the_micro_batches(net):
    lnet = with_loss(tiny_cnn())
    tiny = ik.System.pod(4, CHIP.replace(tile_bytes=64 * 1024, name="GC200-16-64K"))
    kw = dict(micro_batch=4, replicas=1, ipus_per_replica=4, pipeline=["res", "conv3", "fc"], dtype="float32",
              partials="float")
    est = ik.estimate_training(lnet, tiny, gradient_accumulation=1, **kw)
    r = est.breakdown[0]
    assert r["in_flight"] == 1 and r["fits"] and r["peak_tile_bytes"] <= r["tile_bytes"] == 64 * 1024
    assert r["busiest_step"] and 0 <= r["busiest_tile"] < 16 and "KiB on tile" in est.summary()
    # 8 micro-batches: stage 0 holds 7 stashes at once and no longer fits
    with pytest.raises(ik.StageMemoryError, match=r"stage 0 \(conv1 .. relu2\) on IPU 0 needs [\d,]+ B > "
                       r"budget 65,536 B on tile \d+ at '.+' \(per-tile liveness, 49,152 B reserved, "
                       r"7 micro-batch\(es\) in flight; .*in-flight stashes [\d.]+ KiB.*\)"):
        ik.estimate_training(lnet, tiny, gradient_accumulation=8, **kw)
    # "auto" finds a split that fits when one exists, or says none does
    auto = ik.estimate_training(lnet, tiny, gradient_accumulation=2, **{**kw, "pipeline": "auto"})
    assert all(r["fits"] for r in auto.breakdown)
    with pytest.raises(ik.StageMemoryError, match="no split"):
        ik.estimate_training(lnet, tiny, gradient_accumulation=8, **{**kw, "micro_batch": 8,
                                                                         "pipeline": "auto"})


def test_executed_step_checks_the_same_per_tile_fit():
    net = tiny_cnn()
    tiny = ik.System.pod(4, CHIP.replace(tile_bytes=64 * 1024, name="GC200-16-64K"))
    x, labels = data(32)
    with pytest.raises(ik.StageMemoryError, match=r"stage 0 \(conv1 .. relu2\) on IPU 0 .* on tile"):
        ik.run_training_step(net, x, labels, system=tiny, replicas=1, ipus_per_replica=4,
                             gradient_accumulation=8, pipeline=["res", "conv3", "fc"])


def test_available_memory_proportion_reaches_the_planner_and_the_stage_memory(tmp_path, capsys):
    # PopLibs' availableMemoryProportion (Graphcore's MLPerf ResNet-50 configs set 0.15) bounds
    # every pass's temporaries: a tight bound re-plans convs (slower, other working sets), and
    # the stage's per-tile memory is that of the re-planned passes
    lnet = with_loss(tiny_cnn())
    pod = ik.System.pod(4, CHIP)
    kw = dict(micro_batch=4, replicas=1, dtype="float32", partials="float", allow_overflow=True)
    got = {}
    for amp in (None, 0.01):
        est = ik.estimate_training(lnet, pod, available_memory_proportion=amp, **kw)
        tm = TileMemory(lnet, 4, CHIP, "float32", "float", None, False, 1, 4, 1, 1, amp)  # 4 B momentum
        assert est.breakdown[0]["peak_tile_bytes"] == tm(0, 0, len(lnet.layers))["peak_tile_bytes"]
        got[amp] = est
    assert got[0.01].step_seconds > got[None].step_seconds
    assert got[0.01].breakdown[0]["peak_tile_bytes"] != got[None].breakdown[0]["peak_tile_bytes"]
    with pytest.raises(ValueError, match="available_memory_proportion"):
        ik.estimate_training(lnet, pod, available_memory_proportion=1.5, **kw)
    with pytest.raises(ValueError, match="needs a network"):
        ik.estimate_training(system=pod, micro_batch=1, available_memory_proportion=0.2,
                             costs=[ik.LayerCost("l0", 1, 1, 1, 10, 0, 0)])
    from ipukern.cli import main
    out = str(tmp_path / "t")
    assert main(["train", "resnet8", "--system", "M2000", "--micro-batch", "2", "--recompute",
                 "--checkpoints", "layer1.0", "--out", out]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--checkpoints" in err[0]
    assert main(["train", "resnet8", "--system", "M2000", "--micro-batch", "2", "--execute",
                 "--available-memory-proportion", "0.15", "--out", out]) == 1
    assert "apply to estimates" in capsys.readouterr().err


def test_stage_tile_bytes_by_kind_sum_to_the_peak(net):
    lnet = with_loss(tiny_cnn())
    tiny = ik.System.pod(4, CHIP.replace(tile_bytes=64 * 1024, name="GC200-16-64K"))
    est = ik.estimate_training(lnet, tiny, micro_batch=4, replicas=1, ipus_per_replica=4,
                               pipeline=["res", "conv3", "fc"], dtype="float32", partials="float",
                               gradient_accumulation=4, allow_overflow=True)
    for r in est.breakdown:
        kinds = r["tile_bytes_by_kind"]
        assert sum(kinds.values()) == r["peak_tile_bytes"] and kinds["reserve"] == r["reserve_bytes"]
    # stage 0 of 4 holds min(7, 4) micro-batches: 3 other stashes on every row
    first = est.breakdown[0]
    assert first["in_flight"] == 4 and first["tile_bytes_by_kind"]["in-flight stashes"] > 0
    assert "stage 0 tile" in est.summary()
