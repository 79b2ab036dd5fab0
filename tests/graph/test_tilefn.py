"""Tile functions: compile, run on every tile, user cycle estimates, errors users hit.

Numba compiles each tile function once per session (cached on disk across sessions); the
functions are module-level, as tile functions must be, and sizes stay small.
"""
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ipukern as ik
from ipukern.graph.tilefn import ArgViews

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- tile functions
@ik.tile_function(cycles=lambda x: 3 * x.size + 10)
def add_one(x):
    for i in range(x.size):
        x[i] += np.float32(1.0)


@ik.tile_function(per_element_cycles=1.5)
def axpy2(x, y):
    for i in range(x.size):
        y[i] = np.float32(2.0) * x[i] + y[i]


SEEN_SHAPES = []


def _scale_cycles(a, b):
    SEEN_SHAPES.append((a, b))
    return 6 * math.ceil(a.shape[0] / 6) * a.shape[1] + 7


@ik.tile_function(cycles=_scale_cycles)
def twice2d(a, b):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            b[i, j] = a[i, j] * np.float32(2.0) + np.float32(i)


@ik.tile_function(per_element_cycles=1)
def does_not_compile(x):
    x[0] = undefined_helper(x)  # noqa: F821 - the point of the test


@ik.tile_function(per_element_cycles=1)
def reads_a_global_tensor(x):
    x[0] = LEAKED[0]  # noqa: F821 - set by the test to a tensor


@ik.tile_function(per_element_cycles=1, boundscheck=True)
def runs_off_its_block(x):
    x[x.size] = 1.0


@pytest.fixture(scope="module")
def small():
    """A 64-tile machine keeps arenas and copy tables small."""
    return ik.GC200.replace(n_tiles=64, name="GC200-64")


# --------------------------------------------------------------------------- decorator
def test_decorator_rejects_what_numba_cannot_cache_or_cost():
    with pytest.raises(ik.TileFunctionError, match="not a lambda"):
        ik.tile_function(per_element_cycles=1)(lambda x: None)

    def outer():
        def inner(x):
            pass
        return inner
    with pytest.raises(ik.TileFunctionError, match="module level"):
        ik.tile_function(per_element_cycles=1)(outer())
    with pytest.raises(ik.TileFunctionError, match="exactly one cycle estimate"):
        ik.tile_function()(add_one.py_func)
    with pytest.raises(ik.TileFunctionError, match="exactly one cycle estimate"):
        ik.tile_function(cycles=lambda x: 1, per_element_cycles=1)(add_one.py_func)
    with pytest.raises(ik.TileFunctionError, match="per_element_cycles must be"):
        ik.tile_function(per_element_cycles=-1)(add_one.py_func)
    assert "add_one" in repr(add_one) and add_one.n_args == 1


def test_compile_pays_the_jit_up_front():
    ik.tile_function(cycles=lambda x: 1)(add_one.py_func)  # a fresh dispatcher has no signatures
    seconds = add_one.compile(("float32", 1))
    assert add_one.signatures, "compile() must leave a compiled signature behind"
    assert seconds >= 0 and add_one.compile(("float32", 1)) == 0.0   # second time: nothing to do
    entry = add_one.compile_log[-1]
    assert entry["spec"] == (("float32", 1),) and entry["seconds"] >= 0
    host = np.zeros(5, np.float32)
    add_one(host)                                   # callable on host arrays too
    np.testing.assert_array_equal(host, np.ones(5, np.float32))


# --------------------------------------------------------------------------- running
def test_linear_tensor_every_tile(small, rng):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 1000)
    y = g.linear_tensor("y", 1000)
    xv, yv = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    g.write(x, xv)
    g.write(y, yv)
    cs = g.compute(axpy2, x, y)
    prof = g.run(g.program([ik.Superstep("axpy", compute=cs)]))
    np.testing.assert_array_equal(g.read(y), np.float32(2) * xv + yv)
    # per-element estimate: ceil(1.5 * 16) on the busiest tile (1000 / 64 -> 15 or 16 elements)
    assert cs.cycles == math.ceil(1.5 * 16) and cs.tiles_computing == 64
    assert prof.supersteps[0].user_estimate and "[user estimate]" in prof.summary()
    assert "1.5 cycles/element of x" in prof.supersteps[0].compute_why


def test_grid_tensor_local_views_and_formula_shapes(small, rng):
    g = ik.Graph(small)
    a = g.grid_tensor("a", (13, 22), grid=(3, 4))
    b = g.grid_tensor("b", (13, 22), grid=(3, 4))
    av = rng.standard_normal((13, 22)).astype(np.float32)
    g.write(a, av)
    SEEN_SHAPES.clear()
    cs = g.compute(twice2d, a, b)
    g.run(g.program([ik.Superstep("twice", compute=cs)]))
    block_row = np.repeat(np.arange(3), [4, 4, 5])          # split_bounds(13, 3) = 0, 4, 8, 13
    rows = (np.arange(13) - np.array([0, 4, 8])[block_row])[:, None]   # row index inside the block
    np.testing.assert_array_equal(g.read(b), av * np.float32(2) + rows.astype(np.float32))
    # the formula saw per-tile block shapes (not element counts) and each distinct shape once
    shapes = {tuple(s[0]) for s in SEEN_SHAPES}
    assert shapes == {(4, 5), (4, 6), (5, 5), (5, 6)} and len(SEEN_SHAPES) == 4
    assert cs.cycles == 6 * 1 * 6 + 7                 # 5 rows -> ceil(5/6) = 1 row per worker
    shape = SEEN_SHAPES[0][0]
    assert isinstance(shape, ik.TileShape) and shape.size == shape[0] * shape[1]


def test_estimate_equals_execute_and_threads_do_not_matter(small, rng):
    g = ik.Graph(small)
    a = g.grid_tensor("a", (40, 50), grid=(8, 8))
    b = g.grid_tensor("b", (40, 50), grid=(8, 8))
    av = rng.standard_normal((40, 50)).astype(np.float32)
    prog = g.program([ik.Superstep("t", compute=g.compute(twice2d, a, b)),
                      ik.Superstep("t2", compute=g.compute(twice2d, b, a))])
    results, cycles = [], []
    for threads in (1, 2, None):
        ik.set_num_threads(threads)
        try:
            g.write(a, av)
            cycles.append(g.run(prog).total_cycles)
            results.append(g.read(a))
        finally:
            ik.set_num_threads(None)
    est = g.run(prog, mode="estimate")
    assert cycles[0] == cycles[1] == cycles[2] == est.total_cycles
    assert [s.total_cycles for s in est.supersteps] == [s.total_cycles for s in g.run(prog).supersteps]
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_low_level_vertex_batch_is_the_hook_for_built_in_ops(small):
    """What an op would do: it owns raw per-tile regions and asks the tile function for a batch."""
    dev = ik.Device(small)
    off = dev.alloc("buf", np.full(small.n_tiles, 64))
    tiles = np.array([3, 7])
    views = [ArgViews("buf", "float32", off[tiles], np.array([[16], [10]]))]
    batch = add_one.vertex_batch(small, tiles, views)
    assert batch.user_estimate and list(batch.cycles) == [3 * 16 + 10, 3 * 10 + 10]
    dev.arena.data[:] = 0
    dev.run(dev.program([ik.Superstep("s", compute=dev.compute_set([batch]))]))
    vals = dev.arena.data[:, off[0]:off[0] + 64].view(np.float32)
    assert (vals[3] == 1).all() and (vals[7, :10] == 1).all() and (vals[7, 10:] == 0).all()
    assert vals[[0, 1, 2, 4, 5, 6]].sum() == 0
    with pytest.raises(ik.TileFunctionError, match="more than one vertex on a tile"):
        add_one.vertex_batch(small, np.array([3, 3]), [views[0]._replace(offset=off[[3, 3]],
                                                                          shape=np.array([[1], [1]]))])


# --------------------------------------------------------------------------- errors
def test_compile_error_shows_numba_message_and_function_name(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 100)
    with pytest.raises(ik.TileFunctionCompileError, match=r"(?s)does_not_compile.*undefined_helper") as e:
        g.compute(does_not_compile, x)
    assert "x: float32[1-D block]" in str(e.value) and "test_tilefn.py" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_argument_errors(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 100)
    y_reversed = g.linear_tensor("y", 100, tiles=range(63, -1, -1))   # same tiles, other order
    z_few = g.linear_tensor("z", 100, tiles=range(10))
    h = g.linear_tensor("h", 100, dtype="float16")
    with pytest.raises(ik.TileFunctionError, match=r"add_one.*takes 1 arguments"):
        g.compute(add_one, x, x)
    with pytest.raises(ik.TileFunctionError, match=r"argument 1 \(y\).*float.*tensors only"):
        g.compute(axpy2, x, 3.0)
    with pytest.raises(ik.TileFunctionError, match=r"argument 0 \(x\).*ndarray"):
        g.compute(axpy2, np.zeros(3, np.float32), x)
    with pytest.raises(ik.TileFunctionError, match=r"'axpy2'.*'z'.*not mapped on tile 10 \(and 53 more\)"):
        g.compute(axpy2, x, z_few)
    with pytest.raises(ik.TileFunctionError, match=r"'x' and 'y'.*mapped differently.*element 0 is on "
                                                   r"tile 0 in 'x' and on tile 63 in 'y'"):
        g.compute(axpy2, x, y_reversed)
    with pytest.raises(ik.TileFunctionError, match=r"float16.*no float16 arithmetic"):
        g.compute(add_one, h)
    # a function can run on a subset of the tiles holding its tensors
    assert g.compute(add_one, x, tiles=range(5)).tiles_computing == 5


def test_reading_another_tiles_tensor_through_a_global(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 64)
    globals()["LEAKED"] = g.linear_tensor("leaked", 64)
    try:
        with pytest.raises(ik.TileFunctionError,
                           match=r"reads_a_global_tensor.*global GraphTensor 'LEAKED'.*own tile"):
            g.compute(reads_a_global_tensor, x)
    finally:
        del globals()["LEAKED"]


def test_out_of_block_index_is_caught_with_boundscheck(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 64, tiles=range(4))
    prog = g.program([ik.Superstep("oob", compute=g.compute(runs_off_its_block, x))])
    with pytest.raises(ik.TileFunctionError, match="indexed outside its tile-local block"):
        g.run(prog)


@pytest.mark.parametrize("result, match", [(1.5, "must return an int"), (-3, r"returned -3 .*lie in 0.."),
                                           (True, "must return an int"), (2**63, "overflow"),
                                           (2**70, "overflow")])
def test_bad_cycle_formulas(small, result, match):
    fn = ik.tile_function(cycles=lambda x: result)(add_one.py_func)
    with pytest.raises(ik.TileFunctionError, match=match):
        fn.estimate_cycles([np.array([[4]])])
    broken = ik.tile_function(cycles=lambda x, y: 1)(add_one.py_func)
    with pytest.raises(ik.TileFunctionError, match="cycles formula of tile function 'add_one' failed"):
        broken.estimate_cycles([np.array([[4]])])


def test_disable_jit_runs_the_same_program_in_python(tmp_path):
    """NUMBA_DISABLE_JIT=1 (debugging, coverage) gives the same numbers, slowly."""
    script = (
        "from ipukern.examples import stencil\n"
        "r = stencil.main((12, 10), 2, machine=__import__('ipukern').GC200.replace(n_tiles=6), "
        "verbose=False)\n"
        "assert r['exact']\n"
        "print('cycles', r['profile'].total_cycles)\n")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cycles" in res.stdout
