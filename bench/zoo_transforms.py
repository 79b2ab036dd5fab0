"""The measurement behind README "Transforms not modelled": would PopLibs' expandDims, kernel
splits or serial in-channel splits change the plans of the zoo's conv layers by > 10%?

Run: ``python bench/zoo_transforms.py [batch]`` (about 2 minutes on one core). For every
distinct conv layer of the CNNs in the zoo (fp16, float partials, GC200):

- expandDims: the layer's plan vs the plan of the conv with kernel dims folded into the
  input channels, plus PopLibs' transform cost (addTransformCycleEstimate: copy at
  5 / (elem bytes x 4) cycles per byte and exchange of the im2col operand per used tile),
  plus one sync and one exchange overhead;
- kernel splits: an optimistic bound, the kernel rows folded into channels with no transform
  cost (a kernel-row split pays halos and a reduction instead);
- serial splits: how many layers need a serial split at all.
"""
import math
import sys

import ipukern as ik
from ipukern.conv.params import ConvParams
from ipukern.conv.planner import plan_conv
from ipukern.nn.layers import Conv2d

M = ik.GC200
MODELS = ("resnet50", "resnext50_32x4d", "mobilenet_v1", "mobilenet_v2", "efficientnet_b0",
          "efficientnet_b4")


def zoo_convs(batch: int) -> dict:
    out: dict = {}
    for name in MODELS:
        net = getattr(ik.models, name)()
        shapes = net.shapes(batch)
        for n, node in net.nodes.items():
            if isinstance(node.layer, Conv2d):
                L = node.layer
                p = ConvParams.from_shapes(shapes[node.inputs[0]], L.weight_shape(), stride=L.stride,
                                           padding=L.padding, dilation=L.dilation, groups=L.groups,
                                           dtype="float16", partials="float")
                out.setdefault(p, []).append(f"{name}:{n}")
    return out


def transform_cycles(n_elems: int, tiles: int, elem_bytes: int = 2) -> int:
    per_tile = math.ceil(n_elems * elem_bytes / tiles)
    copy = math.ceil(per_tile * 5 / (min(8, elem_bytes) * 4))
    return (copy + math.ceil(per_tile / M.exchange_bytes_per_cycle) + M.sync_cycles
            + M.exchange_overhead_cycles)


def expanded(p: ConvParams, dims: str) -> ConvParams:
    """expandDims over "h", "w" or "hw": those kernel dims folded into the input channels."""
    kh, kw, (sh, sw), (ph, pw), (dh, dw) = p.kernel_h, p.kernel_w, p.stride, p.padding, p.dilation
    ci, in_h, in_w = p.in_per_group, p.in_h, p.in_w
    if "h" in dims:
        ci, kh, in_h, sh, ph, dh = ci * kh, 1, p.out_h, 1, 0, 1
    if "w" in dims:
        ci, kw, in_w, sw, pw, dw = ci * kw, 1, p.out_w, 1, 0, 1
    return ConvParams(p.batch, ci * p.groups, p.out_channels, in_h, in_w, kh, kw, stride=(sh, sw),
                      padding=(ph, pw), dilation=(dh, dw), groups=p.groups, dtype=p.dtype,
                      partials=p.partials)


def main(batch: int = 8) -> None:
    convs = zoo_convs(batch)
    expand, kernel, serial = [], [], []
    for p, names in convs.items():
        base = plan_conv(p, M)
        if base.serial > 1:
            serial.append((p.describe(), base.serial, names[0]))
        if p.kernel_h * p.kernel_w == 1:
            continue
        for dims in ("h", "w", "hw"):
            if ("h" in dims and p.kernel_h == 1) or ("w" in dims and p.kernel_w == 1):
                continue
            e = expanded(p, dims)
            pe = plan_conv(e, M)
            tc = transform_cycles(e.batch * e.in_channels * e.in_h * e.in_w, pe.tiles_used)
            expand.append((base.estimated_cycles / (pe.estimated_cycles + tc), dims, p.describe(),
                           base.estimated_cycles, pe.estimated_cycles, tc, names[0]))
            if dims == "h":
                kernel.append((base.estimated_cycles / pe.estimated_cycles, p.describe(),
                               base.estimated_cycles, pe.estimated_cycles, names[0]))
    print(f"{len(convs)} distinct conv layers at batch {batch}")
    print("expandDims wins > 10%:")
    for r in sorted(expand, reverse=True):
        if r[0] > 1.1:
            print(f"  x{r[0]:.2f} ({r[1]}) {r[2]}: {r[3]:,} -> {r[4]:,} + {r[5]:,}  {r[6]}")
    print(f"kernel-row split bound > 10%: {sum(r[0] > 1.1 for r in kernel)} of {len(kernel)}")
    for r in sorted(kernel, reverse=True)[:6]:
        print(f"  x{r[0]:.2f} {r[1]}: {r[2]:,} -> {r[3]:,}  {r[4]}")
    print(f"layers with serial splits: {len(serial)}", *serial[:5], sep="\n  ")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
