"""Execute mode's host kernels between programs (``_vertices.fold_scale``, ``add_act``,
``transpose32``) give NumPy's bits for every value: NaN (signs and payloads), infinities,
signed zeros, denormals, at every thread count; bad shapes are refused."""
import numpy as np
import pytest

from ipukern._kernels import _vertices

_SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, 6.0000005, 5.9999995,
                     -1e-45, 1e-45, 1e-40, -1e-40, 1.1754942e-38, -1.1754942e-38, 3.4028235e38,
                     -3.4028235e38, 7, -3], np.float32)
_NAN_PAYLOADS = np.array([0x7FC00001, 0xFFC00123, 0x7F800005, 0xFF812345], np.uint32).view(np.float32)


def _values(n: int, seed: int) -> np.ndarray:
    """``n`` float32 values: every special value, NaN payloads (quiet and signalling) and
    random normals of both signs, shuffled."""
    rng = np.random.default_rng(seed)
    base = np.concatenate([_SPECIAL, _NAN_PAYLOADS])
    x = np.concatenate([np.resize(base, n // 3), (rng.standard_normal(n - n // 3) * 4).astype(np.float32)])
    return x[rng.permutation(n)]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (64, 1000), (3, 4099)])
def test_fold_scale_bits_equal_numpy(shape, threads):
    w = _values(shape[0] * shape[1], 1).reshape(shape)
    s = np.random.default_rng(2).standard_normal(shape[0]) * 3
    s[::5] = np.resize([-0.0, np.inf, np.nan, 1e-300, 1e300], s[::5].size)
    want = np.empty(shape, np.float32)
    with np.errstate(all="ignore"):
        np.multiply(w, s[:, None], out=want, casting="unsafe", dtype=np.float64)
    got = np.empty(shape, np.float32)
    _vertices.fold_scale(w, s, got, threads)
    assert np.array_equal(_bits(got), _bits(want))
    _vertices.fold_scale(w, s, w, threads)             # in place
    assert np.array_equal(_bits(w), _bits(want))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("act, ref", [(0, lambda v: v), (1, lambda v: np.maximum(v, 0)),
                                      (2, lambda v: np.clip(v, 0, 6))], ids=["none", "relu", "relu6"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (11, 517), (2, 8195)])
def test_add_act_bits_equal_numpy(shape, act, ref, threads):
    n = shape[0] * shape[1]
    a, b = _values(n, 3).reshape(shape), _values(n, 4).reshape(shape)
    with np.errstate(all="ignore"):
        want_add = ref(np.add(a, b))
        want_one = ref(a)
    for bb, want in ((b, want_add), (None, want_one)):
        got = np.full(shape, 99, np.float32)
        _vertices.add_act(a, bb, got, act, threads)
        assert np.array_equal(_bits(got), _bits(want))
        inplace = a.copy()                              # out aliasing the first operand
        _vertices.add_act(inplace, bb, inplace, act, threads)
        assert np.array_equal(_bits(inplace), _bits(want))


def test_add_act_strided_rows():
    """Rows of a wider buffer (a Resident's view when rows hold padding)."""
    buf = _values(6 * 40, 5).reshape(6, 40)
    other = _values(6 * 40, 6).reshape(6, 40)
    a, b = buf[:, :33], other[:, :33]
    with np.errstate(all="ignore"):
        want = np.maximum(a + b, 0)
    tail = buf[:, 33:].copy()
    _vertices.add_act(a, b, a, 1, 2)
    assert np.array_equal(_bits(a), _bits(want))
    assert np.array_equal(_bits(buf[:, 33:]), _bits(tail))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1, 1), (1, 70), (33, 1), (2048, 1000), (31, 65)])
def test_transpose32_equals_numpy(shape, threads):
    x = np.random.default_rng(7).integers(0, 2**32, size=shape, dtype=np.uint32)
    got = np.empty(shape[::-1], np.uint32)
    _vertices.transpose32(x, got, threads)
    assert np.array_equal(got, x.T)


def test_host_kernels_refuse_bad_shapes():
    f = np.zeros((4, 5), np.float32)
    with pytest.raises(ValueError, match="fold_scale"):
        _vertices.fold_scale(f, np.ones(3), f, 1)
    with pytest.raises(ValueError, match="fold_scale"):
        _vertices.fold_scale(f, np.ones(4), np.zeros((4, 6), np.float32), 1)
    with pytest.raises(ValueError, match="fold_scale"):
        _vertices.fold_scale(f, np.ones(4), f, 0)
    with pytest.raises(ValueError, match="add_act"):
        _vertices.add_act(f, np.zeros((4, 6), np.float32), f, 1, 1)
    with pytest.raises(ValueError, match="add_act"):
        _vertices.add_act(f, None, np.zeros((5, 5), np.float32), 1, 1)
    with pytest.raises(ValueError, match="act must be"):
        _vertices.add_act(f, f, f, 3, 1)
    with pytest.raises(ValueError, match="act must be"):
        _vertices.add_act(f, f, f, 1, 0)
    u = np.zeros((4, 5), np.uint32)
    with pytest.raises(ValueError, match="transpose32"):
        _vertices.transpose32(u, np.zeros((4, 5), np.uint32), 1)
    with pytest.raises(ValueError, match="transpose32"):
        _vertices.transpose32(u, np.zeros((5, 4), np.uint32), 0)


def test_add_act_refuses_strided_elements():
    f = np.zeros((4, 10), np.float32)
    with pytest.raises(ValueError, match="contiguous"):
        _vertices.add_act(f[:, ::2], f[:, :5], f[:, :5], 1, 1)


def test_add_refuses_an_activation_it_cannot_fuse():
    import ipukern as ik
    from ipukern.nn.layout import linear_layout
    from ipukern.nn.ops import add_plan
    lay = linear_layout((2, 8), "float32", ik.GC200.n_tiles)
    assert add_plan(ik.GC200, lay, (2, 8)).info["fuses"] == ("relu", "relu6")
    assert add_plan(ik.GC200, lay, (2, 8), "relu").info["fuses"] == ()
    assert add_plan(ik.GC200, linear_layout((2, 8), "float16", ik.GC200.n_tiles), (2, 8)).info["fuses"] == ()
    with pytest.raises(ValueError, match="cannot fuse activation 'sigmoid'"):
        add_plan(ik.GC200, lay, (2, 8)).run([], [], {}, act="sigmoid")
