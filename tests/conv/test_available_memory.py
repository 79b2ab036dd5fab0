"""PopLibs' availableMemoryProportion: the planner bounds a conv's temporary bytes per tile
by a share of the tile (default 0.6), doubles the bound as PopLibs does when nothing meets it, and
the public conv / matmul / network APIs take it as a parameter."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.conv import (AVAILABLE_MEMORY_PROPORTION, ConvParams, build_conv_program, plan_conv,
                          temp_bytes_bound)

from tests._support.reference import conv2d_nchw

M = ik.GC200


def test_default_is_poplibs_share_of_the_whole_tile():
    assert AVAILABLE_MEMORY_PROPORTION == 0.6
    assert temp_bytes_bound(M, None) == int(638_976 * 0.6) == 383_385
    assert temp_bytes_bound(M, 0.16) == 102_236
    for bad in (0, -0.1, 1.5, "0.6", True, float("nan")):
        with pytest.raises(ValueError, match="available_memory_proportion"):
            temp_bytes_bound(M, bad)


def test_bert_feed_forward_is_planned_within_the_bound():
    # BERT-base FFN at batch 16 (2048 tokens): (2048 x 768) @ (768 x 3072) as the conv
    # input 768 chans x 3072 cols, 2048 out-chans. Against the whole tile the fastest plan
    # keeps a whole 768 x 280 window (430 KB) on every tile; under 0.6 x 638,976 B its
    # temporary bytes (all but the output) must stay <= 383,385 B.
    p = ConvParams(batch=1, in_channels=768, out_channels=2048, in_h=1, in_w=3072,
                   kernel_h=1, kernel_w=1, dtype="float16", partials="float16")
    whole = plan_conv(p, M, available_memory_proportion=1.0)
    dflt = plan_conv(p, M)
    assert whole.estimated_bytes_per_tile > 383_385
    assert dflt.temp_bytes_bound == 383_385
    prog = build_conv_program(dflt)
    used = {a.name: int(a.nbytes.max()) for a in prog.device.memory.allocations}
    temp = int(prog.device.memory.used.max()) - used["conv.output"]
    assert temp <= 383_385 < int(build_conv_program(whole).device.memory.used.max())
    assert dflt.estimated_cycles >= whole.estimated_cycles


def test_no_plan_within_the_bound_doubles_it_as_poplibs_does():
    # PopLibs' minimizeMemory (ConvPlan.cpp runPlanner): when no plan meets the bound, the
    # fastest plan within twice the bound, then four times ..., while below twice the tile;
    # only then the fastest plan at all (which needs 11,784 B per tile here)
    p = ConvParams.from_shapes((2, 64, 16, 16), (64, 64, 3, 3), padding=1, dtype="float32",
                               partials="float32")
    # (each of the direct and expandDims variants doubles its own bound: the direct one here)
    kw = dict(expand_dims="")
    tiny = plan_conv(p, M, available_memory_proportion=0.001, **kw)     # 638 B: nothing fits
    whole = plan_conv(p, M, available_memory_proportion=1.0, **kw)
    twice = plan_conv(p, M, available_memory_proportion=2 * 638 / 638_976, **kw)   # 1,276 B
    assert tiny.temp_bytes_bound == 0 and twice.temp_bytes_bound == 1276
    assert (tiny.method, tiny.split, tiny.serial) == (twice.method, twice.split, twice.serial)
    assert tiny.estimated_bytes_per_tile < whole.estimated_bytes_per_tile
    assert tiny.estimated_cycles > whole.estimated_cycles
    assert plan_conv(p, M, available_memory_proportion=0.001).temp_bytes_bound == 0
    # a bound whose doublings never meet a plan below twice the tile: the fastest plan
    big = ConvParams.from_shapes((1, 4, 8, 8), (4, 4, 1, 1), dtype="float32", partials="float32")
    assert (plan_conv(big, M, available_memory_proportion=0.001).split
            == plan_conv(big, M, available_memory_proportion=1.0).split)


def test_a_tight_bound_changes_the_plan_and_it_runs_exactly():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 64, 16, 16)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    loose = ik.conv2d(x, w, padding=1)
    tight = ik.conv2d(x, w, padding=1, available_memory_proportion=0.01)
    assert tight.plan.temp_bytes_bound == 6389 and tight.plan.split != loose.plan.split
    ref = conv2d_nchw(x.astype(np.float64), w.astype(np.float64), padding=1)
    mag = conv2d_nchw(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64), padding=1)
    assert np.all(np.abs(tight.output - ref) <= 1e-5 * mag)
    est = ik.estimate_conv2d(x.shape, w.shape, dtype="float32", padding=1,
                             available_memory_proportion=0.01)
    assert est.total_cycles == tight.profile.total_cycles != loose.profile.total_cycles


def test_public_apis_take_and_check_the_proportion():
    a = np.ones((64, 32), np.float32)
    b = np.ones((32, 48), np.float32)
    run = ik.matmul(a, b, available_memory_proportion=0.3)
    assert np.array_equal(run.output, a @ b)
    assert run.plan.temp_bytes_bound == int(638_976 * 0.3)
    assert ik.estimate_matmul(a.shape, b.shape, dtype="float32",
                              available_memory_proportion=0.3).total_cycles == run.profile.total_cycles
    net = ik.nn.Network("fc")
    net.output(net.add(ik.nn.Linear(32, 48), net.input("x", (32,)), name="fc"))
    prof = ik.estimate_network(net, batch=4, available_memory_proportion=0.3)
    assert prof.total_cycles > 0
    for call in (lambda: ik.estimate_conv2d((1, 4, 8, 8), (4, 4, 3, 3), available_memory_proportion=0),
                 lambda: ik.estimate_matmul((4, 4), (4, 4), available_memory_proportion=2),
                 lambda: ik.estimate_network(net, batch=4, available_memory_proportion="x")):
        with pytest.raises(ValueError, match="available_memory_proportion"):
            call()
