"""Small networks shared by the tests (fast enough to execute training steps)."""
import numpy as np

import ipukern as ik
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
