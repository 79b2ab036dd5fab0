"""The executable backward of every vector layer equals torch.autograd.

Each case builds a one-layer network, runs its forward and the backward rows the training
estimate costs (``backward_rows``) on tile-resident tensors, with a random output gradient
placed in the op's output layout, and compares the input and parameter gradients with
torch.autograd on the same data (float32; bounds as in the conv tests). A 16-tile machine
makes channels and rows span several tiles and tiles hold several channels, so the
cross-tile reductions, broadcasts and inverse rearrangements all move data.
"""
import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import layers as L
from ipukern.nn import plan_context
from ipukern.nn.backward import backward_rows
from ipukern.nn.compile import compile_network
from ipukern.nn.layout import Resident
from ipukern.nn.train_exec import PassState, forward_steps

torch = pytest.importorskip("torch")
F = torch.nn.functional
SMALL = ik.GC200.replace(n_tiles=16, name="GC200-16")


def run_op(layer, inputs: dict, params: dict | None = None, machine=SMALL, seed=0, permute=None):
    """Forward + backward of one layer. ``inputs``: name -> array (int arrays are host
    inputs); ``permute``: (input name, perm) to route that input through a Permute first
    (its gradient then needs the inverse rearrangement). Returns (out, g, input grads,
    param grads, env)."""
    net = ik.Network("one")
    srcs = []
    for name, v in inputs.items():
        kind = "int" if np.issubdtype(np.asarray(v).dtype, np.integer) else "float"
        s = net.input(name, np.shape(v)[1:], kind=kind)
        if permute is not None and permute[0] == name:
            s = net.add(L.Permute(permute[1]), s, name=f"{name}_p")
        srcs.append(s)
    node = net.add(layer, *srcs, name="op")
    net.output(node)
    batch = len(next(iter(inputs.values())))
    params = {f"op.{k}": np.asarray(v, np.float32) for k, v in (params or {}).items()}
    feeds = {k: np.asarray(v, np.float32 if not np.issubdtype(np.asarray(v).dtype, np.integer) else np.int64)
             for k, v in inputs.items()}
    ctx = plan_context("float32", "float", machine)
    prog = compile_network(net, batch, ctx, fold_bn=False)
    lab = "labels" if "labels" in feeds else "_no_labels"
    st = PassState(prog, params, "x", lab, feeds.get(lab, np.zeros(0, np.int64)), machine, "float")
    for k, v in feeds.items():
        st.receive(k, v)
    forward_steps(st, prog.steps)
    env = st.env
    out = env.live[node].to_host()
    g = np.random.default_rng(seed + 1).standard_normal(out.shape).astype(np.float32)
    env.grads[node] = Resident.from_host(prog.layouts[node], machine.n_tiles, g)
    cyc = 0
    for s in reversed(prog.steps):
        needs = [prog.layouts.get(src) is not None for src in s.srcs]
        for row in backward_rows(s, ctx, needs, [False] * len(s.srcs)):
            for fn in row.runs:
                fn(env)
            cyc += row.cycles
    gin = {k: env.grads[k].to_host() for k in inputs if k in env.grads}
    pg = {k[3:]: v for k, v in env.pgrads.items()}
    return out, g, gin, pg, env


def torch_grads(fn, inputs: dict, params: dict, g):
    t_in = {k: torch.tensor(v, requires_grad=not np.issubdtype(np.asarray(v).dtype, np.integer))
            for k, v in inputs.items()}
    t_p = {k: torch.tensor(np.asarray(v, np.float32), requires_grad=True) for k, v in params.items()}
    y = fn(**t_in, **t_p)
    y.backward(torch.tensor(g))
    return (y.detach().numpy(), {k: v.grad.numpy() for k, v in t_in.items() if v.grad is not None},
            {k: v.grad.numpy() for k, v in t_p.items()})


def check(layer, fn, inputs, params=None, rtol=2e-5, atol=2e-5, **kw):
    out, g, gin, pg, _ = run_op(layer, inputs, params, **kw)
    ref_out, ref_in, ref_p = torch_grads(fn, inputs, params or {}, g)
    np.testing.assert_allclose(out, ref_out, rtol=rtol, atol=atol)
    for k, v in ref_in.items():
        np.testing.assert_allclose(gin[k], v, rtol=rtol, atol=atol, err_msg=f"grad {k}")
    for k, v in ref_p.items():
        np.testing.assert_allclose(pg[k], v, rtol=rtol, atol=atol, err_msg=f"grad {k}")


RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind", ["relu", "relu6", "silu", "gelu", "sigmoid", "tanh"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 37)])
def test_activation_grad(kind, shape):
    x = rand(*shape) * 4
    fns = {"relu": F.relu, "relu6": F.relu6, "silu": F.silu, "sigmoid": torch.sigmoid,
           "tanh": torch.tanh, "gelu": lambda v: F.gelu(v, approximate="tanh")}
    check(L.Activation(kind), lambda x: fns[kind](x), {"x": x})


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
def test_add_grad_through_a_rearrangement(act):
    a, b = rand(2, 4, 6, 5), rand(2, 6, 4, 5)
    fn = {None: lambda v: v, "relu": F.relu, "gelu": lambda v: F.gelu(v, approximate="tanh")}[act]
    check(L.Add(act), lambda a, b: fn(a + b.permute(0, 2, 1, 3)), {"a": a, "b": b},
          permute=("b", (0, 2, 1, 3)))


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_grad(kind, k, s, p):
    x = rand(2, 5, 9, 8)
    if kind == "max":
        check(L.MaxPool2d(k, s, p), lambda x: F.max_pool2d(x, k, s, p), {"x": x})
    else:
        check(L.AvgPool2d(k, s, p), lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=True), {"x": x})


def test_global_avgpool_grad():
    check(L.GlobalAvgPool(), lambda x: x.mean(dim=(2, 3), keepdim=True), {"x": rand(3, 6, 5, 7)})


@pytest.mark.parametrize("shape", [(4, 6, 5, 5), (2, 20, 3, 7), (8, 3, 1, 1)])
def test_batchnorm_training_forward_and_backward(shape):
    C = shape[1]
    x = rand(*shape) * 2 + 0.5
    p = {"weight": RNG.uniform(0.5, 1.5, C), "bias": RNG.uniform(-0.5, 0.5, C),
         "running_mean": np.zeros(C), "running_var": np.ones(C)}
    out, g, gin, pg, env = run_op(L.BatchNorm2d(C), {"x": x}, p)
    bn = torch.nn.BatchNorm2d(C)
    bn.weight.data = torch.tensor(p["weight"], dtype=torch.float32)
    bn.bias.data = torch.tensor(p["bias"], dtype=torch.float32)
    tx = torch.tensor(x, requires_grad=True)
    y = bn.train()(tx)
    y.backward(torch.tensor(g))
    np.testing.assert_allclose(out, y.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gin["x"], tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pg["weight"], bn.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pg["bias"], bn.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(env.running["op.running_mean"], bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(env.running["op.running_var"], bn.running_var.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,scale", [((3, 7, 11), 1.0), ((2, 4, 16), 0.25)])
def test_softmax_grad(shape, scale):
    check(L.Softmax(scale), lambda x: torch.softmax(scale * x, dim=-1), {"x": rand(*shape)})


@pytest.mark.parametrize("shape", [(2, 5, 12), (3, 33)])
def test_layernorm_grad(shape):
    D = shape[-1]
    p = {"weight": RNG.uniform(0.5, 1.5, D), "bias": RNG.uniform(-0.1, 0.1, D)}
    check(L.LayerNorm(D, eps=1e-5), lambda x, weight, bias: F.layer_norm(x, (D,), weight, bias, 1e-5),
          {"x": rand(*shape)}, p, rtol=1e-4, atol=1e-4)


def test_softmax_cross_entropy_grad():
    x = rand(7, 10) * 3
    lab = RNG.integers(0, 10, 7)
    out, g, gin, _, _ = run_op(L.SoftmaxCrossEntropy(), {"x": x, "labels": lab})
    tx = torch.tensor(x, requires_grad=True)
    loss = F.cross_entropy(tx, torch.tensor(lab))
    loss.backward(torch.tensor(g))
    assert float(out) == pytest.approx(loss.item(), rel=1e-5)
    np.testing.assert_allclose(gin["x"], tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_scatter_add_grad():
    V, D = 11, 6
    ids = RNG.integers(0, V, (3, 8))
    ids[0, :3] = 4                                           # repeated ids accumulate
    w = rand(V, D)
    out, g, _, pg, _ = run_op(L.Embedding(V, D), {"ids": ids}, {"weight": w})
    tw = torch.tensor(w, requires_grad=True)
    y = F.embedding(torch.tensor(ids), tw)
    y.backward(torch.tensor(g))
    np.testing.assert_allclose(out, y.detach().numpy())
    np.testing.assert_allclose(pg["weight"], tw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_add_param_and_view_grads():
    x = rand(3, 4, 6)
    check(L.AddParam((4, 6)), lambda x, weight: x + weight, {"x": x}, {"weight": rand(4, 6)})
    check(L.Reshape((-1, 24)), lambda x: x.reshape(-1, 24), {"x": x})
    check(L.Permute((0, 2, 1)), lambda x: x.permute(0, 2, 1), {"x": x})


@pytest.mark.parametrize("bias", [True, False])
def test_linear_and_batched_matmul_grads(bias):
    x = rand(2, 5, 8)
    p = {"weight": rand(6, 8) * 0.3}
    if bias:
        p["bias"] = rand(6)
    check(L.Linear(8, 6, bias=bias), lambda x, weight, bias=None: F.linear(x, weight, bias), {"x": x}, p,
          rtol=1e-4, atol=1e-4)
    check(L.MatMul(), lambda a, b: a @ b, {"a": rand(3, 4, 7), "b": rand(3, 7, 5)}, rtol=1e-4, atol=1e-4)


def test_conv_bias_grad_is_a_cross_tile_reduction():
    x, w, b = rand(2, 3, 8, 8), rand(5, 3, 3, 3) * 0.3, rand(5)
    check(L.Conv2d(3, 5, 3, padding=1, bias=True),
          lambda x, weight, bias: F.conv2d(x, weight, bias, padding=1), {"x": x},
          {"weight": w, "bias": b}, rtol=1e-4, atol=1e-4)
