"""The measurement behind README "expandDims and kernel splits on the zoo": what PopLibs'
expandDims (built) and kernel splits (not built) change on the zoo's conv layers.

Run: ``python bench/zoo_transforms.py [batch]`` (a few minutes on one core). For every
distinct conv layer of the CNNs in the zoo (fp16, float partials, GC200):

- expandDims: the layer's plan without it (``expand_dims=""``) and the planner's choice,
  both as planned and as the built programs cost them (estimate mode), for every layer
  where the planner chooses it;
- network totals (inference, batch ``batch``, fp16, float partials) with and without
  expandDims (the latter in a child process with the candidates switched off);
- kernel splits: an optimistic bound, the kernel rows folded into channels with no transform
  cost (a kernel-row split pays halos and a reduction instead);
- serial splits: how many layers need a serial split at all.
"""
import json
import subprocess
import sys

import ipukern as ik
from ipukern.conv import expand
from ipukern.conv.build import build_conv_program
from ipukern.conv.params import ConvParams
from ipukern.conv.planner import plan_conv
from ipukern.nn.layers import Conv2d

M = ik.GC200
MODELS = ("resnet50", "resnext50_32x4d", "mobilenet_v1", "mobilenet_v2", "efficientnet_b0",
          "efficientnet_b4")
NETWORKS = ("resnet50", "mobilenet_v1", "efficientnet_b4")


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


def program_cycles(plan) -> int:
    prog = build_conv_program(plan)
    return prog.device.run(prog.program, "estimate").total_cycles


def network_totals(batch: int) -> dict:
    return {name: ik.nn.estimate_network(getattr(ik.models, name)(), batch=batch, dtype="float16",
                                         partials="float").total_cycles for name in NETWORKS}


def main(batch: int = 8) -> None:
    convs = zoo_convs(batch)
    built, kernel, serial = [], [], []
    for p, names in convs.items():
        base = plan_conv(p, M, expand_dims="")
        if base.serial > 1:
            serial.append((p.describe(), base.serial, names[0]))
        if p.kernel_h * p.kernel_w == 1:
            continue
        chosen = plan_conv(p, M)
        if chosen.expand_dims:
            before, after = program_cycles(base), program_cycles(chosen)
            built.append((before / after, chosen.expand_dims, p.describe(), base.estimated_cycles,
                          chosen.estimated_cycles, before, after, names))
        if p.kernel_h > 1:
            pe = plan_conv(expand.expanded_params(p, "h"), M, expand_dims="")
            kernel.append((base.estimated_cycles / pe.estimated_cycles, p.describe(),
                           base.estimated_cycles, pe.estimated_cycles, names[0]))
    print(f"{len(convs)} distinct conv layers at batch {batch}")
    print(f"expandDims chosen on {len(built)} layers (planned before -> after; program before -> "
          "after, ratio):")
    for r in sorted(built, reverse=True):
        print(f"  x{r[0]:.2f} ({r[1]}) {r[2]}: planned {r[3]:,} -> {r[4]:,}; program {r[5]:,} -> "
              f"{r[6]:,}  {', '.join(r[7][:3])}{' ...' if len(r[7]) > 3 else ''}")
    print(f"layers gaining > 10%: {sum(r[0] > 1.1 for r in built)}")
    after = network_totals(batch)
    child = subprocess.run([sys.executable, __file__, str(batch), "--networks-without-expand"],
                           capture_output=True, text=True, check=True)
    before = json.loads(child.stdout)
    for name in NETWORKS:
        print(f"network {name} b{batch}: {before[name]:,} -> {after[name]:,} cycles "
              f"(x{before[name] / after[name]:.3f})")
    print(f"kernel-row split bound > 10%: {sum(r[0] > 1.1 for r in kernel)} of {len(kernel)}")
    for r in sorted(kernel, reverse=True)[:6]:
        print(f"  x{r[0]:.2f} {r[1]}: {r[2]:,} -> {r[3]:,}  {r[4]}")
    print(f"layers with serial splits: {len(serial)}", *serial[:5], sep="\n  ")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    b = int(args[0]) if args else 8
    if "--networks-without-expand" in sys.argv:
        expand.EXPAND_CANDIDATES = ()        # the planner then tries no expandDims subset
        print(json.dumps(network_totals(b)))
    else:
        main(b)
