"""Whole training steps executed on the tiles: a small transformer encoder and a small CNN
equal torch.autograd + torch.optim.SGD (gradients and weights after one step), and the
executed programs' cycles equal the training estimate's."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import layers as L
from ipukern.nn import train_step
from ipukern.nn.zoo_bert import multi_head_attention

torch = pytest.importorskip("torch")
F = torch.nn.functional
SMALL = ik.GC200.replace(n_tiles=16, name="GC200-16")
V, S, D, H, CLASSES = 13, 6, 8, 2, 4


def encoder(layers=1):
    """Embeddings + position + LayerNorm, encoder layers as in ik.models.bert, and a
    classifier over the flattened sequence."""
    net = ik.Network("tiny_encoder")
    ids = net.input("ids", (S,), kind="int")
    y = net.input("labels", (), kind="int")
    h = net.add(L.Embedding(V, D), ids, name="emb")
    h = net.add(L.AddParam((S, D)), h, name="pos")
    h = net.add(L.LayerNorm(D), h, name="ln0")
    for i in range(layers):
        p = f"l{i}"
        a = multi_head_attention(net, h, f"{p}.att", S, D, H)
        a = net.add(L.Add(), a, h, name=f"{p}.add1")
        h = net.add(L.LayerNorm(D), a, name=f"{p}.ln1")
        f = net.add(L.Linear(D, 4 * D), h, name=f"{p}.fc1")
        f = net.add(L.GELU(), f, name=f"{p}.gelu")
        f = net.add(L.Linear(4 * D, D), f, name=f"{p}.fc2")
        f = net.add(L.Add(), f, h, name=f"{p}.add2")
        h = net.add(L.LayerNorm(D), f, name=f"{p}.ln2")
    h = net.add(L.Reshape((-1, S * D)), h, name="flat")
    h = net.add(L.Linear(S * D, CLASSES), h, name="head")
    net.output(net.add(L.SoftmaxCrossEntropy(), h, y, name="loss"))
    return net


def torch_encoder(P, ids, layers=1):
    """The same encoder written with torch functionals over the parameters ``P``."""
    def lin(x, n):
        return F.linear(x, P[f"{n}.weight"], P[f"{n}.bias"])

    def ln(x, n):
        return F.layer_norm(x, (D,), P[f"{n}.weight"], P[f"{n}.bias"], 1e-5)
    B, dh = ids.shape[0], D // H
    h = ln(F.embedding(ids, P["emb.weight"]) + P["pos.weight"], "ln0")
    for i in range(layers):
        p = f"l{i}.att"
        q = lin(h, f"{p}.self.query").view(B, S, H, dh).permute(0, 2, 1, 3)
        k = lin(h, f"{p}.self.key").view(B, S, H, dh).permute(0, 2, 3, 1)
        v = lin(h, f"{p}.self.value").view(B, S, H, dh).permute(0, 2, 1, 3)
        s = torch.softmax(dh ** -0.5 * (q @ k), dim=-1)
        c = (s @ v).permute(0, 2, 1, 3).reshape(B, S, D)
        h = ln(lin(c, f"{p}.output.dense") + h, f"l{i}.ln1")
        f = lin(F.gelu(lin(h, f"l{i}.fc1"), approximate="tanh"), f"l{i}.fc2")
        h = ln(f + h, f"l{i}.ln2")
    return lin(h.reshape(B, -1), "head")


def test_transformer_step_equals_torch_and_its_estimate():
    net = encoder()
    params = net.init_params(seed=1)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, V, (3, S))
    ids[1, :2] = ids[0, 0]                   # repeated tokens: the embedding grad accumulates
    labels = rng.integers(0, CLASSES, 3)
    run = train_step(net, ids, labels, params, optimizer=ik.Optimizer("sgd", lr=0.5), machine=SMALL)
    P = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    loss = F.cross_entropy(torch_encoder(P, torch.tensor(ids)), torch.tensor(labels))
    loss.backward()
    assert run.loss == pytest.approx(loss.item(), rel=1e-5)
    assert sorted(run.grads) == sorted(params)
    for k, p in P.items():
        np.testing.assert_allclose(run.grads[k], p.grad.numpy(), rtol=1e-4, atol=2e-5, err_msg=k)
        np.testing.assert_allclose(run.params[k], (p - 0.5 * p.grad).detach().numpy(), rtol=1e-4,
                                   atol=2e-5, err_msg=k)
    assert run.cycles == run.profile.total_cycles
    names = [r["name"] for r in run.profile.layers]
    assert "emb.grad" in names and "l0.att.self.scores.grad_b" in names
    assert any(n.endswith("grad_accumulate0") or n.endswith("grad_accumulate1") for n in names)


def cnn():
    net = ik.Network("cnn")
    x = net.input("x", (3, 10, 10))
    y = net.input("labels", (), kind="int")
    h = net.add(L.Conv2d(3, 8, 3, padding=1, bias=True), x, name="c1")
    h = net.add(L.BatchNorm2d(8), h, name="bn1")
    h = net.add(L.ReLU6(), h, name="a1")
    h2 = net.add(L.Conv2d(8, 8, 3, padding=1, groups=8), h, name="dw")
    h2 = net.add(L.BatchNorm2d(8), h2, name="bn2")
    h2 = net.add(L.SiLU(), h2, name="a2")
    h = net.add(L.Add("relu"), h, h2, name="res")
    h = net.add(L.AvgPool2d(3, 2, 1), h, name="avg")
    h = net.add(L.Conv2d(8, 12, 1), h, name="c3")
    h = net.add(L.Sigmoid(), h, name="a3")
    h = net.add(L.MaxPool2d(2), h, name="max")
    h = net.add(L.GlobalAvgPool(), h, name="gap")
    h = net.add(L.Flatten(), h, name="flat")
    net.output(net.add(L.SoftmaxCrossEntropy(), net.add(L.Linear(12, 5), h, name="fc"), y, name="loss"))
    return net


def test_cnn_step_equals_torch_and_its_estimate():
    net = cnn()
    params = net.init_params(seed=3)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 10, 10)).astype(np.float32)
    labels = rng.integers(0, 5, 4)
    run = train_step(net, x, labels, params, optimizer=ik.Optimizer("sgd", lr=0.1), machine=SMALL)
    P = {k: torch.tensor(v, requires_grad=not k.endswith(("running_mean", "running_var")))
         for k, v in params.items()}

    def bn(v, n):
        return F.batch_norm(v, P[f"{n}.running_mean"], P[f"{n}.running_var"], P[f"{n}.weight"],
                            P[f"{n}.bias"], training=True)
    h = F.relu6(bn(F.conv2d(torch.tensor(x), P["c1.weight"], P["c1.bias"], padding=1), "bn1"))
    h2 = F.silu(bn(F.conv2d(h, P["dw.weight"], padding=1, groups=8), "bn2"))
    h = F.avg_pool2d(F.relu(h + h2), 3, 2, 1)
    h = F.max_pool2d(torch.sigmoid(F.conv2d(h, P["c3.weight"])), 2).mean(dim=(2, 3))
    loss = F.cross_entropy(F.linear(h, P["fc.weight"], P["fc.bias"]), torch.tensor(labels))
    loss.backward()
    assert run.loss == pytest.approx(loss.item(), rel=1e-5)
    for k, p in P.items():
        if p.requires_grad:
            np.testing.assert_allclose(run.grads[k], p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
            want = (p - 0.1 * p.grad).detach().numpy()
        else:        # running statistics, updated in place by F.batch_norm (momentum 0.1)
            want = p.numpy()
        np.testing.assert_allclose(run.params[k], want, rtol=1e-4, atol=1e-5, err_msg=k)
    assert run.cycles == run.profile.total_cycles
    rows = {r["name"]: r for r in run.profile.layers}
    assert rows["bn1.stats"]["pass"] == "fwd" and rows["res.grad_rearrange1"]["cycles"] >= 0


def test_squeeze_excitation_step_equals_torch():
    net = ik.Network("se")
    x = net.input("x", (6, 5, 5))
    y = net.input("labels", (), kind="int")
    s = net.add(L.GlobalAvgPool(), x, name="gap")
    s = net.add(L.Conv2d(6, 3, 1, bias=True), s, name="sq")
    s = net.add(L.ReLU(), s, name="sr")
    s = net.add(L.Conv2d(3, 6, 1, bias=True), s, name="ex")
    s = net.add(L.Sigmoid(), s, name="sg")
    h = net.add(L.ScaleChannels(), x, s, name="se")
    h = net.add(L.Conv2d(6, 4, 3), h, name="c")
    h = net.add(L.Flatten(), net.add(L.GlobalAvgPool(), h, name="gap2"), name="flat")
    net.output(net.add(L.SoftmaxCrossEntropy(), net.add(L.Linear(4, 3), h, name="fc"), y, name="loss"))
    params = net.init_params(seed=5)
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((3, 6, 5, 5)).astype(np.float32)
    labels = rng.integers(0, 3, 3)
    run = train_step(net, xv, labels, params, machine=SMALL)
    P = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tx = torch.tensor(xv)
    sc = torch.sigmoid(F.conv2d(F.relu(F.conv2d(tx.mean(dim=(2, 3), keepdim=True), P["sq.weight"],
                                                P["sq.bias"])), P["ex.weight"], P["ex.bias"]))
    h = F.conv2d(tx * sc, P["c.weight"]).mean(dim=(2, 3))
    loss = F.cross_entropy(F.linear(h, P["fc.weight"], P["fc.bias"]), torch.tensor(labels))
    loss.backward()
    assert run.loss == pytest.approx(loss.item(), rel=1e-5)
    for k, p in P.items():
        np.testing.assert_allclose(run.grads[k], p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    assert run.cycles == run.profile.total_cycles


def test_train_step_refuses_networks_without_a_loss():
    bad = ik.Network("noloss")
    bad.output(bad.add(L.ReLU(), bad.input("x", (3,)), name="r"))
    with pytest.raises(ValueError, match="SoftmaxCrossEntropy"):
        train_step(bad, np.zeros((2, 3), np.float32), np.zeros(2, int))
