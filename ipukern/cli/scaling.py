"""``ipukern scaling``: the grouped-conv scaling sweep, IPU model vs GPU model."""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
import sys
from typing import Any

from .._pool import process_pool
from ._common import (PRESETS, Outputs, Progress, UsageError, add_common, apply_bandwidths, cpg_list,
                      exchange_note, gpu_list, int_list, jobs_arg, machine_file, machine_list,
                      progress_enabled, shape_arg)


def _layers(args: argparse.Namespace) -> list:
    """The layers ``--layer``, ``--shape`` and ``--layers`` name (the defaults when none)."""
    from .. import scaling as sc
    layers: list[sc.ConvLayer] = []
    if args.layer:
        names = [n.strip() for n in args.layer.split(",") if n.strip()]
        try:
            layers += list(sc.DEFAULT_LAYERS) if names == ["all"] else [sc.get_layer(n) for n in names]
        except ValueError as e:    # a name that names nothing: a usage error (exit 2)
            raise UsageError(f"--layer: {e} (or 'all')") from None
    if args.shape is not None:
        n, c, h, w = args.shape
        layers.append(sc.ConvLayer(args.name, channels=c, height=h, width=w, kernel=args.kernel,
                                   stride=args.stride, padding=args.padding,
                                   out_channels=args.out_channels, batch=n))
    if args.layers:
        layers += sc.read_layers(args.layers)
    return layers or list(sc.DEFAULT_LAYERS)


def _cmd_scaling(args: argparse.Namespace) -> int:
    from .. import scaling as sc

    layers = _layers(args)
    if args.batch is not None:
        batch: Any = args.batch
    elif args.shape is not None and not args.layer:
        batch = None                              # the --shape's own N
    else:
        batch = list(sc.DEFAULT_BATCH)
    machines = apply_bandwidths(args.machine_files or args.machines, args.exchange_bandwidth)
    if args.gpus is None:
        from ..gpu import A100_40GB
        args.gpus = [A100_40GB]

    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a directory")
    if not args.quiet:
        print("ipukern scaling: grouped conv2d throughput vs channels per group "
              f"({args.dtype}, IPU partials {args.partials}, GPU curve {args.gpu_efficiency})")
        for line in exchange_note(machines):
            print("  " + line)
    # --jobs N > 1: a pool of N workers made here (shut down on the way out, errors too)
    pool = process_pool(args.jobs) if args.jobs is not None and args.jobs > 1 else None
    executor = "auto" if args.jobs is None else pool
    with Progress("sweep", enabled=progress_enabled(args)) as bar, pool or contextlib.nullcontext():
        result = sc.grouped_conv_sweep(
            layers, channels_per_group=args.cpg, machines=machines, gpus=args.gpus,
            dtype=args.dtype, batch=batch, partials=args.partials,
            gpu_efficiency=args.gpu_efficiency, progress=bar, executor=executor)
    if not result:
        raise ValueError("no (layer, cpg) point to sweep: every requested channels-per-group "
                         "value was skipped (" + "; ".join(
                             f"{s['layer']}: {s['reason']}" for s in result.skipped) + ")")
    print()
    print(result.format_table())
    if result.skipped and not args.quiet:
        by_layer: dict[str, list[int]] = {}
        for s in result.skipped:
            by_layer.setdefault(s["layer"], []).append(s["channels_per_group"])
        print("skipped (channels per group that do not divide the channels): " + "; ".join(
            f"{k} cpg {','.join(map(str, v))}" for k, v in by_layer.items()))
    out_dir.mkdir(parents=True, exist_ok=True)     # only now: a failed sweep leaves no folder
    with Outputs() as out:
        result.to_csv(out.stage(out_dir / "scaling.csv"))
        result.to_json(out.stage(out_dir / "scaling.json"))
        if not args.no_plot:
            from .. import plots
            plot = out_dir / f"scaling.{args.format}"
            try:
                plots.plot_scaling(result, out.stage(plot), size=args.size)
            except ImportError:
                out.drop(plot)
                print(f"scaling.{args.format} not written: {plots.PLOT_INSTALL_HINT}",
                      file=sys.stderr)
        written = out.commit()
    if not args.quiet:
        print(f"\n{len(result)} rows in {result.meta['host_seconds']:.1f} s "
              f"({result.meta['executor']}); wrote "
              + ", ".join(str(p) for p in written))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    # scaling
    s = sub.add_parser(
        "scaling", help="grouped-conv throughput vs channels per group, IPU vs GPU",
        description="Sweep channels per group for grouped 3x3/5x5 conv layers on the simulated "
                    "IPU (estimate mode) and the GPU model; print a table and write "
                    "scaling.csv, scaling.json and scaling.png into --out.",
        epilog="examples:\n"
               "  ipukern scaling                                   # the five default layers\n"
               "  ipukern scaling --layer resnext50_c128 --batch 32 --exchange-bandwidth both\n"
               "  ipukern scaling --shape 8,96,28,28 --cpg 1,4,dense --gpus none\n"
               "  ipukern scaling --format pdf --size column --out fig/   # for a paper",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--layer", metavar="NAMES",
                   help="comma-separated default layers (resnext50_c128, resnext50_c256, "
                        "effnet_b0_dw3, effnet_b0_dw5, mobilenet_v1_dw_s2) or 'all' "
                        "(default: all, unless --shape is given)")
    s.add_argument("--shape", type=shape_arg(4), metavar="N,C,H,W",
                   help="a custom layer instead of (or, with --layer, besides) the defaults; "
                        "N is its batch unless --batch is given")
    s.add_argument("--name", default="custom", help="name of the --shape layer (default custom)")
    s.add_argument("--kernel", type=int, default=3, help="--shape layer kernel size (default 3)")
    s.add_argument("--stride", type=int, default=1, help="--shape layer stride (default 1)")
    s.add_argument("--padding", type=int, default=None,
                   help="--shape layer padding (default kernel // 2)")
    s.add_argument("--out-channels", type=int, default=None,
                   help="--shape layer output channels (default C)")
    s.add_argument("--batch", type=int_list, default=None, metavar="N[,N...]",
                   help="batch sizes (default 1,32)")
    s.add_argument("--cpg", type=cpg_list, default=[1, 2, 4, 8, 16, 32, 64, "dense"],
                   metavar="LIST", help="input channels per group, integers or 'dense' "
                                        "(default 1,2,4,8,16,32,64,dense); values that do not "
                                        "divide a layer's channels are skipped")
    s.add_argument("--layers", metavar="FILE.csv",
                   help="a layer list: CSV with a header, columns name,channels,height,width "
                        "and optionally kernel,stride,padding,out_channels,batch,note (added to "
                        "--layer / --shape; replaces the defaults)")
    mg = s.add_mutually_exclusive_group()
    mg.add_argument("--machines", type=machine_list, default=[PRESETS["GC200"]],
                    metavar="NAMES", help="IPU presets, e.g. GC200,BOW,GC2 (default GC200)")
    mg.add_argument("--machine-file", dest="machine_files", type=machine_file, action="append",
                    metavar="FILE.toml",
                    help="an IPU described in a TOML machine file instead of the presets "
                         "(repeat for several)")
    s.add_argument("--gpus", type=gpu_list, default=None, metavar="NAMES",
                   help="GPU models, e.g. A100_40GB,V100,H100 or 'none' (default A100_40GB)")
    s.add_argument("--out", default=".", metavar="DIR", help="output directory (default .)")
    s.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    s.add_argument("--format", choices=["png", "pdf", "svg"], default="png",
                   help="plot file format: scaling.png (default), vector scaling.pdf or scaling.svg")
    s.add_argument("--size", choices=["page", "column", "double"], default="page",
                   help="plot size: page (screens, default), column (3.5 in) or double (7.16 in) "
                        "for a two-column paper")
    s.add_argument("-j", "--jobs", type=jobs_arg, default=None, metavar="N",
                   help="worker processes for the sweep; 1 runs it in this process (default: "
                        "a process pool of up to one worker per CPU only once the sweep looks "
                        "long enough to gain from one, judged from its first points and the "
                        "load; the built-in sweep stays serial on an idle 2-core machine)")
    s.add_argument("-q", "--quiet", action="store_true", help="print only the table")
    add_common(s)
    s.set_defaults(func=_cmd_scaling)
