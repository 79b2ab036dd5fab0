"""``ipukern conv`` and ``ipukern matmul``: one layer, estimated or executed, with its profile."""
from __future__ import annotations

import argparse

from ._common import (Progress, add_common, add_run_options, add_views, apply_bandwidths, gpu_compare,
                      progress_enabled, shape_arg, write_views)


def _pair(v: list[int]) -> tuple[int, int]:
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _cmd_conv(args: argparse.Namespace) -> int:
    import numpy as np

    from .. import ops
    from ..gpu import estimate_conv
    from ..conv import ConvParams

    n, c, h, w = args.shape
    k = args.kernel if len(args.kernel) == 2 else args.kernel * 2
    if args.groups is not None and args.cpg is not None:
        raise ValueError("give --groups or --cpg, not both")
    if args.cpg is not None:
        if args.cpg < 1 or c % args.cpg:
            raise ValueError(f"--cpg {args.cpg} does not divide the {c} input channels")
        groups = c // args.cpg
    else:
        groups = args.groups if args.groups is not None else 1
    out_c = args.out_channels if args.out_channels is not None else c
    if groups < 1 or c % groups:
        raise ValueError(f"groups={groups} does not divide the {c} input channels")
    padding = args.padding if args.padding is not None else [k[0] // 2, k[1] // 2]
    params = ConvParams.from_shapes((n, c, h, w), (out_c, c // groups, k[0], k[1]),
                                    stride=_pair(args.stride), padding=_pair(padding),
                                    dilation=_pair(args.dilation), groups=groups,
                                    dtype=args.dtype, partials=args.partials)
    mode = "executed on random data" if args.execute else "estimate mode (no data touched)"
    profiles = []
    for i, machine in enumerate(apply_bandwidths([args.machine], args.exchange_bandwidth)):
        kw = dict(stride=params.stride, padding=params.padding, dilation=params.dilation,
                  groups=groups, machine=machine, partials=args.partials, method=args.method)
        with Progress("conv", enabled=progress_enabled(args)):
            if args.execute:
                rng = np.random.default_rng(args.seed)
                dt = np.dtype(params.dtype)
                x = rng.standard_normal(params.input_shape).astype(dt)
                wt = rng.standard_normal(params.weight_shape).astype(dt)
                b = rng.standard_normal(params.out_channels).astype(dt) if args.bias else None
                run = ops.conv.conv2d(x, wt, b, **kw)
                profile = run.profile
            else:
                profile = ops.conv.estimate_conv2d(params.input_shape, params.weight_shape,
                                                   dtype=params.dtype, bias=args.bias, **kw)
        if i:
            print()
        print(f"conv2d {params.describe()} on {machine.name}: {mode}")
        print(profile.summary())
        if args.execute:
            out = run.output
            print(f"output {out.shape} {out.dtype}: mean {float(np.mean(out, dtype=np.float64)):.4g}, "
                  f"mean |y| {float(np.mean(np.abs(out), dtype=np.float64)):.4g} (values not checked)")
        if args.candidates:
            plan = ops.conv.plan_conv2d(params.input_shape, params.weight_shape,
                                        dtype=params.dtype, bias=args.bias, **kw)
            print(f"planner candidates (best plan of each vertex method, top {args.candidates}):")
            for cand in plan.candidates(args.candidates):
                print("  " + cand.describe())
        if args.gpu is not None:
            print()
            for line in gpu_compare(estimate_conv(params, args.gpu, efficiency=args.gpu_efficiency),
                                     profile.tflops):
                print(line)
        profiles.append(profile)
    finish(profiles, args)
    return 0


def _cmd_matmul(args: argparse.Namespace) -> int:
    import numpy as np

    from ..ops import estimate_matmul, matmul

    m, k, n = args.shape
    if min(m, k, n) < 1:
        raise ValueError(f"matmul sizes must be >= 1, got {m}x{k}x{n}")
    mode = "executed on random data" if args.execute else "estimate mode (no data touched)"
    profiles = []
    for i, machine in enumerate(apply_bandwidths([args.machine], args.exchange_bandwidth)):
        with Progress("matmul", enabled=progress_enabled(args)):
            if args.execute:
                rng = np.random.default_rng(args.seed)
                a = rng.standard_normal((m, k)).astype(args.dtype)
                b = rng.standard_normal((k, n)).astype(args.dtype)
                profile = matmul(a, b, machine=machine, partials=args.partials).profile
            else:
                profile = estimate_matmul((m, k), (k, n), dtype=args.dtype, machine=machine,
                                          partials=args.partials)
        if i:
            print()
        print(f"matmul ({m}x{k}) @ ({k}x{n}) {args.dtype} on {machine.name}: {mode}")
        print(profile.summary())
        if args.gpu is not None:
            from ..gpu import estimate_matmul as gpu_matmul
            print()
            for line in gpu_compare(gpu_matmul(m, k, n, dtype=args.dtype, gpu=args.gpu,
                                                efficiency=args.gpu_efficiency), profile.tflops):
                print(line)
        profiles.append(profile)
    finish(profiles, args)
    return 0


def finish(profiles: list, args: argparse.Namespace) -> None:
    """With several exchange bandwidths: a comparison line; then the files of the first
    profile (the others' files get the machine's name before the suffix, e.g.
    a-GC200-xch8TB.json; ``--json -`` writes one JSON list of all the profiles)."""
    if len(profiles) > 1:
        base = profiles[0]
        print()
        print("exchange bandwidth comparison: " + "; ".join(
            f"{p.machine.name} {p.machine.exchange_bandwidth / 1e12:.1f} TB/s: {p.total_cycles:,} "
            f"cycles ({p.total_cycles / base.total_cycles:.3f}x, exchange {p.exchange_cycles:,})"
            for p in profiles))
    if args.json == "-" and len(profiles) > 1:
        # one JSON document on stdout: a list with one profile per machine
        args.json_stream.write("[\n" + ",\n".join(p.to_json(indent=1) for p in profiles) + "\n]\n")
        args.json_stream.flush()
        args.json = None
    write_views(profiles[0], args)
    for p in profiles[1:]:
        write_views(p, args, suffix=f"-{p.machine.name}")


def register(sub: argparse._SubParsersAction) -> None:
    # conv
    c = sub.add_parser("conv", help="estimate (or --execute) one grouped conv2d, print its profile",
                       description="Plan one grouped conv2d on the simulated IPU and print the "
                                   "profile (supersteps, cycles, memory) and the GPU model's "
                                   "figure.",
                       epilog="examples:\n"
                              "  ipukern conv --shape 1,128,56,56 --cpg 4          # ResNeXt-50 grouped 3x3\n"
                              "  ipukern conv --shape 8,144,56,56 --cpg 1 --exchange-bandwidth both\n"
                              "  ipukern conv --shape 8,128,56,56 --cpg 4 --json - | python -m json.tool\n"
                              "  ipukern conv --shape 8,128,56,56 --cpg 4 --trace trace.json "
                              "--memory-png mem.pdf\n"
                              "  ipukern conv --shape 1,32,14,14 --execute --gpu none",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--shape", type=shape_arg(4), default=[1, 128, 56, 56],
                   metavar="N,C,H,W", help="input shape (default 1,128,56,56)")
    c.add_argument("--out-channels", type=int, default=None, help="output channels (default C)")
    c.add_argument("--kernel", type=shape_arg((1, 2)), default=[3], metavar="K[,K]",
                   help="kernel size (default 3)")
    c.add_argument("--stride", type=shape_arg((1, 2)), default=[1], metavar="S[,S]",
                   help="stride (default 1)")
    c.add_argument("--padding", type=shape_arg((1, 2)), default=None, metavar="P[,P]",
                   help="padding (default kernel // 2)")
    c.add_argument("--dilation", type=shape_arg((1, 2)), default=[1], metavar="D[,D]",
                   help="dilation (default 1)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--groups", type=int, default=None, help="groups (default 1)")
    g.add_argument("--cpg", type=int, default=None, help="input channels per group")
    c.add_argument("--method", choices=["AMP", "SLIC", "VMAC", "HMAC"], default=None,
                   help="force a vertex method (default: the planner's choice)")
    c.add_argument("--bias", action="store_true", help="include a bias add")
    c.add_argument("--candidates", type=int, default=0, metavar="K",
                   help="also list the planner's K best alternatives (one per vertex method) "
                        "with their estimated cycles: why this method and not another")
    add_run_options(c)
    add_common(c)
    add_views(c)
    c.set_defaults(func=_cmd_conv)

    # matmul
    m = sub.add_parser("matmul", help="estimate (or --execute) one matmul, print its profile",
                       description="Plan one (M x K) @ (K x N) matmul on the simulated IPU (a 1x1 "
                                   "convolution, as in PopLibs) and print the profile and the "
                                   "GPU model's figure.",
                       epilog="examples:\n"
                              "  ipukern matmul --shape 8192,1024,4096          # BERT-Large FFN\n"
                              "  ipukern matmul --shape 2048,2048,2048 --exchange-bandwidth both\n"
                              "  ipukern matmul --shape 512,512,512 --execute --gpu none --json -",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("--shape", type=shape_arg(3), default=[1024, 1024, 1024],
                   metavar="M,K,N", help="(M x K) @ (K x N) (default 1024,1024,1024)")
    add_run_options(m)
    add_common(m)
    add_views(m)
    m.set_defaults(func=_cmd_matmul)
