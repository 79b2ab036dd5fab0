"""The zoo CNNs executed on the tiles equal PyTorch reference modules (defined here, in
torchvision's structure, since torchvision does not import here), and from_torch of those
modules gives the zoo's layer list."""
import numpy as np
import pytest

import ipukern as ik
from ipukern import nn

torch = pytest.importorskip("torch")
tnn = torch.nn

#: a small machine keeps planning cheap (the plans are the same kind as on 1472 tiles); the
#: ResNets' weights do not fit its 92 tiles, so memory overflow is allowed (it is reported)
SMALL = ik.GC200.replace(n_tiles=92)
SIZE = 32


def cba(cin, cout, k, s=1, g=1, act=tnn.ReLU):
    layers = [tnn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=g, bias=False), tnn.BatchNorm2d(cout)]
    return tnn.Sequential(*layers, act()) if act else tnn.Sequential(*layers)


class Bottleneck(tnn.Module):
    def __init__(self, inp, planes, stride, groups, base_width):
        super().__init__()
        w = int(planes * base_width / 64) * groups
        self.conv1, self.bn1 = tnn.Conv2d(inp, w, 1, bias=False), tnn.BatchNorm2d(w)
        self.conv2 = tnn.Conv2d(w, w, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = tnn.BatchNorm2d(w)
        self.conv3, self.bn3 = tnn.Conv2d(w, planes * 4, 1, bias=False), tnn.BatchNorm2d(planes * 4)
        self.relu1, self.relu2, self.relu3 = tnn.ReLU(), tnn.ReLU(), tnn.ReLU()
        self.downsample = None
        if stride != 1 or inp != planes * 4:
            self.downsample = tnn.Sequential(tnn.Conv2d(inp, planes * 4, 1, stride, bias=False),
                                             tnn.BatchNorm2d(planes * 4))

    def forward(self, x):
        o = self.relu1(self.bn1(self.conv1(x)))
        o = self.relu2(self.bn2(self.conv2(o)))
        o = self.bn3(self.conv3(o))
        return self.relu3(o + (self.downsample(x) if self.downsample is not None else x))


class ResNet(tnn.Module):
    def __init__(self, blocks, groups=1, base_width=64, classes=10):
        super().__init__()
        self.conv1, self.bn1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64)
        self.relu, self.maxpool = tnn.ReLU(), tnn.MaxPool2d(3, 2, 1)
        inp = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks)):
            mods = []
            for b in range(n):
                mods.append(Bottleneck(inp, planes, 2 if i and not b else 1, groups, base_width))
                inp = planes * 4
            setattr(self, f"layer{i + 1}", tnn.Sequential(*mods))
        self.avgpool, self.fc = tnn.AdaptiveAvgPool2d(1), tnn.Linear(inp, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class InvertedResidual(tnn.Module):
    def __init__(self, cin, cout, s, t):
        super().__init__()
        hid = cin * t
        layers = [cba(cin, hid, 1, act=tnn.ReLU6)] if t != 1 else []
        layers += [cba(hid, hid, 3, s, hid, tnn.ReLU6), tnn.Conv2d(hid, cout, 1, bias=False),
                   tnn.BatchNorm2d(cout)]
        self.conv = tnn.Sequential(*layers)
        self.res = s == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.res else self.conv(x)


class MobileNetV2(tnn.Module):
    def __init__(self, classes=10):
        super().__init__()
        feats, cin = [cba(3, 32, 3, 2, act=tnn.ReLU6)], 32
        for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                           (6, 160, 3, 2), (6, 320, 1, 1)]:
            for i in range(n):
                feats.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        feats.append(cba(cin, 1280, 1, act=tnn.ReLU6))
        self.features = tnn.Sequential(*feats)
        self.avgpool = tnn.AdaptiveAvgPool2d(1)
        self.classifier = tnn.Sequential(tnn.Dropout(0.2), tnn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class MobileNetV1(tnn.Module):
    def __init__(self, classes=10):
        super().__init__()
        mods, c = [cba(3, 32, 3, 2)], 32
        for out, s in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [
                (1024, 2), (1024, 1)]:
            mods.append(tnn.Sequential(*cba(c, c, 3, s, c), *cba(c, out, 1)))
            c = out
        self.model = tnn.Sequential(*mods)
        self.avgpool, self.fc = tnn.AdaptiveAvgPool2d(1), tnn.Linear(1024, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.model(x)), 1))


class SE(tnn.Module):
    def __init__(self, c, sq):
        super().__init__()
        self.avgpool = tnn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = tnn.Conv2d(c, sq, 1), tnn.Conv2d(sq, c, 1)
        self.activation, self.scale_activation = tnn.SiLU(), tnn.Sigmoid()

    def forward(self, x):
        return self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x))))) * x


class MBConv(tnn.Module):
    def __init__(self, cin, cout, e, k, s):
        from ipukern.nn.zoo_cnn import _divisible
        super().__init__()
        hid = _divisible(cin * e)
        layers = [cba(cin, hid, 1, act=tnn.SiLU)] if hid != cin else []
        layers += [cba(hid, hid, k, s, hid, tnn.SiLU), SE(hid, max(1, cin // 4)), cba(hid, cout, 1, act=None)]
        self.block = tnn.Sequential(*layers)
        self.res = s == 1 and cin == cout

    def forward(self, x):
        return self.block(x) + x if self.res else self.block(x)


class EfficientNet(tnn.Module):
    def __init__(self, variant, classes=10):
        import math

        from ipukern.nn.zoo_cnn import _EFFNET, _MBCONV, _divisible
        super().__init__()
        width, depth, _ = _EFFNET[variant]
        c = _divisible(32 * width)
        feats = [cba(3, c, 3, 2, act=tnn.SiLU)]
        for e, k, s, _, out, n in _MBCONV:
            out = _divisible(out * width)
            blocks = []
            for b in range(int(math.ceil(n * depth))):
                blocks.append(MBConv(c, out, e, k, s if b == 0 else 1))
                c = out
            feats.append(tnn.Sequential(*blocks))
        feats.append(cba(c, 4 * c, 1, act=tnn.SiLU))
        self.features = tnn.Sequential(*feats)
        self.avgpool = tnn.AdaptiveAvgPool2d(1)
        self.classifier = tnn.Sequential(tnn.Dropout(0.2), tnn.Linear(4 * c, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


REFS = {
    "resnet50": lambda: ResNet((3, 4, 6, 3)),
    "resnext50_32x4d": lambda: ResNet((3, 4, 6, 3), 32, 4),
    "resnext101_32x4d": lambda: ResNet((3, 4, 23, 3), 32, 4),
    "mobilenet_v1": MobileNetV1,
    "mobilenet_v2": MobileNetV2,
    **{f"efficientnet_b{i}": (lambda i=i: EfficientNet(f"b{i}")) for i in range(5)},
}


@pytest.mark.parametrize("name", list(REFS))
def test_zoo_cnn_matches_torch(name):
    net = ik.models.MODELS[name](image_size=SIZE, num_classes=10)
    params = net.init_params(seed=0)
    ref = REFS[name]().eval()
    missing, unexpected = ref.load_state_dict({k: torch.tensor(v) for k, v in params.items()}, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
    x = np.random.default_rng(0).standard_normal((2, 3, SIZE, SIZE)).astype(np.float32)
    run = ik.run_network(net, x, params, machine=SMALL, allow_overflow=True)
    with torch.no_grad():
        want = ref(torch.tensor(x)).numpy().astype(np.float64)
    assert np.abs(run.output - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6)
    # the torch module imports to the same layers, in the same order, with the same weights
    imp = ik.from_torch(ref, x)
    assert [type(lay) for _, lay in imp.layers] == [type(lay) for _, lay in net.layers]
    assert [lay.describe() for _, lay in imp.layers] == [lay.describe() for _, lay in net.layers]
    assert set(imp.params) == set(params)
    out = ik.run_network(imp, x, machine=SMALL, allow_overflow=True).output
    assert np.array_equal(out, run.output)


def test_from_torch_unknown_node_names_node_and_op():
    class Odd(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv = tnn.Conv2d(3, 4, 3)
            self.up = tnn.Upsample(scale_factor=2)

        def forward(self, x):
            return self.up(self.conv(x))

    with pytest.raises(nn.UnsupportedTorchNode, match=r"node 'up' \(call_module up\).*Upsample"):
        ik.from_torch(Odd(), np.zeros((1, 3, 8, 8), np.float32))


def n_trainable(net):
    return sum(int(np.prod(s)) for k, s in net.param_shapes().items() if "running_" not in k)


def test_bert_and_zoo_shapes():
    net = ik.models.bert_base(seq_len=16)
    assert net.shape(net.outputs[0], batch=2) == (2, 16, 768)
    # BERT-Base's 110M less the token-type table and the pooler, position table of 16 rows
    assert n_trainable(net) == 30522 * 768 + 16 * 768 + 2 * 768 + 12 * (
        4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768 + 4 * 768)
    # torchvision's parameter counts
    assert n_trainable(ik.models.resnet50()) == 25_557_032
    assert n_trainable(ik.models.mobilenet_v2()) == 3_504_872
    assert n_trainable(ik.models.efficientnet_b0()) == 5_288_548
    assert n_trainable(ik.models.resnext50_32x4d()) == 25_028_904
