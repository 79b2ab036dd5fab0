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


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(64, 3, 7, 7), (256, 64, 1, 1), (64, 64, 3, 3), (5, 1, 1, 1)])
def test_write_scaled_equals_fold_then_write(shape, threads):
    """A folded batch norm's weights scaled as they are placed (Device.write_scaled) hold
    the bits of fold_weight's host copy placed by Device.write, on a conv program's real
    weight mapping and on a split one."""
    import ipukern as ik
    from ipukern.nn.ops import fold_weight
    w = _values(int(np.prod(shape)), 8).reshape(shape)
    s = np.random.default_rng(9).standard_normal(shape[0]) * 2
    s[::7] = np.resize([-0.0, np.inf, np.nan, 1e-300], s[::7].size)
    from ipukern.core.tensor import TileMapping
    dev = ik.Device(ik.GC200)
    n = w.size
    cuts = np.unique(np.r_[0, np.random.default_rng(10).integers(1, n, size=min(n - 1, 40)), n])
    m = TileMapping(n, (np.arange(cuts.size - 1) * 37 % 1472).astype(np.int32), cuts[:-1], np.diff(cuts))
    a = dev.add_tensor("a", shape, "float32", mapping=m)
    b = dev.add_tensor("b", shape, "float32", mapping=m)
    with np.errstate(all="ignore"):
        want = fold_weight(w, s)
    dev.write(a, want)
    ik.set_num_threads(threads)
    try:
        dev.write_scaled(b, w, s)
    finally:
        ik.set_num_threads(None)
    assert np.array_equal(dev.read(b).view(np.uint32), dev.read(a).view(np.uint32))
    assert np.array_equal(dev.read(b).view(np.uint32), want.view(np.uint32))


def test_write_scaled_refuses_bad_input():
    import ipukern as ik
    from ipukern.core.tensor import TileMapping
    dev = ik.Device(ik.GC200)
    t = dev.add_tensor("t", (4, 6), "float32", TileMapping.linear(24, 4))
    h = dev.add_tensor("h", (4, 6), "float16", TileMapping.linear(24, 4))
    w = np.ones((4, 6), np.float32)
    with pytest.raises(TypeError, match="float32"):
        dev.write_scaled(h, w, np.ones(4))
    with pytest.raises(TypeError, match="float32"):
        dev.write_scaled(t, w.astype(np.float64), np.ones(4))
    with pytest.raises(ValueError, match="shape"):
        dev.write_scaled(t, w, np.ones(3))
    data = np.zeros((2, 64), np.uint8)
    one = np.ones(1, np.int64)
    args = (w.reshape(-1), np.ones(4))
    for start, tile, off, count in ((0, 2, 0, 4), (0, 0, 62, 4), (0, 0, 2, 4), (22, 0, 0, 4),
                                    (-1, 0, 0, 4), (0, 0, 0, -1)):
        with pytest.raises(ValueError, match="write_scaled: run 0"):
            _vertices.write_scaled(data, *args, one * start, np.full(1, tile, np.int32), one * off,
                                   one * count, 1)
    with pytest.raises(ValueError, match="equal blocks"):
        _vertices.write_scaled(data, w.reshape(-1), np.ones(5), one * 0, np.zeros(1, np.int32),
                               one * 0, one * 4, 1)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_weights_scaled_as_placed_equal_folded_on_host(dtype):
    """A network's folded batch norms applied as the conv places its weights
    (Step.params(defer_fold=True), info["scales_weight"]) give the outputs of weights
    folded on the host first, bit for bit (float16: the host fold then the cast, as before)."""
    import ipukern as ik
    from ipukern.nn import plan_context
    from ipukern.nn.compile import compile_network
    net = ik.models.resnet50(image_size=32)
    params = net.init_params(seed=0)
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    prog = compile_network(net, 2, plan_context(dtype, "float", ik.GC200))
    deferred = [s for s in prog.steps if s.folded_bn is not None and s.plan.info.get("scales_weight")]
    assert len(deferred) == 53
    feeds = {net.inputs[0]: x.astype(dtype)}
    got = prog.execute(feeds, params)[net.outputs[0]]
    try:
        for s in deferred:
            s.plan.info["scales_weight"] = False
        want = prog.execute(feeds, params)[net.outputs[0]]
    finally:
        for s in deferred:
            s.plan.info["scales_weight"] = True
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_fold_weight_of_empty_weights():
    from ipukern.nn.ops import fold_weight
    assert fold_weight(np.zeros((0, 3, 3, 3), np.float32), np.zeros(0)).shape == (0, 3, 3, 3)
    assert fold_weight(np.ones((2, 0, 3), np.float32), np.ones(2)).shape == (2, 0, 3)
