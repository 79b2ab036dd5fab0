"""The planner's compiled loops (``ipukern/_kernels/_plan.pyx``) agree exactly with the NumPy
code they replace, on every table a search hands them.

Each test plans a spread of convs and matmuls (dense, grouped, depthwise, 1x1 with column
splits, deep in-channel reductions, fp16 and fp32, with and without bias, tight and loose
memory proportions, and machines small enough that serial slices are needed) with the
compiled loop on, and at every call runs the NumPy version on the same inputs and compares
every output. Skipped when the kernels are not built (the NumPy path is then the only one).
"""
import numpy as np
import pytest

import ipukern as ik
import ipukern._kernels as kernels
from ipukern.conv import ConvParams, estimators, plan_conv, search, sizing
from ipukern.core.memory import TileMemoryError

pytest.importorskip("ipukern._kernels._plan")

MACHINES = [ik.GC200, ik.GC200.replace(n_tiles=16, tile_bytes=96 * 1024, name="tiny-16")]

#: (x shape, w shape, padding, groups)
SHAPES = [((8, 128, 56, 56), (128, 128, 3, 3), 1, 1),
          ((8, 128, 56, 56), (128, 4, 3, 3), 1, 32),
          ((8, 240, 28, 28), (240, 1, 5, 5), 2, 240),
          ((16, 256, 14, 14), (1024, 256, 1, 1), 0, 1),
          ((1, 1024, 1, 8192), (4096, 1024, 1, 1), 0, 1),   # a matmul's 1x1 conv
          ((2, 2048, 7, 7), (512, 2048, 1, 1), 0, 1),       # a deep in-channel reduction
          ((4, 3, 224, 224), (64, 3, 7, 7), 3, 1),
          ((1, 64, 28, 28), (64, 64, 3, 3), 1, 1)]


def _compare_sizing(monkeypatch):
    calls = []
    compiled = sizing.fewest_serial_slices

    def both(p, machine, og, c, serials, bias, temp_bound=None):
        got = compiled(p, machine, og, c, serials, bias, temp_bound)
        want = sizing._fewest_serial_slices_numpy(p, machine, og, c, serials, bias, temp_bound)
        assert np.array_equal(got[0], want[0])
        assert got[1] == want[1]
        assert got[2].keys() == want[2].keys()
        for k in want[2]:
            assert np.array_equal(got[2][k], want[2][k]), k
        calls.append(len(c.K_t))
        return got

    monkeypatch.setattr(search, "fewest_serial_slices", both)
    return calls


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_compiled_sizing_matches_numpy(monkeypatch, machine, dtype):
    calls = _compare_sizing(monkeypatch)
    for (x, w, pad, g), bias, amp in zip(SHAPES, [False, True] * 4,
                                         [None, 0.1, 1.0, None, 0.3, None, 0.6, 0.05]):
        p = ConvParams.from_shapes(x, w, padding=pad, groups=g, dtype=dtype, partials="float")
        ik.clear_plan_cache()
        try:
            plan_conv(p, machine, bias=bias, available_memory_proportion=amp)
        except (ValueError, TileMemoryError):
            pass
    assert len(calls) > 10
    if machine.n_tiles > 1000:
        assert max(calls) > 500      # large tables were compared too


def _compare_vertex_cycles(monkeypatch):
    calls = []
    compiled = estimators.conv_vertex_cycles_array

    def both(machine, method, **kw):
        got = compiled(machine, method, **kw)
        monkeypatch.setattr(kernels, "USE_PLAN_KERNELS", False)
        try:
            want = compiled(machine, method, **kw)
        finally:
            monkeypatch.setattr(kernels, "USE_PLAN_KERNELS", True)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want), (method, kw)
        calls.append((method.method, got.size))
        return got

    monkeypatch.setattr(search, "conv_vertex_cycles_array", both)
    monkeypatch.setattr(estimators, "conv_vertex_cycles_array", both)   # the program's cost
    return calls


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dtype,partials", [("float16", "float"), ("float16", "half"),
                                            ("float32", "float")])
def test_compiled_amp_cycles_match_numpy(monkeypatch, stride, dtype, partials):
    """AMP nx1 and 1x1 (every conv-unit mode, channel grouping and combineConvGroups
    factor the candidates list), in the planner's tables and in the built programs' costs."""
    calls = _compare_vertex_cycles(monkeypatch)
    for x, w, pad, g in SHAPES:
        ik.clear_plan_cache()
        try:
            ik.estimate_conv2d(x, w, padding=pad, groups=g, stride=stride, dtype=dtype,
                               partials=partials)
        except (ValueError, TileMemoryError):
            pass
    for a, b in [((512, 256), (256, 1024)), ((64, 128, 16), (64, 16, 16))]:
        ik.clear_plan_cache()
        ik.estimate_matmul(a, b, dtype=dtype, partials=partials)
    amp = [n for m, n in calls if m == "AMP"]
    assert len(amp) > 20 and max(amp) > 500


def _same_table(a, b):
    if a is None or b is None:
        assert a is None and b is None
        return
    assert list(a) == list(b)       # the columns in the same order too
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def _compare_tables(monkeypatch, name):
    """Wrap ``search.<name>`` (a function returning a Table or None) to run it with and
    without the compiled loops and compare."""
    calls = []
    compiled = getattr(search, name)

    def both(*args, **kw):
        got = compiled(*args, **kw)
        monkeypatch.setattr(kernels, "USE_PLAN_KERNELS", False)
        try:
            want = compiled(*args, **kw)
        finally:
            monkeypatch.setattr(kernels, "USE_PLAN_KERNELS", True)
        _same_table(got, want)
        calls.append(0 if got is None else len(got.gs))
        return got

    monkeypatch.setattr(search, name, both)
    return calls


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_compiled_split_tables_and_lower_bound_prune_match_numpy(monkeypatch, machine):
    """The split-vector tables (field x channel pairs) and the rows the lower-bound prune
    keeps, with and without a plan to beat."""
    tables = _compare_tables(monkeypatch, "_new_split_vectors")
    pruned = _compare_tables(monkeypatch, "_lower_bound_prune")
    for dtype in ("float16", "float32"):
        for x, w, pad, g in SHAPES:
            p = ConvParams.from_shapes(x, w, padding=pad, groups=g, dtype=dtype,
                                       partials="float")
            ik.clear_plan_cache()
            try:
                plan_conv(p, machine)
            except (ValueError, TileMemoryError):
                pass
    assert len(tables) > 20 and len(pruned) > 20
    if machine.n_tiles > 1000:
        assert max(tables) > 1000 and max(pruned) > 500


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_compiled_beat_bound_matches_numpy(monkeypatch, machine):
    """_beat_prune's exchange-in and supersteps (bias, casts, 1-3 reduction stages, the
    shared-bus rate, input owners) as the compiled loop computes them."""
    calls = []
    compiled = search._beat_fixed

    def both(p, m, c, bias):
        got = compiled(p, m, c, bias)
        w_eff = np.where(c.M > 1, c.G_t * c.K_t * c.C_t * c.KH_t * p.kernel_w
                         * p.itemsize, 0)
        want = (search.exchange_cycles(search._input_receive(p, m, c) + w_eff, m,
                                       with_overhead=True)
                + search._syncs(c, bias, 1) * m.sync_cycles)
        assert got is not None and got.dtype == want.dtype and np.array_equal(got, want)
        calls.append(len(got))
        return got

    monkeypatch.setattr(search, "_beat_fixed", both)
    for dtype in ("float16", "float32"):
        for (x, w, pad, g), bias in zip(SHAPES, [False, True] * 4):
            p = ConvParams.from_shapes(x, w, padding=pad, groups=g, dtype=dtype,
                                       partials="float")
            ik.clear_plan_cache()
            try:
                plan_conv(p, machine, bias=bias)
            except (ValueError, TileMemoryError):
                pass
    assert len(calls) > 10 or machine.n_tiles < 1000   # the tiny machine's plans are serial


def test_plans_equal_with_and_without_the_compiled_loops(monkeypatch):
    def plans(use):
        monkeypatch.setattr(kernels, "USE_PLAN_KERNELS", use)
        out = []
        for x, w, pad, g in SHAPES:
            p = ConvParams.from_shapes(x, w, padding=pad, groups=g, dtype="float16",
                                       partials="float")
            ik.clear_plan_cache()
            plan = plan_conv(p, ik.GC200)
            out.append((plan, plan.to_dict()))
        return out
    assert plans(True) == plans(False)
