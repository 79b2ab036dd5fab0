"""CNNs of the zoo, ipukern's own definitions following torchvision's reference models.

Layer and parameter names follow torchvision's module paths (``layer1.0.conv1``,
``features.3.conv.1.0``), so a torchvision ``state_dict`` maps onto ``net.params`` key by
key. Dropout and stochastic depth are identities at inference and are not layers.
MobileNetV1 (not in torchvision) follows Howard et al. 2017, Table 1.
"""
from __future__ import annotations

import math

from . import layers as L
from .network import Network

__all__ = ["resnet8", "resnet20", "resnet_cifar", "resnet50", "resnext50_32x4d", "resnext101_32x4d",
           "mobilenet_v1", "mobilenet_v2",
           "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
           "efficientnet_b4", "efficientnet_b0_g16", "efficientnet_b4_g16", "conv_bn_act"]


def conv_bn_act(net: Network, x: str, name: str, cin: int, cout: int, k: int, stride: int = 1,
                groups: int = 1, act: str | None = "relu", *, bn_name: str | None = None,
                act_name: str | None = None, padding: int | None = None) -> str:
    """Conv (no bias) -> BatchNorm -> activation, torchvision's Conv2dNormActivation."""
    pad = (k - 1) // 2 if padding is None else padding
    y = net.add(L.Conv2d(cin, cout, k, stride=stride, padding=pad, groups=groups), x, name=name)
    y = net.add(L.BatchNorm2d(cout), y, name=bn_name or name.rsplit(".", 1)[0] + ".1")
    if act is not None:
        y = net.add(L.Activation(act), y, name=act_name or name.rsplit(".", 1)[0] + ".2")
    return y


def _classifier(net: Network, x: str, cin: int, classes: int, fc_name: str) -> str:
    y = net.add(L.GlobalAvgPool(), x, name="avgpool")
    y = net.add(L.Flatten(), y, name="flatten")
    y = net.add(L.Linear(cin, classes), y, name=fc_name)
    net.output(y)
    return y


# --------------------------------------------------------------------------- ResNet / ResNeXt
def _bottleneck(net, x, name, inplanes, planes, stride, groups, base_width):
    width = int(planes * (base_width / 64.0)) * groups
    out_ch = planes * 4
    y = net.add(L.Conv2d(inplanes, width, 1), x, name=f"{name}.conv1")
    y = net.add(L.BatchNorm2d(width), y, name=f"{name}.bn1")
    y = net.add(L.ReLU(), y, name=f"{name}.relu1")
    y = net.add(L.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups), y, name=f"{name}.conv2")
    y = net.add(L.BatchNorm2d(width), y, name=f"{name}.bn2")
    y = net.add(L.ReLU(), y, name=f"{name}.relu2")
    y = net.add(L.Conv2d(width, out_ch, 1), y, name=f"{name}.conv3")
    y = net.add(L.BatchNorm2d(out_ch), y, name=f"{name}.bn3")
    idn = x
    if stride != 1 or inplanes != out_ch:
        idn = net.add(L.Conv2d(inplanes, out_ch, 1, stride=stride), x, name=f"{name}.downsample.0")
        idn = net.add(L.BatchNorm2d(out_ch), idn, name=f"{name}.downsample.1")
    y = net.add(L.Add(), y, idn, name=f"{name}.add")
    return net.add(L.ReLU(), y, name=f"{name}.relu3")


def _resnet(name, blocks, groups=1, base_width=64, image_size=224, num_classes=1000) -> Network:
    net = Network(name)
    x = net.input("x", (3, image_size, image_size))
    y = net.add(L.Conv2d(3, 64, 7, stride=2, padding=3), x, name="conv1")
    y = net.add(L.BatchNorm2d(64), y, name="bn1")
    y = net.add(L.ReLU(), y, name="relu")
    y = net.add(L.MaxPool2d(3, 2, 1), y, name="maxpool")
    inplanes = 64
    for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks)):
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            y = _bottleneck(net, y, f"layer{stage + 1}.{b}", inplanes, planes, stride, groups, base_width)
            inplanes = planes * 4
    _classifier(net, y, inplanes, num_classes, "fc")
    return net


def resnet50(image_size: int = 224, num_classes: int = 1000) -> Network:
    """ResNet-50 (He et al. 2016; torchvision v1.5: stride on the 3x3 conv)."""
    return _resnet("resnet50", (3, 4, 6, 3), image_size=image_size, num_classes=num_classes)


def resnext50_32x4d(image_size: int = 224, num_classes: int = 1000) -> Network:
    """ResNeXt-50 32x4d (Xie et al. 2017): 32 groups of width 4 in the first stage."""
    return _resnet("resnext50_32x4d", (3, 4, 6, 3), 32, 4, image_size, num_classes)


def resnext101_32x4d(image_size: int = 224, num_classes: int = 1000) -> Network:
    """ResNeXt-101 32x4d (Xie et al. 2017, Table 1 family)."""
    return _resnet("resnext101_32x4d", (3, 4, 23, 3), 32, 4, image_size, num_classes)


def _basic_block(net, x, name, cin, cout, stride):
    y = conv_bn_act(net, x, f"{name}.conv1", cin, cout, 3, stride, bn_name=f"{name}.bn1",
                    act_name=f"{name}.relu1")
    y = conv_bn_act(net, y, f"{name}.conv2", cout, cout, 3, act=None, bn_name=f"{name}.bn2")
    idn = x
    if stride != 1 or cin != cout:
        idn = conv_bn_act(net, x, f"{name}.downsample.0", cin, cout, 1, stride, act=None,
                          bn_name=f"{name}.downsample.1")
    y = net.add(L.Add(), y, idn, name=f"{name}.add")
    return net.add(L.ReLU(), y, name=f"{name}.relu2")


def resnet_cifar(depth: int = 20, image_size: int = 32, num_classes: int = 10) -> Network:
    """The CIFAR-10 ResNets of He et al. 2016 (Sec. 4.2): a 3x3 conv of 16 channels, three
    stages of n basic blocks (16, 32, 64 channels; the 2nd and 3rd start with stride 2),
    global average pooling and a linear classifier; ``depth = 6 n + 2`` (8, 20, 32, 44, 56,
    110). Shortcuts that change shape are 1x1 conv + batch norm projections (the paper's
    option B). Small enough to execute training steps quickly (tests, demos)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(f"a CIFAR ResNet has depth 6n + 2 >= 8 (8, 20, 32, ...), got {depth!r}")
    n = (depth - 2) // 6
    net = Network(f"resnet{depth}")
    x = net.input("x", (3, image_size, image_size))
    y = conv_bn_act(net, x, "conv1", 3, 16, 3, bn_name="bn1", act_name="relu")
    cin = 16
    for stage, planes in enumerate((16, 32, 64)):
        for b in range(n):
            y = _basic_block(net, y, f"layer{stage + 1}.{b}", cin, planes, 2 if stage and not b else 1)
            cin = planes
    _classifier(net, y, cin, num_classes, "fc")
    return net


def resnet8(image_size: int = 32, num_classes: int = 10) -> Network:
    """ResNet-8 for CIFAR-10 (:func:`resnet_cifar`, one block per stage)."""
    return resnet_cifar(8, image_size, num_classes)


def resnet20(image_size: int = 32, num_classes: int = 10) -> Network:
    """ResNet-20 for CIFAR-10 (He et al. 2016, Table 6: 0.27 M parameters)."""
    return resnet_cifar(20, image_size, num_classes)


# --------------------------------------------------------------------------- MobileNets
def mobilenet_v1(image_size: int = 224, num_classes: int = 1000, width: float = 1.0) -> Network:
    """MobileNetV1 (Howard et al. 2017, Table 1): depthwise-separable 3x3 blocks."""
    net = Network("mobilenet_v1")
    x = net.input("x", (3, image_size, image_size))
    c = int(32 * width)
    y = conv_bn_act(net, x, "model.0.0", 3, c, 3, 2)
    plan = ([(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5
            + [(1024, 2), (1024, 1)])
    for i, (out, s) in enumerate(plan, start=1):
        out = int(out * width)
        y = conv_bn_act(net, y, f"model.{i}.0", c, c, 3, s, groups=c, bn_name=f"model.{i}.1",
                        act_name=f"model.{i}.2")
        y = conv_bn_act(net, y, f"model.{i}.3", c, out, 1, bn_name=f"model.{i}.4",
                        act_name=f"model.{i}.5")
        c = out
    _classifier(net, y, c, num_classes, "fc")
    return net


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of 8, never below 90%."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenet_v2(image_size: int = 224, num_classes: int = 1000) -> Network:
    """MobileNetV2 (Sandler et al. 2018; torchvision layer names)."""
    net = Network("mobilenet_v2")
    x = net.input("x", (3, image_size, image_size))
    y = conv_bn_act(net, x, "features.0.0", 3, 32, 3, 2, act="relu6")
    cin, idx = 32, 1
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            p = f"features.{idx}.conv"
            h, k = y, 0
            if t != 1:
                h = conv_bn_act(net, h, f"{p}.0.0", cin, hid, 1, act="relu6")
                k = 1
            h = conv_bn_act(net, h, f"{p}.{k}.0", hid, hid, 3, stride, groups=hid, act="relu6")
            h = net.add(L.Conv2d(hid, c, 1), h, name=f"{p}.{k + 1}")
            h = net.add(L.BatchNorm2d(c), h, name=f"{p}.{k + 2}")
            if stride == 1 and cin == c:
                h = net.add(L.Add(), h, y, name=f"features.{idx}.add")
            y, cin, idx = h, c, idx + 1
    y = conv_bn_act(net, y, f"features.{idx}.0", cin, 1280, 1, act="relu6")
    _classifier(net, y, 1280, num_classes, "classifier.1")
    return net


# --------------------------------------------------------------------------- EfficientNet
_EFFNET = {"b0": (1.0, 1.0, 224), "b1": (1.0, 1.1, 240), "b2": (1.1, 1.2, 260),
           "b3": (1.2, 1.4, 300), "b4": (1.4, 1.8, 380)}
#: (expand ratio, kernel, stride, in, out, layers): torchvision's MBConv settings (Tan & Le 2019)
_MBCONV = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
           (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]


def _mbconv(net, x, p, cin, cout, block):
    """One MBConv; ``block`` = (expand ratio, kernel, stride, group size or None: depthwise)."""
    expand, k, stride, group_size = block
    hid = _divisible(cin * expand)
    h, j = x, 0
    if hid != cin:
        h = conv_bn_act(net, h, f"{p}.block.0.0", cin, hid, 1, act="silu")
        j = 1
    # depthwise (one channel per group), or Graphcore's group convs of group_size channels
    groups = hid if group_size is None else max(1, hid // group_size)
    if hid % groups:
        raise ValueError(f"{p}: {hid} channels do not split into groups of {group_size}")
    h = conv_bn_act(net, h, f"{p}.block.{j}.0", hid, hid, k, stride, groups=groups, act="silu")
    sq = max(1, cin // 4)
    se = f"{p}.block.{j + 1}"
    s = net.add(L.GlobalAvgPool(), h, name=f"{se}.avgpool")
    s = net.add(L.Conv2d(hid, sq, 1, bias=True), s, name=f"{se}.fc1")
    s = net.add(L.SiLU(), s, name=f"{se}.activation")
    s = net.add(L.Conv2d(sq, hid, 1, bias=True), s, name=f"{se}.fc2")
    s = net.add(L.Sigmoid(), s, name=f"{se}.scale_activation")
    h = net.add(L.ScaleChannels(), h, s, name=f"{se}.scale")
    h = conv_bn_act(net, h, f"{p}.block.{j + 2}.0", hid, cout, 1, act=None)
    if stride == 1 and cin == cout:
        h = net.add(L.Add(), h, x, name=f"{p}.add")
    return h


#: Graphcore's G16 EfficientNet (Masters et al. 2021, arXiv:2106.03640, Sec. 3): the
#: depthwise convs become group convs of 16 channels per group, and the MBConv expand ratio
#: drops from 6 to 4 to pay for their FLOPs (see docs/networks.rst for what was checked)
G16_GROUP_SIZE = 16
G16_EXPAND = 4


def _efficientnet(variant: str, image_size: int | None, num_classes: int,
                  group_size: int | None = None, expand: int | None = None) -> Network:
    width, depth, res = _EFFNET[variant]
    size = res if image_size is None else image_size
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                   or group_size < 1 or group_size % 8):
        raise ValueError(f"group_size must be a positive multiple of 8 (channels are), got {group_size!r}")
    if expand is not None and (isinstance(expand, bool) or not isinstance(expand, int) or expand < 1):
        raise ValueError(f"expand must be a positive int, got {expand!r}")
    suffix = "" if group_size is None else f"_g{group_size}"
    net = Network(f"efficientnet_{variant}{suffix}")
    x = net.input("x", (3, size, size))
    c0 = _divisible(32 * width)
    y = conv_bn_act(net, x, "features.0.0", 3, c0, 3, 2, act="silu")
    cin = c0
    for stage, (e, k, s, _, out, n) in enumerate(_MBCONV, start=1):
        out = _divisible(out * width)
        for b in range(int(math.ceil(n * depth))):
            ratio = e if expand is None or e == 1 else expand
            y = _mbconv(net, y, f"features.{stage}.{b}", cin, out,
                        (ratio, k, s if b == 0 else 1, group_size))
            cin = out
    last = 4 * cin
    y = conv_bn_act(net, y, "features.8.0", cin, last, 1, act="silu")
    _classifier(net, y, last, num_classes, "classifier.1")
    return net


def efficientnet_b0(image_size: int | None = None, num_classes: int = 1000) -> Network:
    """EfficientNet-B0 (Tan & Le 2019; torchvision definition, 224x224 by default)."""
    return _efficientnet("b0", image_size, num_classes)


def efficientnet_b1(image_size: int | None = None, num_classes: int = 1000) -> Network:
    """EfficientNet-B1 (width 1.0, depth 1.1, 240x240 by default)."""
    return _efficientnet("b1", image_size, num_classes)


def efficientnet_b2(image_size: int | None = None, num_classes: int = 1000) -> Network:
    """EfficientNet-B2 (width 1.1, depth 1.2, 260x260 by default)."""
    return _efficientnet("b2", image_size, num_classes)


def efficientnet_b3(image_size: int | None = None, num_classes: int = 1000) -> Network:
    """EfficientNet-B3 (width 1.2, depth 1.4, 300x300 by default)."""
    return _efficientnet("b3", image_size, num_classes)


def efficientnet_b4(image_size: int | None = None, num_classes: int = 1000) -> Network:
    """EfficientNet-B4 (width 1.4, depth 1.8, 380x380 by default)."""
    return _efficientnet("b4", image_size, num_classes)


def efficientnet_b0_g16(image_size: int | None = None, num_classes: int = 1000,
                        expand: int = G16_EXPAND) -> Network:
    """Graphcore's G16 EfficientNet-B0 (Masters et al. 2021): group convs of 16 channels in
    place of the depthwise convs, MBConv expand ratio ``expand`` (4; 6 is the original's)."""
    return _efficientnet("b0", image_size, num_classes, G16_GROUP_SIZE, expand)


def efficientnet_b4_g16(image_size: int | None = None, num_classes: int = 1000,
                        expand: int = G16_EXPAND) -> Network:
    """Graphcore's G16 EfficientNet-B4 (Masters et al. 2021), the network of Graphcore's
    published Bow-POD16 training results (see :func:`efficientnet_b0_g16`)."""
    return _efficientnet("b4", image_size, num_classes, G16_GROUP_SIZE, expand)
