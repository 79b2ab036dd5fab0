"""Optimizer state precision (``optimizer_state_dtype``): per-tile bytes by hand, the update's
cycles from the popops half/float rates, streamed bytes, systems estimates, bad input."""
import math

import numpy as np
import pytest

import ipukern as ik
from ipukern.core.cost import ELEMENTWISE_WORKER_OVERHEAD, SUPERVISOR_OVERHEAD
from ipukern.nn.layers import PlanContext
from ipukern.nn.training import training_schedule
from ipukern.ops.optim import optimizer_vertex_cycles, state_dtypes, update_dtype
from tests._support.nets import tiny_cnn

CTX = PlanContext(ik.GC200, "float16", "float16")


@pytest.fixture(scope="module")
def net():
    return tiny_cnn(bn=True)


@pytest.mark.parametrize("opt, sdt, per_param", [("sgd_momentum", "float16", 2),
                                                 ("adam", "float16", 4),
                                                 ("lamb", ("float16", "float32"), 6),
                                                 ("lars", "float16", 2)])
def test_state_bytes_by_hand(net, opt, sdt, per_param):
    # float16 weights: float32 state is 4 bytes per state slot and parameter, float16 2
    rows, live32, w, _, _ = training_schedule(net, 4, CTX, optimizer=opt)
    _, live, w2, _, _ = training_schedule(net, 4, CTX, optimizer=opt, state_dtype=sdt)
    assert np.array_equal(w, w2)
    n_state = ik.get_optimizer(opt).n_state
    full = w * 4 * n_state // 2              # float32 state of float16 weights
    mine = w * per_param // 2
    np.testing.assert_array_equal(live32 - live, np.broadcast_to(full - mine, live.shape))
    if sdt == "float16":                     # the state's bytes halve exactly
        assert np.array_equal(2 * mine, full)


def test_profile_reports_state_bytes_and_type(net):
    kw = dict(batch=4, dtype="float16", partials="half", training=True, optimizer="adam")
    p32 = ik.estimate_network(net, **kw)
    p16 = ik.estimate_network(net, optimizer_state_dtype="float16", **kw)
    for p, per_param in ((p32, 8), (p16, 4)):
        mem = p.memory
        assert mem["tile_bytes_by_kind"]["optimizer state"] == mem["weights_bytes"] * per_param // 2
        assert sum(mem["tile_bytes_by_kind"].values()) == mem["peak_bytes"]
    assert p16.info["optimizer_state_dtype"] == ["float16", "float16"]
    assert p16.to_dict()["info"]["optimizer_state_dtype"] == ["float16", "float16"]
    assert "state float16/float16 (chip)" in p16.summary()
    assert "no float32 master copy" in p16.summary()
    assert p32.info["optimizer_state_dtype"] == ["float32", "float32"]


def _worker(n, workers, width, per_vector):
    return ELEMENTWISE_WORKER_OVERHEAD + math.ceil(math.ceil(n / workers) / width) * per_vector


def test_update_cycles_follow_the_popops_half_and_float_rates():
    m, n = ik.GC200, 1200
    w = m.n_workers
    mom = ik.Optimizer("sgd_momentum")
    # 3 loads, 2 stores, 5 multiply/add vectors: 2 floats or 4 halves per 64-bit vector
    f32 = w * _worker(n, w, 2, 3 + 2 + 5) + SUPERVISOR_OVERHEAD
    f16 = w * _worker(n, w, 4, 3 + 2 + 5) + SUPERVISOR_OVERHEAD
    assert optimizer_vertex_cycles(m, mom, [n], dtype="float32")[0] == f32
    assert optimizer_vertex_cycles(m, mom, [n], dtype="float16")[0] == f16
    # Adam: half SQRT 23 and DIVIDE 21 per 4 elements against float 10 per 2
    adam = ik.Optimizer("adam")
    ops16 = 3 + 4 + 23 + 21 + 1 + 21 + 2
    ops32 = 3 + 4 + 10 + 10 + 1 + 10 + 2
    assert optimizer_vertex_cycles(m, adam, [n], dtype="float16")[0] == \
        w * _worker(n, w, 4, 7 + ops16) + SUPERVISOR_OVERHEAD
    assert optimizer_vertex_cycles(m, adam, [n], dtype="float32")[0] == \
        w * _worker(n, w, 2, 7 + ops32) + SUPERVISOR_OVERHEAD
    # the update computes in half only when weights and every state slot are half
    assert update_dtype("adam", "float16", "float16") == "float16"
    assert update_dtype("adam", "float16", ("float16", "float32")) == "float32"
    assert update_dtype("adam", "float32", "float16") == "float32"
    assert update_dtype("sgd", "float16", "float16") == "float32"


def test_optimizer_row_cycles_and_streamed_bytes(net):
    shapes = [s for k, s in net.param_shapes().items() if not k.endswith(("running_mean", "running_var"))]
    n = sum(int(np.prod(s)) for s in shapes)
    kw = dict(optimizer="sgd_momentum", dtype="float16")
    chip32 = ik.estimate_optimizer_step(shapes, **kw).total_cycles
    chip16 = ik.estimate_optimizer_step(shapes, state_dtype="float16", **kw).total_cycles
    assert chip16 < chip32                    # half vertices: 4 elements per vector
    mixed = ik.estimate_optimizer_step(shapes, optimizer="adam", dtype="float16",
                                       state_dtype=("float16", "float32")).total_cycles
    assert mixed == ik.estimate_optimizer_step(shapes, optimizer="adam", dtype="float16").total_cycles
    host32 = ik.estimate_optimizer_step(shapes, state_location="host", **kw).total_cycles
    host16 = ik.estimate_optimizer_step(shapes, state_location="host", state_dtype="float16",
                                        **kw).total_cycles
    m = ik.GC200

    def stream(nbytes):                      # in and out over the host link
        return 2 * math.ceil(nbytes * m.clock_hz / m.host_bytes_per_second)
    # the two host-link supersteps' fixed costs (syncs) cancel; their transfer halves
    assert (host32 - chip32) - (host16 - chip16) == stream(4 * n) - stream(2 * n) > 0
    # the network's optimizer row is that step
    prof = ik.estimate_network(net, batch=4, dtype="float16", partials="half", training=True,
                               optimizer="sgd_momentum", optimizer_state_dtype="float16")
    row = next(r for r in prof.layers if r["pass"] == "update")
    assert row["cycles"] == chip16


def test_systems_state_bytes_update_and_streaming_by_hand():
    c = [ik.LayerCost(f"l{i}", 1000, 2000, 1000, 10_000_000, 4096, 4096) for i in range(4)]
    kw = dict(system=ik.IPU_POD16, micro_batch=2, gradient_accumulation=4, costs=c, sample_bytes=0)
    p = 4e7
    e32 = ik.estimate_training(**kw)
    e16 = ik.estimate_training(optimizer_state_dtype="float16", **kw)
    assert e32.breakdown[0]["memory_bytes"] - e16.breakdown[0]["memory_bytes"] == p * 2
    clock = ik.IPU_POD16.chip.clock_hz
    for e, sb in ((e32, 4), (e16, 2)):
        assert e.breakdown[0]["optimizer_s"] == pytest.approx(p * (3 * 2 + 2 * sb) / (1472 * 16) / clock)
    s32 = ik.estimate_training(optimizer_state="streaming", **kw)
    s16 = ik.estimate_training(optimizer_state="streaming", optimizer_state_dtype="float16", **kw)
    assert s16.breakdown[0]["streaming_s"] == pytest.approx(s32.breakdown[0]["streaming_s"] / 2)
    lamb = ik.estimate_training(optimizer="lamb", optimizer_state_dtype=("float16", "float32"), **kw)
    lamb32 = ik.estimate_training(optimizer="lamb", **kw)
    assert lamb32.breakdown[0]["memory_bytes"] - lamb.breakdown[0]["memory_bytes"] == p * 2
    assert e16.info["optimizer_state_dtype"] == ["float16"]
    assert "optimizer state float16" in e16.summary()


@pytest.mark.parametrize("bad, err", [("int8", ValueError), ("bfloat16", ValueError), (3, TypeError),
                                      (None, TypeError), (("float16",), ValueError),
                                      (("float16", 8), TypeError)])
def test_bad_state_dtype_is_a_one_line_error(net, bad, err):
    with pytest.raises(err) as e:
        state_dtypes("adam", bad)
    assert "\n" not in str(e.value) and "optimizer_state_dtype" in str(e.value)
    with pytest.raises(err):
        ik.estimate_network(net, batch=2, training=True, optimizer="adam", optimizer_state_dtype=bad)
    with pytest.raises(err):
        ik.estimate_training(system="M2000", micro_batch=1, optimizer="adam", optimizer_state_dtype=bad,
                             costs=[ik.LayerCost("l", 1, 1, 1, 10, 0, 0)])
    with pytest.raises(err):
        ik.estimate_optimizer_step([(4, 4)], optimizer="adam", state_dtype=bad)


def test_state_dtype_applies_to_training_only(net):
    with pytest.raises(ValueError, match="training=True"):
        ik.estimate_network(net, batch=2, optimizer_state_dtype="float16")


def test_cli_state_dtype(tmp_path, capsys):
    import json

    from ipukern.cli import main
    f = tmp_path / "c.json"
    f.write_text(json.dumps([{"name": f"l{i}", "fwd_cycles": 1000, "bwd_cycles": 2000, "wu_cycles": 1000,
                              "n_params": 1000, "stash_bytes": 64, "out_bytes": 64} for i in range(2)]))
    base = ["train", "--costs", str(f), "--system", "M2000", "--micro-batch", "2",
            "--out", str(tmp_path / "t")]
    assert main(base + ["--optimizer-state-dtype", "float16"]) == 0
    assert "optimizer state float16" in capsys.readouterr().out
    doc = json.loads((tmp_path / "t" / "train.json").read_text())
    assert doc["info"]["optimizer_state_dtype"] == ["float16"]
    assert main(base + ["--optimizer", "lamb", "--optimizer-state-dtype", "float16,float32"]) == 0
    capsys.readouterr()
    assert main(base + ["--optimizer", "lars", "--optimizer-state-dtype", "float16"]) == 0
    capsys.readouterr()
    # not an optimizer: argparse names the choices, exit 2
    with pytest.raises(SystemExit) as e:
        main(base + ["--optimizer", "rmsprop"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "rmsprop" in err and "lars" in err
    # a slot count that does not match the optimizer: one line, exit 1
    assert main(base + ["--optimizer", "lamb", "--optimizer-state-dtype", "float16,float32,float16"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "state slot" in err[0]
    # not a type: argparse's one line, exit 2
    with pytest.raises(SystemExit) as e:
        main(base + ["--optimizer-state-dtype", "int8"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "int8" in err[0]
