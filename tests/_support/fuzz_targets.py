"""Targets of the fuzz suite (tests/test_fuzz.py), run inside its worker process
(:mod:`tests._support.fuzz_worker`).

Each target takes plain data (ints, floats, lists, strings) drawn by hypothesis in the
test process, calls the public API as a hostile user would, and checks what it promises:
either a clear error of an allowed type, or a result equal to an independent reference.
A crash (segfault, abort) kills only the worker; the test process reports it.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np

import ipukern as ik
from tests._support.reference import conv2d_nchw, exchange as ref_exchange

#: errors a public entry point may raise on bad input; anything else is a bug
ALLOWED = (ValueError, TypeError, ik.TileMemoryError)


def _machine(n_tiles: int) -> ik.MachineSpec:
    return ik.GC200.replace(n_tiles=n_tiles, name=f"GC200-{n_tiles}")


@ik.tile_function(per_element_cycles=2)
def add_one(x):
    for i in range(x.size):
        x[i] += np.float32(1)


@ik.tile_function(per_element_cycles=1)
def poke(x, where):
    """Writes x[where[0]]: an index chosen by the fuzzer, often outside the block."""
    x[np.int64(where[0])] = np.float32(5)


@ik.tile_function(per_element_cycles=1)
def raise_if_negative(x):
    for i in range(x.size):
        if x[i] < 0:
            raise ValueError("negative value in the block")


def exchange_table(n_tiles, alloc, rows, data_seed, validate=True):
    """Raw Device.exchange on a device with ``alloc`` bytes per tile, then run it.
    ``validate=False`` (the builders' flag, public) skips only the overlap checks: a table
    the checked path refuses must still be refused or run without harming the host."""
    dev = ik.Device(_machine(n_tiles))
    dev.alloc("buf", np.full(n_tiles, alloc))
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    if not validate:
        xch = dev.exchange(*cols, validate=False)
        try:
            dev.exchange(*cols)
        except ALLOWED:
            dev.run(dev.program([ik.Superstep("x", exchange=xch)]))   # overlaps: no reference
            return
    else:
        xch = dev.exchange(*cols)
    data = dev.arena.data
    data[:] = np.random.default_rng(data_seed).integers(0, 256, data.shape, dtype=np.uint8)
    want = ref_exchange(data.copy(), xch.src_tile, xch.src_offset, xch.dst_tile,
                       xch.dst_offset, xch.nbytes)
    dev.run(dev.program([ik.Superstep("x", exchange=xch)]))
    assert np.array_equal(data, want), "exchange result differs from the reference copy loop"
    assert xch.cycles >= 0


def graph_program(n_tiles, shape, grid, halo, pad, corners, seed):
    """Grid tensors with a halo: write, halo exchange, read back against NumPy."""
    g = ik.Graph(_machine(n_tiles))
    a = g.grid_tensor("a", shape, grid=grid, halo=halo, pad_value=pad)
    v = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    g.write(a, v)
    if halo == 0:
        b = g.linear_tensor("b", shape)
        g.run(g.program([ik.Superstep("c", exchange=g.copy(a, b))]))
        assert np.array_equal(g.read(b), v)
        return
    g.run(g.program([ik.Superstep("h", exchange=g.halo_exchange(a, corners=corners))]))
    assert np.array_equal(g.read(a), v)
    p = np.pad(v, halo, constant_values=np.float32(pad))
    geo = a.grid
    for i in range(geo.gy):
        for j in range(geo.gx):
            t = int(geo.tiles[i, j])
            ph, pw = a.local_shape(t)
            off = int(a.tile_offset[t])
            buf = g.device.arena.data[t, off:off + 4 * ph * pw].view(np.float32).reshape(ph, pw)
            want = p[geo.rows[i]:geo.rows[i] + ph, geo.cols[j]:geo.cols[j] + pw].copy()
            if not corners and halo:
                for y in (slice(0, halo), slice(ph - halo, ph)):
                    for x in (slice(0, halo), slice(pw - halo, pw)):
                        inside = (i > 0 if y.start == 0 else i < geo.gy - 1) and \
                                 (j > 0 if x.start == 0 else j < geo.gx - 1)
                        if inside:
                            want[y, x] = buf[y, x]          # corners not refreshed
            assert np.array_equal(buf, want), f"halo buffer of block ({i}, {j}) differs"


def graph_send(n_tiles, n, src_tile, dst_tile, src_start, dst_start, n_elems):
    """Graph.send with arbitrary integers (huge, negative, past the block)."""
    g = ik.Graph(_machine(n_tiles))
    a = g.tile_tensor("a", n)
    b = g.tile_tensor("b", n)
    va = np.arange(n_tiles * n, dtype=np.float32).reshape(n_tiles, n)
    g.write(a, va)
    g.write(b, np.zeros((n_tiles, n), np.float32))
    x = g.send(a, b, src_tile, dst_tile, src_start=src_start, dst_start=dst_start, n_elems=n_elems)
    g.run(g.program([ik.Superstep("s", exchange=x)]))
    got = g.read(b)
    k = n - src_start if n_elems is None else n_elems
    want = np.zeros((n_tiles, n), np.float32)
    want[dst_tile, dst_start:dst_start + k] = va[src_tile, src_start:src_start + k]
    assert np.array_equal(got, want)


def tile_functions(n_tiles, n, index, negative_at, threads):
    """Tile functions: a correct one, one indexing where the fuzzer says, one raising."""
    g = ik.Graph(_machine(n_tiles))
    x = g.linear_tensor("x", n)
    w = g.tile_tensor("w", 1, dtype="float32")
    v = np.zeros(n, np.float32)
    g.write(x, v)
    ik.set_num_threads(threads)
    try:
        g.run(g.program([ik.Superstep("a", compute=g.compute(add_one, x))]))
        assert np.array_equal(g.read(x), v + 1)
        g.write(w, np.full((n_tiles, 1), index, np.float32))
        before = g.device.arena.data.copy()
        # every vertex whose index lies in its block (NumPy rules) writes 5 there; the others
        # are refused and must leave every byte alone
        want = g.read(x)
        sizes = np.bincount(x.storage.mapping.tile, weights=x.storage.mapping.count,
                            minlength=n_tiles).astype(int)
        starts = np.cumsum(sizes) - sizes
        in_block = [(t, int(starts[t]) + index % int(sizes[t])) for t in range(n_tiles)
                    if sizes[t] and -sizes[t] <= index < sizes[t]]
        for _, e in in_block:
            want[e] = 5
        try:
            g.run(g.program([ik.Superstep("p", compute=g.compute(poke, x, w, tiles=x.tiles))]))
            assert len(in_block) == int((sizes > 0).sum()), "an out-of-block write was not refused"
        except ik.TileFunctionError:
            assert len(in_block) < int((sizes > 0).sum()), "an in-block write was refused"
        assert np.array_equal(g.read(x), want)
        changed = np.flatnonzero((g.device.arena.data != before).any(axis=1))
        assert set(changed.tolist()) <= {t for t, _ in in_block}, "memory of other tiles changed"
        if negative_at is not None:
            vals = np.zeros(n, np.float32)
            vals[negative_at % n] = -1
            g.write(x, vals)
            try:
                g.run(g.program([ik.Superstep("r", compute=g.compute(raise_if_negative, x))]))
                raise AssertionError("the tile function's exception was lost")
            except ValueError as err:
                assert "negative value" in str(err)
    finally:
        ik.set_num_threads(None)


def machine_spec(field, value):
    """MachineSpec.replace with any value: a clean spec or ValueError, never later garbage."""
    m = ik.GC200.replace(**{field: value})
    ik.estimate_matmul((64, 64), (64, 64), machine=m.replace(n_tiles=min(m.n_tiles, 64)))


def op_shapes(kind, shape_a, shape_b, extra):
    """estimate_* with arbitrary shapes and hyper-parameters."""
    m = _machine(16)
    if kind == "matmul":
        ik.estimate_matmul(shape_a, shape_b, machine=m)
    else:
        ik.estimate_conv2d(shape_a, shape_b, machine=m, **extra)


def op_values(kind, shape_a, shape_b, order, seed):
    """conv2d / matmul on small random data against float64 references."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape_a).astype(np.float32).astype(order)
    b = rng.standard_normal(shape_b).astype(np.float32).astype(order)
    m = _machine(16)
    if kind == "matmul":
        out = ik.matmul(a, b, machine=m).output
        want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    else:
        out = ik.conv2d(a, b, machine=m, padding=1).output
        want = conv2d_nchw(a.astype(np.float64), b.astype(np.float64), padding=1)
    assert np.allclose(out, want, rtol=1e-4, atol=1e-4), "result differs from the reference"


def cli(argv):
    """The command line: an exit code and one line on stderr, never a traceback."""
    from ipukern.cli import main
    err, outbuf = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(outbuf):
        try:
            rc = main(argv)
        except SystemExit as e:                                  # argparse usage errors
            rc = e.code
    text = err.getvalue()
    assert "Traceback" not in text, text
    if rc not in (0, None):
        assert rc in (1, 2), rc
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        assert len(lines) == 1, text                             # usage errors too


def machine_file(text, conv):
    """MachineSpec.from_toml on any text, then a small estimate on the machine it gives."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/m.toml"
        with open(path, "w") as f:
            f.write(text)
        m = ik.MachineSpec.from_toml(path)
    if conv:
        small = m.replace(n_tiles=min(m.n_tiles, 16))
        ik.estimate_conv2d((1, 4, 6, 6), (4, 4, 3, 3), padding=1, machine=small)


def conv_memory(amp, tile_bytes, shape, kernel):
    """estimate_conv2d with any available_memory_proportion on a tile of any size."""
    m = ik.GC200.replace(n_tiles=16, tile_bytes=tile_bytes, reserved_bytes_per_tile=0, name="fuzz")
    p = ik.estimate_conv2d(shape, kernel, padding=1, machine=m, available_memory_proportion=amp)
    assert p.total_cycles > 0


def system_collective(n, op, nbytes, domain):
    """System.pod of any size and a collective's closed-form time on it."""
    s = ik.System.pod(n, domain_ipus=domain)
    c = ik.collective_seconds(s, op, nbytes)
    assert c.seconds >= 0


def crash_for_the_harness_test():
    """Kill the worker the way a segfault would (used to test the harness only)."""
    import os
    import signal
    os.kill(os.getpid(), signal.SIGSEGV)
