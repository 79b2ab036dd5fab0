"""The measurement behind docs/modelling.rst (expandDims, kernel splits and serial splits on
the zoo): what PopLibs' expandDims and kernel splits (both built) change on the zoo's conv
layers.

Run: ``python bench/zoo_transforms.py [batch]`` (a few minutes on one core), or
``python bench/zoo_transforms.py [batch] --kernel-splits`` for the kernel-split part only.
For every distinct conv layer of the CNNs in the zoo (fp16, float partials, GC200):

- expandDims: the layer's plan without it (``expand_dims=""``) and the planner's choice,
  both as planned and as the built programs cost them (estimate mode), for every layer
  where the planner chooses it;
- network totals (inference, batch ``batch``, fp16, float partials) with and without
  expandDims (the latter in a child process with the candidates switched off);
- kernel splits: the layer's plan without them (``kernel_split=1``) and the planner's
  choice, planned and built (estimate mode), for every layer where the planner chooses
  one, next to the optimistic bound measured before they were built (the kernel rows folded
  into channels with no transform cost); network totals with and without them (the latter
  in a child process with ``search.KERNEL_SPLITS`` off);
- serial splits: how many layers need a serial split at all.
"""
import json
import subprocess
import sys

import ipukern as ik
from ipukern.conv import ConvParams, build_conv_program, expanded_params, params, plan_conv, search
from ipukern.nn.layers import Conv2d

M = ik.GC200
MODELS = ("resnet50", "resnext50_32x4d", "mobilenet_v1", "mobilenet_v2", "efficientnet_b0",
          "efficientnet_b4")
NETWORKS = ("resnet50", "mobilenet_v1", "efficientnet_b4")
#: the networks whose depthwise layers the kernel-split bound pointed at
KSPLIT_NETWORKS = ("efficientnet_b0", "mobilenet_v2")


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


def network_totals(batch: int, networks=NETWORKS) -> dict:
    return {name: ik.nn.estimate_network(getattr(ik.models, name)(), batch=batch, dtype="float16",
                                         partials="float").total_cycles for name in networks}


def networks_before_after(batch: int, flag: str, networks) -> None:
    """Network totals now and in a child process with ``flag``'s candidates switched off."""
    after = network_totals(batch, networks)
    child = subprocess.run([sys.executable, __file__, str(batch), flag], capture_output=True,
                           text=True, check=True)
    before = json.loads(child.stdout)
    for name in networks:
        print(f"network {name} b{batch}: {before[name]:,} -> {after[name]:,} cycles "
              f"(x{before[name] / after[name]:.3f})")


def print_gains(rows: list, tag: str, extra=lambda r: "") -> None:
    """Print rows (gain, choice, conv, planned before, after, program before, after, layer
    names, ...) best first, then how many gain more than 10%."""
    for r in sorted(rows, reverse=True):
        names = r[7]
        print(f"  x{r[0]:.2f} ({tag}{r[1]}) {r[2]}: planned {r[3]:,} -> {r[4]:,}; program "
              f"{r[5]:,} -> {r[6]:,}{extra(r)}  {', '.join(names[:3])}"
              f"{' ...' if len(names) > 3 else ''}")
    print(f"layers gaining > 10%: {sum(r[0] > 1.1 for r in rows)}")


def kernel_splits(convs: dict, batch: int) -> None:
    """Every layer whose plan the planner now gives a kernel split: planned and built
    cycles without and with it, and the optimistic bound."""
    rows = []
    for p, names in convs.items():
        if p.kernel_h < 2:
            continue
        chosen = plan_conv(p, M)
        if chosen.kernel_split == 1:
            continue
        base = plan_conv(p, M, kernel_split=1)    # expandDims still allowed
        bound = plan_conv(expanded_params(p, "h"), M, expand_dims="")
        before, after = program_cycles(base), program_cycles(chosen)
        rows.append((before / after, chosen.kernel_split, p.describe(), base.estimated_cycles,
                     chosen.estimated_cycles, before, after, names,
                     base.estimated_cycles / bound.estimated_cycles))
    print(f"kernel split chosen on {len(rows)} layers (planned before -> after; program before "
          "-> after, gain; bound):")
    print_gains(rows, "k", lambda r: f"; bound x{r[8]:.2f}")
    networks_before_after(batch, "--networks-without-kernel-split", KSPLIT_NETWORKS)


def main(batch: int = 8) -> None:
    convs = zoo_convs(batch)
    built, serial = [], []
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
    print(f"{len(convs)} distinct conv layers at batch {batch}")
    print(f"expandDims chosen on {len(built)} layers (planned before -> after; program before -> "
          "after, ratio):")
    print_gains(built, "")
    networks_before_after(batch, "--networks-without-expand", NETWORKS)
    kernel_splits(convs, batch)
    print(f"layers with serial splits: {len(serial)}", *serial[:5], sep="\n  ")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    b = int(args[0]) if args else 8
    if "--networks-without-expand" in sys.argv:
        params.EXPAND_CANDIDATES = ()        # the planner then tries no expandDims subset
        print(json.dumps(network_totals(b)))
    elif "--networks-without-kernel-split" in sys.argv:
        search.KERNEL_SPLITS = False        # the planner then scores no kernel split
        print(json.dumps(network_totals(b, KSPLIT_NETWORKS)))
    elif "--kernel-splits" in sys.argv:
        kernel_splits(zoo_convs(b), b)
    else:
        main(b)
