"""An exchange run tile by tile together with the conv compute set after it
(ipukern.core.host.fused) leaves exactly the arena the two phases leave when run one after the
other, for any thread count; a pair where that would not hold is not fused."""
from __future__ import annotations

import numpy as np
import pytest

import ipukern as ik
from ipukern.conv import ConvParams
from ipukern.conv.codelet import ConvCodelet
from ipukern.core.host import fused
from ipukern.core.host import run as host_run
from ipukern.core.program import ExchangeError, Superstep

from tests._support.conv_runs import CONV_CASES, GC200_96, GC200_128, conv_program, run_plan, two_ways
from tests._support.nets import small_residual_net, small_residual_torch


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_fused_conv_program_leaves_the_same_arena(case):
    cp = conv_program(case)
    prog = cp.program
    assert any(host_run.fused_step(prog, i) is not None for i in range(len(prog.steps)))
    base, *runs = two_ways(prog, cp.device.arena.data)
    for r in runs:
        assert np.array_equal(r, base)


def test_partials_and_serial_slices_are_fused_where_valid():
    """An in-channel split (partials exchanged and reduced) with serial out-channel slices:
    the first exchange is fused with slice 0's conv; bits equal the two-pass run."""
    from ipukern.conv import Split
    p = ConvParams(batch=1, in_channels=8 * 25, out_channels=48, in_h=1, in_w=12, kernel_h=1,
                   kernel_w=1)
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=25), serial=3, machine=GC200_128)
    assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30)
    prog = cp.program
    assert host_run.fused_step(prog, 0) is not None
    base, *runs = two_ways(prog, cp.device.arena.data)
    for r in runs:
        assert np.array_equal(r, base)


def _hazard_program(source_is_output: bool):
    """Tile 0 and tile 1 each run one 1x1 conv vertex (4 channels -> 4, 8 columns) whose
    window arrives from the other tile by the exchange before. With ``source_is_output`` the
    exchange also copies tile 0's conv *output* bytes (as they were before the compute set)
    to tile 1: fused tile by tile, tile 1's copy would run after tile 0's vertex wrote them."""
    dev = ik.Device(GC200_96)
    C, K, N = 4, 4, 8
    win = dev.alloc("win", C * N * 4, "inputs")
    wts = dev.alloc("w", C * K * 4, "weights")
    out = dev.alloc("out", K * N * 4, "outputs")
    src = dev.alloc("src", C * N * 4, "inputs")
    spy = dev.alloc("spy", K * N * 4, "outputs")
    # window of tile t comes from tile 1 - t; the spy copy reads tile 0's output (or its src)
    st, so = [1, 0], [int(src[1]), int(src[0])]
    dt, do, nb = [0, 1], [int(win[0]), int(win[1])], [C * N * 4] * 2
    st.append(0)
    so.append(int(out[0]) if source_is_output else int(src[0]))
    dt.append(1)
    do.append(int(spy[1]))
    nb.append(K * N * 4)
    x = dev.exchange(st, so, dt, do, nb, name="windows")
    dims = np.array([[1, 1, C, K, 1, N, 1, N, 0, 0]] * 2, np.int64)
    batch = ik.VertexBatch(ConvCodelet((1, 1)), tiles=[0, 1],
                           args={"win": np.array(win[:2], np.int64), "w": np.array(wts[:2], np.int64),
                                 "out": np.array(out[:2], np.int64), "dims": dims},
                           cycles=[10, 10],
                           regions=[(win[:2], [C * N * 4] * 2), (wts[:2], [C * K * 4] * 2),
                                    (out[:2], [K * N * 4] * 2)])
    prog = dev.program([Superstep("x", exchange=x),
                        Superstep("conv", compute=dev.compute_set([batch], name="conv"))])
    rng = np.random.default_rng(5)
    data = dev.arena.data
    data[:2] = rng.integers(0, 64, data[:2].shape, dtype=np.uint8)   # small finite floats
    return prog, x, data


def test_a_copy_reading_what_the_compute_set_writes_is_not_fused():
    prog, x, data = _hazard_program(True)
    out = prog.steps[1].compute.batches[0].args["out"]
    assert fused.reads_written(x.src_tile, x.src_offset, x.nbytes, np.array([0, 1]), out,
                               np.full(2, 128))
    assert not fused.reads_written(x.src_tile, x.src_offset, x.nbytes, np.array([0, 1]),
                                   out + 1000, np.full(2, 128))
    assert host_run.fused_step(prog, 0) is None
    base, *runs = two_ways(prog, data)
    for r in runs:
        assert np.array_equal(r, base)
    # the check matters: forced, the fused order gives other bytes (tile 1's spy copy
    # reads tile 0's freshly written output)
    b = prog.steps[1].compute.batches[0]
    forced = fused.FusedStep(x, prog.steps[1].compute, [b.codelet.fused_vertices(b)])
    start = data.copy()
    forced.run(data, 1)
    assert not np.array_equal(data, base)
    data[...] = start


def test_reads_written_by_hand():
    t, rd = np.array([0, 2]), np.array([100, 100])
    for w_tile, w_off, w_nb, want in [([0], [200], [8], False),     # touching the end
                                      ([0], [199], [8], True),      # one byte inside
                                      ([1], [100], [100], False),   # another tile
                                      ([2], [50], [51], True),      # the first byte
                                      ([2], [50], [50], False),     # touching the start
                                      ([0, 2], [0, 0], [0, 500], True),
                                      ([2], [120], [0], False)]:    # empty write
        got = fused.reads_written(t, rd, np.array([100, 100]), np.array(w_tile),
                                  np.array(w_off), np.array(w_nb))
        assert got is want, (w_tile, w_off, w_nb)


def test_the_same_program_without_the_hazard_is_fused():
    prog, x, data = _hazard_program(False)
    assert host_run.fused_step(prog, 0) is not None
    base, *runs = two_ways(prog, data)
    for r in runs:
        assert np.array_equal(r, base)


def test_fusion_skips_pairs_it_cannot_run_and_follows_edited_steps():
    prog, x, data = _hazard_program(False)
    step = host_run.fused_step(prog, 0)
    assert host_run.fused_step(prog, 0) is step            # cached
    assert host_run.fused_step(prog, 1) is None            # no step after the last
    prog.steps[1] = Superstep("nothing")         # a program edited after its first run
    assert host_run.fused_step(prog, 0) is None
    assert fused.fuse(None, None) is None


def test_a_fused_run_still_checks_the_arena():
    prog, x, data = _hazard_program(False)
    with pytest.raises(ExchangeError, match="arena"):
        host_run.execute(prog, data[:, :16].copy(), 1)
    with pytest.raises(ExchangeError, match="uint8"):
        host_run.fused_step(prog, 0).run(data.view(np.int16), 1)
    with pytest.raises(ValueError, match="threads"):
        host_run.execute(prog, data, 0)


def test_small_network_bits_with_and_without_fusion_at_1_2_3_threads(monkeypatch):
    net, params, x, small = small_residual_net(2)
    monkeypatch.setattr(fused, "FUSED_EXCHANGE", False)
    want = ik.run_network(net, x, params, machine=small)
    monkeypatch.setattr(fused, "FUSED_EXCHANGE", True)
    monkeypatch.setattr(fused.FusedStep, "poison_shadow", True)
    try:
        for n in (1, 2, 3):
            ik.set_num_threads(n)
            got = ik.run_network(net, x, params, machine=small)
            assert np.array_equal(got.output.view(np.uint32), want.output.view(np.uint32))
            assert got.profile.total_cycles == want.profile.total_cycles
    finally:
        # back to the default (restoring get_num_threads()'s value would pin it, and a later
        # test reading IPUKERN_NUM_THREADS would see the pinned count)
        ik.set_num_threads(None)
    torch = pytest.importorskip("torch")
    ref = small_residual_torch(torch, params, x)
    assert np.abs(want.output - ref).max() <= 1e-4 * np.abs(ref).max()
