"""Receiving a fused conv step's windows and weights into host shadow rows
(ipukern.core.host.shadow): which bytes qualify, what is copied around them, which copies a
thread may skip, and the kernel's checks of the shadow arguments. That the arena and the
outputs stay the same bits is tested with the fused exchange (test_fused_exchange.py,
shadow rows poisoned)."""
from __future__ import annotations

import numpy as np
import pytest

from ipukern._kernels import _conv, _fused
from ipukern.core.host import fused
from ipukern.core.host import run as host_run
from ipukern.core.host.shadow import overlapping, repeat_plan, shadow_plan

from tests._support.conv_runs import conv_program, two_ways


def _cols(*rows):
    """Copy pieces (src_tile, src_off, dst_tile, dst_off, nbytes) from tuples."""
    a = np.array(rows, np.int64).reshape(-1, 5)
    return tuple(a[:, k].copy() for k in range(5))


def _intervals(tile, off, nb):
    return sorted(zip(np.asarray(tile).tolist(), np.asarray(off).tolist(), np.asarray(nb).tolist()))


NONE = [(np.zeros(0, np.int64),) * 3]


def test_pieces_inside_a_window_are_shadowed_and_the_rest_is_copied_from_the_tile():
    # tile 0: one vertex, window [0, 64), weights [64, 96); pieces [16, 48) and [64, 96)
    copies = _cols((1, 0, 0, 16, 32), (2, 8, 0, 64, 32))
    sh = shadow_plan(copies, np.array([0]), np.array([0]), np.array([64]), np.array([64]),
                     np.array([32]), NONE, NONE)
    assert sh is not None and sh.shadowed.tolist() == [True, True]
    assert sh.vflags.tolist() == [3]
    src_row, src_off, dst_off, nb, tile = sh.table
    got = sorted(zip(src_row.tolist(), src_off.tolist(), dst_off.tolist(), nb.tolist()))
    # the pieces, and the tile's own bytes [0, 16) and [48, 64) around them
    assert got == [(0, 0, 0, 16), (0, 48, 48, 16), (1, 0, 16, 32), (2, 8, 64, 32)]
    assert tile.tolist() == [0, 0, 0, 0]


def test_a_piece_reaching_out_of_its_window_keeps_the_window_in_the_arena():
    copies = _cols((1, 0, 0, 48, 32))          # [48, 80) crosses the window's end at 64
    assert shadow_plan(copies, np.array([0]), np.array([0]), np.array([64]), np.array([128]),
                       np.array([16]), NONE, NONE) is None


def test_outputs_and_other_steps_keep_their_bytes():
    copies = _cols((1, 0, 0, 16, 32), (1, 0, 1, 16, 32))
    tiles, win, wnb = np.array([0, 1]), np.array([0, 0]), np.array([64, 64])
    w, w_nb = np.array([64, 64]), np.array([0, 0])
    # tile 0's output overlaps its window: tile 0 stays in the arena, tile 1 is shadowed
    own = [(np.array([0]), np.array([60]), np.array([8]))]
    sh = shadow_plan(copies, tiles, win, wnb, w, w_nb, own, NONE)
    assert sh.shadowed.tolist() == [False, True] and sh.vflags.tolist() == [0, 1]
    # another step reading a piece's bytes on tile 1: tile 1 stays too
    others = [(np.array([1]), np.array([40]), np.array([4]))]
    assert shadow_plan(copies, tiles, win, wnb, w, w_nb, own, others) is None
    # another step touching only the tile's own bytes (copied, not replaced): shadowed
    others = [(np.array([1]), np.array([0]), np.array([16]))]
    assert shadow_plan(copies, tiles, win, wnb, w, w_nb, NONE, others).shadowed.all()


def test_overlapping_by_hand():
    got = overlapping([0, 0, 1, 1], [0, 10, 0, 5], [10, 5, 4, 0],
                      [0, 1], [9, 2], [1, 10])
    assert got.tolist() == [True, False, True, False]   # empty intervals overlap nothing


def test_repeated_copies_by_hand():
    #            src_row, src_off, dst_off, nbytes, tile
    rows = [(5, 100, 0, 32, 10), (0, 32, 32, 32, 10), (7, 0, 200, 8, 10), (7, 8, 208, 8, 10),
            (5, 100, 0, 16, 11),      # inside item 0's first copy: repeated
            (5, 116, 16, 16, 11),     # likewise
            (0, 32, 32, 32, 11),      # same source row and shift: repeated
            (5, 100, 4, 8, 11),       # another shift: needed
            (6, 0, 100, 8, 11),       # another row: needed
            (7, 0, 200, 16, 11)]      # across two adjacent copies of item 0: repeated
    a = np.array(rows, np.int64)
    table = (a[:, 0].astype(np.int32), a[:, 1], a[:, 2], a[:, 3], a[:, 4])
    items = np.array([10, 11])
    out, mid = repeat_plan(table, items, 1)
    assert mid.tolist() == [4, 6]                  # item 0: none repeated; item 1: 4 of 6
    rep = set(zip(out[0][6:].tolist(), out[2][6:].tolist(), out[3][6:].tolist()))
    assert rep == {(5, 0, 16), (5, 16, 16), (0, 32, 32), (7, 200, 16)}
    need = set(zip(out[0][4:6].tolist(), out[2][4:6].tolist()))
    assert need == {(5, 4), (6, 100)}
    _, mid2 = repeat_plan(table, items, 2)         # item 1 follows nothing on its thread
    assert mid2.tolist() == [4, 10]


def _fused_step(prog):
    """The program's first FusedStep (an expandDims program starts with its own exchange)."""
    return next(f for f in (host_run.fused_step(prog, i) for i in range(len(prog.steps)))
                if isinstance(f, fused.FusedStep))


@pytest.mark.parametrize("case", ["plain 3x3 padded", "grouped strided", "depthwise",
                                  "1x1 strided", "fp16 half partials"])
def test_planned_convs_receive_into_shadow_rows(case):
    cp = conv_program(case)
    f = _fused_step(cp.program)
    assert f is not None and f.shadow is not None
    t, o, n = f.unwritten
    assert n.sum() > 0
    base, *runs = two_ways(cp.program, cp.device.arena.data, threads=(2,))
    for r in runs:
        assert np.array_equal(r, base)


def test_an_out_channel_split_repeats_windows_on_a_thread():
    # 24 output channels over several tiles of one window: consecutive items on a thread
    # receive the same window, so some copies are marked repeated at 2 threads
    cp = conv_program("plain 3x3 padded")
    f = _fused_step(cp.program)
    data = cp.device.arena.data
    kw = f._shadow_kwargs(data, 2)
    assert (kw["sh_mid"] < kw["sh_lo"][1:]).any()


def _kernel_args(f, data, n_threads=2):
    scratch = np.zeros((n_threads, f.scratch_floats), np.float32)
    args = [data, *f.copies, f.copy_lo, f.vert_lo, f.tiles, f.win, f.w, f.out, f.dims, f.vbatch,
            f.bparams, scratch, n_threads, True, None, None, None]
    return args, dict(f._shadow_kwargs(data, n_threads))


@pytest.mark.parametrize("bad", ["missing", "misaligned", "short", "range", "flags", "mid",
                                 "stride"])
def test_exchange_conv_refuses_bad_shadow_arguments(bad):
    cp = conv_program("plain 3x3 padded")
    f = _fused_step(cp.program)
    data = cp.device.arena.data
    # the program's other steps have not run: compare with the unfused pair only
    args, kw = _kernel_args(f, data)
    start = data.copy()
    if bad == "missing":
        del kw["sh_lo"]
    elif bad == "misaligned":
        raw = np.zeros(kw["shadow"].size + 64, np.uint8)
        kw["shadow"] = raw[4:4 + kw["shadow"].size].reshape(kw["shadow"].shape)
    elif bad == "short":
        kw["shadow"] = np.ascontiguousarray(kw["shadow"][:, :64])
    elif bad == "range":
        kw["sh_nbytes"] = kw["sh_nbytes"].copy()
        kw["sh_nbytes"][0] = data.shape[1] + 1
    elif bad == "flags":
        kw["vflags"] = np.full_like(kw["vflags"], 4)
    elif bad == "mid":
        kw["sh_mid"] = kw["sh_lo"][1:] + 1
    elif bad == "stride":
        kw["repeat_stride"] = 0
    st = _fused.exchange_conv(*args, **kw)
    assert st in (_conv.STATUS_DIMS, _conv.STATUS_ALIGN, _conv.STATUS_RANGE,
                  _conv.STATUS_PARAM, _conv.STATUS_THREADS)
    assert np.array_equal(data, start)         # nothing written


def test_exchange_conv_with_shadow_equals_without():
    cp = conv_program("plain 3x3 padded")
    f = _fused_step(cp.program)
    data = cp.device.arena.data
    start = data.copy()
    t, o, nb = f.unwritten
    # the same step without a shadow receive (every copy into the arena)
    plain = fused.FusedStep(f.exchange, f.compute, [b.codelet.fused_vertices(b)
                                                   for b in f.compute.batches if b.tiles.size])
    assert plain.shadow is None
    for n in (1, 2, 3):
        data[...] = start
        assert _fused.exchange_conv(*_kernel_args(plain, data, n)[0]) == 0
        want = data.copy()
        args, kw = _kernel_args(f, data, n)
        for rerun in range(2):      # the second run finds the first one's shadow rows
            data[...] = start
            if rerun == 0:
                kw["shadow"].fill(0xFF)
            assert _fused.exchange_conv(*args, **kw) == 0
            got = data.copy()
            for ti, oi, ni in zip(t, o, nb):   # the receive bytes keep their old contents
                assert np.array_equal(got[ti, oi:oi + ni], start[ti, oi:oi + ni])
                got[ti, oi:oi + ni] = want[ti, oi:oi + ni]
            assert np.array_equal(got, want)


def _unfused_then_fused(prog, data: np.ndarray) -> list[np.ndarray]:
    """The arena after ``prog`` ran on ``data`` without fusion, then with it (2 threads),
    both from ``data``'s bytes."""
    start = data.copy()
    runs = []
    for flag in (False, True):
        data[...] = start
        old, fused.FUSED_EXCHANGE = fused.FUSED_EXCHANGE, flag
        try:
            host_run.execute(prog, data, 2)
        finally:
            fused.FUSED_EXCHANGE = old
        runs.append(data.copy())
    return runs


def test_a_step_added_later_that_reads_a_received_byte_keeps_it_in_the_arena():
    from ipukern.core.program import Superstep
    cp = conv_program("plain 3x3 padded")
    prog, dev = cp.program, cp.device
    f = _fused_step(prog)
    t, o, n = (int(v[0]) for v in f.unwritten)   # a byte block received into a shadow row
    spy = dev.alloc("spy", np.full(dev.machine.n_tiles, n), "outputs")
    look = dev.exchange([t], [o], [t], [int(spy[t])], [n], name="spy")
    prog.steps.append(Superstep("spy", exchange=look))
    data = dev.arena.data                          # (grown for the spy buffer if need be)
    g = _fused_step(prog)
    assert g is not f                              # checked again: the program changed
    assert not any(tt == t and oo <= o < oo + nn for tt, oo, nn in zip(*g.unwritten))
    runs = _unfused_then_fused(prog, data)
    s0 = int(spy[t])
    assert np.array_equal(runs[0][t, s0:s0 + n], runs[1][t, s0:s0 + n])


def test_an_arena_of_odd_rows_receives_into_the_arena():
    # a hand-made arena whose rows are not whole 64-byte lines: no shadow row can sit like
    # its rows, so the step copies into the arena, with the same results
    cp = conv_program("plain 3x3 padded")
    prog, data = cp.program, cp.device.arena.data
    f = _fused_step(prog)
    odd = np.zeros((data.shape[0], data.shape[1] + 8), np.uint8)
    odd[:, :data.shape[1]] = data
    runs = _unfused_then_fused(prog, odd)
    assert f.shadow is not None and f._plain is not None and f._plain.shadow is None
    # equal but for the partials receive buffer a ReduceStep leaves unwritten; the window
    # and weight receive buffers included
    from ipukern.core.host.fused_reduce import ReduceStep
    for i in range(len(prog.steps)):
        r = host_run.fused_step(prog, i)
        if isinstance(r, ReduceStep):
            for t, o, n in zip(*r.unwritten):
                runs[0][t, o:o + n] = runs[1][t, o:o + n] = 0
    assert np.array_equal(runs[0], runs[1])


def test_fuse_refuses_steps_that_do_not_hold_the_pair():
    cp = conv_program("plain 3x3 padded")
    prog = cp.program
    i = next(k for k in range(len(prog.steps)) if isinstance(host_run.fused_step(prog, k), fused.FusedStep))
    x, c = prog.steps[i].exchange, prog.steps[i + 1].compute
    assert fused.fuse(x, c, prog.steps, i) is not None
    for bad in (i + 1, -1, len(prog.steps), "0", None):
        with pytest.raises(ValueError, match="steps"):
            fused.fuse(x, c, prog.steps, bad)


def _step_index(prog, f):
    return next(i for i in range(len(prog.steps)) if host_run.fused_step(prog, i) is f)


@pytest.mark.parametrize("case", ["plain 3x3 padded", "grouped strided", "1x1 strided"])
def test_a_shadow_hint_rebuilds_the_same_step(case):
    """FusedStep.hint() fed back to fuse() (what a second process reads from the table
    cache) gives the step its plan and per-thread arguments without planning, and the
    arena the same bytes as the step planned afresh."""
    cp = conv_program(case)
    prog, data = cp.program, cp.device.arena.data
    f = _fused_step(prog)
    i = _step_index(prog, f)
    start = data.copy()
    f._shadow_kwargs(data, 2)
    h = f.hint()
    assert h is not None and sorted(h.args) == [2]
    g = fused.fuse(f.exchange, f.compute, prog.steps, i, h)
    assert g.shadow is h.plan and g._shadow_args[2]["sh_lo"] is h.args[2][5]
    for step in (f, g):
        data[...] = start
        step.run(data, 2)
        if step is f:
            want = data.copy()
    assert np.array_equal(data, want)


@pytest.mark.parametrize("bad", ["plan length", "flags", "range", "lo", "mid", "not receive-only"])
def test_a_shadow_hint_that_does_not_fit_is_planned_again(bad):
    cp = conv_program("plain 3x3 padded")
    prog, data = cp.program, cp.device.arena.data
    f = _fused_step(prog)
    i = _step_index(prog, f)
    f._shadow_kwargs(data, 2)
    h = f.hint()
    pl, args = h.plan, {n: list(a) for n, a in h.args.items()}
    x = f.exchange
    if bad == "plan length":
        pl = type(pl)(pl.shadowed[:-1], pl.table, pl.vflags)
    elif bad == "flags":
        pl = type(pl)(pl.shadowed, pl.table, pl.vflags.astype(np.int64))
    elif bad == "range":
        t = list(pl.table)
        t[2] = t[2].copy()
        t[2][0] = 1 << 40
        pl = type(pl)(pl.shadowed, tuple(t), pl.vflags)
    elif bad == "lo":
        args[2][5] = args[2][5][::-1].copy()
    elif bad == "mid":
        args[2][6] = args[2][6] + (1 << 30)
    else:
        x = type(x).__new__(type(x))
        x.__dict__.update(f.exchange.__dict__)
        x.__dict__["receive_only"] = False
    hint = fused.ShadowHint(pl, {n: tuple(a) for n, a in args.items()})
    assert not fused.hint_fits(hint, x, f.compute, f.exchange._pieces()[0].size, f.tiles.size)
    if x is f.exchange:              # fuse() plans the step again, as without a hint
        g = fused.fuse(f.exchange, f.compute, prog.steps, i, hint)
        assert g.shadow is not hint.plan and g.shadow is not None
        assert np.array_equal(g.shadow.shadowed, f.shadow.shadowed)
        assert all(np.array_equal(a, b) for a, b in zip(g.shadow.table, f.shadow.table))
