"""Execute mode's host fusion of a conv's next ReLU/ReLU6 into its bias pass, and of a
residual add's into the add (``NetworkProgram._mark_fused``): the kernels give NumPy's bits
for every value (NaN, signed zeros, infinities, the clip bounds; the add's kernel in
tests/nn/test_host_kernels.py), and whole networks give the same outputs with and without
the fusion, at every thread count."""
import numpy as np
import pytest

import ipukern as ik
from ipukern._kernels import _vertices
from ipukern.dtypes import DTYPE_CODE
from ipukern.nn import plan_context
from ipukern.nn.compile import compile_network

_SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, 6.0000005, 5.9999995, -1e-45, 1e-45, 7, -3]


@pytest.mark.parametrize("bias", [0.0, -0.0, 1.5, -2.0, np.inf])
@pytest.mark.parametrize("act, ref", [(1, lambda v: np.maximum(v, 0)),
                                      (2, lambda v: np.clip(v, 0, 6))], ids=["relu", "relu6"])
def test_add_bias_activation_bits_equal_numpy(bias, act, ref):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.array(_SPECIAL, np.float32), (rng.standard_normal(500) * 5).astype(np.float32),
                        np.full(37, -0.0, np.float32)])
    n = x.size
    data = np.zeros((1, 4 * n + 4), np.uint8)
    data[0, :4 * n] = x.view(np.uint8)
    data[0, 4 * n:] = np.array([bias], np.float32).view(np.uint8)
    _vertices.add_bias(data, np.zeros(1, np.int32), np.zeros(1, np.int64), np.full(1, 4 * n, np.int64),
                       np.array([[0, n, n, 1, 1, 1, 0]], np.int64), DTYPE_CODE["float32"], 1, act)
    with np.errstate(all="ignore"):
        want = ref(x + np.float32(bias))
    assert np.array_equal(data[0, :4 * n].view(np.uint32), want.view(np.uint32))


def test_add_bias_rejects_bad_activation():
    data = np.zeros((1, 64), np.uint8)
    args = (data, np.zeros(1, np.int32), np.zeros(1, np.int64), np.full(1, 32, np.int64),
            np.array([[0, 4, 4, 1, 1, 1, 0]], np.int64))
    for dt, act in ((DTYPE_CODE["float32"], 3), (DTYPE_CODE["float16"], 1)):
        with pytest.raises(ValueError, match="act must be"):
            _vertices.add_bias(*args, dt, 1, act)


@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50"])
def test_fused_network_equals_unfused(model):
    net = ik.models.MODELS[model](image_size=32)
    params = net.init_params(seed=0)
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    prog = compile_network(net, 2, plan_context("float32", "float", ik.GC200))
    fused = [s for s in prog.steps if s.fused]
    assert fused and all(s.plan.op in ("relu", "relu6") for s in fused)
    if model == "resnet50":     # the ReLU after each residual add is applied by the add
        adds = [s for s in prog.steps if s.plan.op == "add"]
        assert len(adds) == 16 and all(s.fused_act == "relu" for s in adds)
    feeds = {net.inputs[0]: x}
    outs = {}
    try:
        for n in (1, 2, 3):
            ik.set_num_threads(n)
            outs[n] = prog.execute(feeds, params)[net.outputs[0]]
    finally:
        ik.set_num_threads(None)
    saved = [(s, s.fused_act, s.fused) for s in prog.steps]
    try:
        for s in prog.steps:
            s.fused_act, s.fused = None, False
        plain = prog.execute(feeds, params)[net.outputs[0]]
    finally:
        for s, a, f in saved:
            s.fused_act, s.fused = a, f
    for got in outs.values():
        assert np.array_equal(got.view(np.uint32), plain.view(np.uint32))
