"""Max pooling runs in a compiled kernel without a padded copy (``ops._max_pool``: padded taps
skipped); it must give the bits of the obvious computation (taps in order, ``np.maximum``,
over the input padded with -inf) on every shape, stride and padding, with NaN, signed zeros
and infinities in the input, and whatever the thread count."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukern._kernels import _vertices
from ipukern.nn.ops import _max_pool


def _padded(v, kh, kw, sh, sw, ph, pw, Ho, Wo):
    p = np.pad(v, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    acc = None
    for i in range(kh):
        for j in range(kw):
            win = p[:, :, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw]
            acc = win.copy() if acc is None else np.maximum(acc, win)
    return acc


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), H=st.integers(1, 12), W=st.integers(1, 12),
       kh=st.integers(1, 4), kw=st.integers(1, 4), sh=st.integers(1, 3), sw=st.integers(1, 3),
       special=st.booleans(), threads=st.sampled_from([1, 3]))
def test_max_pool_kernel_bitwise_equals_padded(seed, H, W, kh, kw, sh, sw, special, threads):
    rng = np.random.default_rng(seed)
    ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
    if H + 2 * ph < kh or W + 2 * pw < kw:
        return
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    v = rng.standard_normal((2, 3, H, W)).astype(np.float32)
    if special:
        pick = rng.random(v.shape)
        v[pick < 0.1] = np.nan
        v[(pick >= 0.1) & (pick < 0.2)] = -0.0
        v[(pick >= 0.2) & (pick < 0.3)] = 0.0
        v[(pick >= 0.3) & (pick < 0.35)] = -np.inf
        v[pick >= 0.95] = np.inf
    from ipukern.core import threads as th
    prev = th._NUM_THREADS
    th.set_num_threads(threads)
    try:
        got = _max_pool(v, kh, kw, sh, sw, ph, pw, Ho, Wo).reshape(2, 3, Ho, Wo)
    finally:
        th.set_num_threads(prev)
    want = _padded(v, kh, kw, sh, sw, ph, pw, Ho, Wo)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_max_pool_kernel_matches_torch():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(3).standard_normal((2, 5, 17, 14)).astype(np.float32)
    got = _max_pool(v, 3, 3, 2, 2, 1, 1, 9, 7).reshape(2, 5, 9, 7)
    want = torch.nn.functional.max_pool2d(torch.from_numpy(v), 3, 2, 1).numpy()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_max_pool_kernel_skips_planes_a_tile_does_not_hold(threads):
    """Tiles hold 2, 0 and 1 of 2 plane slots: the held planes are pooled, the others
    written as zeros whatever the input holds there (planes are dealt to the threads one
    by one, so every thread count sees held and skipped planes)."""
    v = np.random.default_rng(4).standard_normal((3, 2, 6, 7)).astype(np.float32)
    out = np.full((6, 3, 4), np.nan, np.float32)   # every plane must be written
    _vertices.max_pool_planes(v.reshape(6, 6, 7), out, np.array([2, 0, 1], np.int64),
                              3, 3, 2, 2, 1, 1, threads)
    want = _padded(v, 3, 3, 2, 2, 1, 1, 3, 4).reshape(6, 3, 4)
    for p in (0, 1, 4):
        assert np.array_equal(out[p].view(np.uint32), want[p].view(np.uint32))
    for p in (2, 3, 5):
        assert np.array_equal(out[p].view(np.uint32), np.zeros((3, 4), np.uint32))


def test_max_pool_kernel_refuses_bad_shapes():
    x = np.zeros((2, 5, 5), np.float32)
    used = np.array([1, 1])
    with pytest.raises(ValueError, match="does not match"):
        _vertices.max_pool_planes(x, np.zeros((2, 3, 2), np.float32), used, 3, 3, 2, 2, 1, 1, 1)
    with pytest.raises(ValueError, match="does not match"):
        _vertices.max_pool_planes(x, np.zeros((1, 3, 3), np.float32), used, 3, 3, 2, 2, 1, 1, 1)
    with pytest.raises(ValueError, match=">= 1"):
        _vertices.max_pool_planes(x, np.zeros((2, 3, 3), np.float32), used, 0, 3, 2, 2, 1, 1, 1)
    with pytest.raises(ValueError, match=">= 1"):
        _vertices.max_pool_planes(x, np.zeros((2, 3, 3), np.float32), used, 3, 3, 2, 2, -1, 1, 1)
    with pytest.raises(ValueError, match="equal shares"):
        _vertices.max_pool_planes(x, np.zeros((2, 3, 3), np.float32), np.array([1, 1, 1]),
                                  3, 3, 2, 2, 1, 1, 1)
    with pytest.raises(ValueError, match="uses 2 of 1"):
        _vertices.max_pool_planes(x, np.zeros((2, 3, 3), np.float32), np.array([2, 0]),
                                  3, 3, 2, 2, 1, 1, 1)


@pytest.mark.parametrize("shape", [(2, 3, 9, 9), (3, 700, 5, 6)])
def test_max_pool_step_writes_its_resident(shape):
    """The pool step's kernel writes straight into its output resident (a reused, poisoned
    buffer: every element and the zero padding of tiles holding fewer planes rewritten)
    and gives the padded computation's bits."""
    import ipukern as ik
    from ipukern.nn.host.buffers import BufferPool, pooled
    from ipukern.nn.layout import Rearrangement, Resident, linear_layout
    from ipukern.nn.ops import pool_plan
    nt = ik.GC200.n_tiles
    plan = pool_plan(ik.GC200, shape, "float32", "max", (3, 3), (2, 2), (1, 1))
    v = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    v.reshape(-1)[::7] = np.nan
    src = linear_layout(shape, "float32", nt)
    pool = BufferPool()
    pool.poison = True
    with pooled(pool):
        for _ in range(2):      # the second run reuses (and poisons) the first's buffers
            x = Resident.from_host(src, nt, v)
            res = plan.run([x], [Rearrangement(ik.GC200, src, plan.inputs[0])], {})
            got = res.to_host()
            pad = res.view().copy()
            del x, res
    Ho = (shape[2] + 2 - 3) // 2 + 1
    Wo = (shape[3] + 2 - 3) // 2 + 1
    want = _padded(v, 3, 3, 2, 2, 1, 1, Ho, Wo)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    per_tile = plan.output.elems_per_tile(nt)
    cols = np.arange(pad.shape[1])[None, :]
    assert not pad[cols >= per_tile[:, None]].any()     # padding zero
    assert pool.reused
