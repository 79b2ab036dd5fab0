"""Small networks shared by the tests (fast enough to execute training steps)."""
import numpy as np

import ipukern as ik
from ipukern import nn
from ipukern.nn import layers as L


def tiny_cnn(bn: bool = False, c: int = 8, hw: int = 8, classes: int = 5, loss: bool = True,
             bn_stable: bool = False) -> ik.Network:
    """conv-(bn)-relu, a residual conv block, max pool, strided grouped conv, global
    average pool, linear, softmax cross-entropy (or the logits when ``loss`` is False)."""
    net = ik.Network("tiny_cnn")
    x = net.input("x", (3, hw, hw))
    h = net.add(L.Conv2d(3, c, 3, padding=1), x, name="conv1")
    if bn:
        h = net.add(L.BatchNorm2d(c, stable=bn_stable), h, name="bn1")
    h = net.add(L.ReLU(), h, name="relu1")
    h2 = net.add(L.Conv2d(c, c, 3, padding=1), h, name="conv2")
    h2 = net.add(L.ReLU(), h2, name="relu2")
    h = net.add(L.Add(), h, h2, name="res")
    h = net.add(L.MaxPool2d(2), h, name="pool")
    h = net.add(L.Conv2d(c, 2 * c, 3, stride=2, padding=1, groups=2), h, name="conv3")
    h = net.add(L.ReLU(), h, name="relu3")
    h = net.add(L.GlobalAvgPool(), h, name="gap")
    h = net.add(L.Flatten(), h, name="flat")
    h = net.add(L.Linear(2 * c, classes), h, name="fc")
    if not loss:
        net.output(h)
        return net
    y = net.input("labels", (), kind="int")
    net.output(net.add(L.SoftmaxCrossEntropy(), h, y, name="loss"))
    return net


def data(n: int, seed: int = 0, hw: int = 8, classes: int = 5):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3, hw, hw)).astype(np.float32), rng.integers(0, classes, n)


def attention_net(B=2, Tn=8, D=16, H=4):
    """Embedding, layer norm, H-head self-attention (Tn tokens of width D) with a residual,
    a linear classifier and softmax cross-entropy."""
    net = nn.Network("attn")
    ids = net.input("ids", (Tn,), kind="int")
    lab = net.input("labels", (), kind="int")
    e = net.add(nn.Embedding(50, D), ids, name="emb")
    e = net.add(nn.LayerNorm(D), e, name="ln")
    dh = D // H
    q = net.add(nn.Linear(D, D), e, name="q")
    k = net.add(nn.Linear(D, D), e, name="k")
    v = net.add(nn.Linear(D, D), e, name="v")
    q = net.add(nn.Reshape((-1, Tn, H, dh)), q)
    q = net.add(nn.Permute((0, 2, 1, 3)), q)
    q = net.add(nn.Reshape((-1, Tn, dh)), q)
    k = net.add(nn.Reshape((-1, Tn, H, dh)), k)
    k = net.add(nn.Permute((0, 2, 3, 1)), k)
    k = net.add(nn.Reshape((-1, dh, Tn)), k)
    v = net.add(nn.Reshape((-1, Tn, H, dh)), v)
    v = net.add(nn.Permute((0, 2, 1, 3)), v)
    v = net.add(nn.Reshape((-1, Tn, dh)), v)
    s = net.add(nn.MatMul(), q, k, name="scores")
    s = net.add(nn.Softmax(scale=dh ** -0.5), s, name="softmax")
    o = net.add(nn.MatMul(), s, v, name="context")
    o = net.add(nn.Reshape((-1, H, Tn, dh)), o)
    o = net.add(nn.Permute((0, 2, 1, 3)), o)
    o = net.add(nn.Reshape((-1, Tn, D)), o)
    o = net.add(nn.Linear(D, D), o, name="out")
    o = net.add(nn.Add(), o, e, name="res")
    c = net.add(nn.Reshape((-1, Tn * D)), o)
    c = net.add(nn.Linear(Tn * D, 3), c, name="cls")
    loss = net.add(nn.SoftmaxCrossEntropy(), c, lab, name="loss")
    net.output(o, loss)
    return net


def small_residual_net(seed: int):
    """A small residual CNN (strided, padded and 1x1 convs, padded max pooling, an add), its
    parameters and a batch-3 input from ``seed``, and a 92-tile GC200 to run it on; its
    reference is :func:`small_residual_torch`."""
    net = ik.Network("paths")
    h = net.add(L.Conv2d(3, 24, 3, stride=2, padding=1), net.input("x", (3, 20, 20)), name="stem")
    h = net.add(L.MaxPool2d(3, stride=2, padding=1), h, name="pool")
    h1 = net.add(L.Conv2d(24, 40, 1), h, name="pw")
    h1 = net.add(L.ReLU(), h1, name="relu")
    h1 = net.add(L.Conv2d(40, 24, 3, padding=1), h1, name="c3")
    h = net.add(L.Add(), h, h1, name="res")
    net.output(net.add(L.Conv2d(24, 36, 1, stride=2), h, name="down"))
    x = np.random.default_rng(seed).standard_normal((3, 3, 20, 20)).astype(np.float32)
    return net, net.init_params(seed=seed), x, ik.GC200.replace(n_tiles=92)


def small_residual_torch(torch, p, x):
    """The PyTorch forward of :func:`small_residual_net` with parameters ``p`` on ``x``."""
    F = torch.nn.functional
    t = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in p.items()}
    h = F.conv2d(torch.from_numpy(x), t["stem.weight"], t.get("stem.bias"), stride=2, padding=1)
    h = F.max_pool2d(h, 3, 2, 1)
    h1 = F.relu(F.conv2d(h, t["pw.weight"], t.get("pw.bias")))
    h = h + F.conv2d(h1, t["c3.weight"], t.get("c3.bias"), padding=1)
    return F.conv2d(h, t["down.weight"], t.get("down.bias"), stride=2).numpy()
