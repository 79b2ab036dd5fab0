"""ipukern.nn.elementwise: Softplus and Select executed on the tiles equal NumPy float64 and
PyTorch, report the cycles estimate mode reports, and are priced from PopLibs' tables."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.gpu import estimate_network_gpu
from ipukern.nn import cycles
from ipukern.nn import layers as L

SMALL = ik.GC200.replace(n_tiles=16)


def _net(shape):
    net = ik.Network("ew")
    x, a, b, y = (net.input(k, shape) for k in "xaby")
    sp = net.add(L.Softplus(), x, name="softplus")
    net.output(sp, net.add(L.Select(), a, b, sp, y, name="select"))
    return net


def _feeds(shape, batch, seed=0):
    rng = np.random.default_rng(seed)
    f = {k: (rng.standard_normal((batch, *shape)) * 12).astype(np.float32) for k in "xaby"}
    f["x"].flat[:6] = [-120.0, -20.0, -14.0, 14.0, 30.0, 100.0]   # both thresholds and beyond
    return f


@pytest.mark.parametrize("shape, batch", [((3, 40), 2), ((1, 7), 1), ((25, 64), 1)])
def test_softplus_and_select_equal_float64_and_torch(shape, batch):
    net, f = _net(shape), _feeds(shape, batch)
    run = ik.run_network(net, f, {}, machine=SMALL)
    x = f["x"].astype(np.float64)
    want = np.logaddexp(0.0, x)                        # log(1 + exp(x)), exact in float64
    got = run.outputs["softplus"]
    assert np.all(np.abs(got - want) <= 2e-7 * np.maximum(np.abs(want), 1.0))
    # the select copies bit for bit
    assert np.array_equal(run.outputs["select"], np.where(f["a"] < f["b"], got, f["y"]))
    torch = pytest.importorskip("torch")
    t = torch.nn.functional.softplus(torch.from_numpy(f["x"])).numpy()
    assert np.all(np.abs(got - t) <= 2e-7 * np.maximum(np.abs(t), 1.0))
    sel = torch.where(torch.from_numpy(f["a"]) < torch.from_numpy(f["b"]), torch.from_numpy(got),
                      torch.from_numpy(f["y"])).numpy()
    assert np.array_equal(run.outputs["select"], sel)
    assert run.profile.total_cycles == ik.estimate_network(net, batch=batch, dtype="float32",
                                                           partials="float", machine=SMALL).total_cycles


def test_pricing_is_poplibs_tables():
    m = ik.GC200
    # UnaryOp1D LOGARITHM float: 17 + ceil(ceil(n/6)/2) * 12 per worker, x6, + 9 + supervisor
    assert int(cycles.unary_cycles(m, 120, "log", "float32")) == 6 * (17 + 10 * 12) + 9 + 33
    # LOGARITHM_ONE_PLUS: 18 per natural vector plus unaryOpInnerLoopCycles' 4
    assert int(cycles.unary_cycles(m, 120, "log1p", "float32")) == 6 * (17 + 10 * 22) + 9 + 33
    # BinaryOp1D LESS_THAN float 29 + ceil(20/4) * 14; Select 5 + 6 + 5 per element per worker
    assert int(cycles.less_than_cycles(m, 120, "float32")) == 6 * (29 + 5 * 14) + 33
    assert int(cycles.select_cycles(m, 120)) == 6 * (5 + 6 + 5 * 20)
    assert int(cycles.select_cycles(m, 0)) == 0 and int(cycles.less_than_cycles(m, 0, "float16")) == 0
    # one tile holding all 720 elements: the two plans cost exactly their vertices' sum
    one = ik.GC200.replace(n_tiles=1)
    net = ik.Network("sp")
    net.output(net.add(L.Softplus(), net.input("x", (6, 120)), name="sp"))
    n = 720
    want = (cycles.unary_cycles(one, n, "exp", "float32") + cycles.unary_cycles(one, n, "log1p", "float32")
            + 2 * cycles.less_than_cycles(one, n, "float32") + 2 * cycles.select_cycles(one, n))
    prof = ik.estimate_network(net, batch=1, dtype="float32", partials="float", machine=one)
    assert prof.total_cycles >= int(want)


def test_gpu_side_prices_them_as_memory_bound_elementwise_kernels():
    net = _net((25, 4096))
    est = estimate_network_gpu(net, 1, "DGX_A100", n_gpus=1, stack="mlperf")
    rows = {row["name"]: row for row in est.layers}
    for name in ("softplus", "select"):
        assert rows[name]["kernels"] == 1 and rows[name]["forward_s"] > 0
    # the select reads four tensors and writes one: more bytes than the softplus's two
    assert rows["select"]["forward_s"] > rows["softplus"]["forward_s"]


def test_select_needs_four_equal_shapes():
    net = ik.Network("bad")
    a, b = net.input("a", (2, 3)), net.input("b", (2, 4))
    with pytest.raises(ValueError, match="Select: operand shapes differ"):
        net.add(L.Select(), a, b, a, a, name="s")
        net.shapes(1)
