"""``ipukern explore NET... --vary tile_bytes=x1,x2 --vary exchange_bandwidth=8e12,47.5e12``:
a design-space sweep (:func:`ipukern.explore`) on Dask (``--scheduler``), a process pool or
serially. Prints the sensitivity summary; writes ``explore.jsonl`` (the stream: a re-run with
the same ``--out`` computes only the points it lacks), ``explore.csv``, ``explore.parquet``
(with pyarrow) and ``explore_pareto.png`` (with matplotlib) to ``--out``."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..design_space import MACHINE_CONSTANTS, SYSTEM_CONSTANTS, explore, one_at_a_time
from ..plots import PLOT_INSTALL_HINT, have_matplotlib
from ._common import (Outputs, Progress, UsageError, add_progress_options, int_list, machine_file,
                      one_machine, progress_enabled)


def _range(allowed: tuple[str, ...]):
    def parse(text: str) -> tuple[str, list]:
        name, sep, values = text.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise argparse.ArgumentTypeError(f"expected NAME=V1,V2,... got {text!r}")
        if name not in allowed:
            raise argparse.ArgumentTypeError(f"unknown constant {name!r}; constants are {', '.join(allowed)}")
        out: list = []
        for v in values.split(","):
            v = v.strip()
            if v[:1] in ("x", "X"):
                out.append(v)
                continue
            try:
                out.append(float(v))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{name}: {v!r} is not a number or x<factor>") from None
        return name, out
    return parse


def _ranges(pairs: list | None, oat: bool) -> dict | list | None:
    if not pairs:
        return None
    ranges: dict = {}
    for name, values in pairs:
        if name in ranges:
            raise ValueError(f"--vary {name} given twice; give all its values in one --vary")
        ranges[name] = values
    return one_at_a_time(ranges) if oat else ranges


def _write(res, out: Path, plot: bool) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with Outputs() as files:
        res.to_csv(files.stage(out / "explore.csv"))
        written.append("explore.csv")
        try:
            res.to_parquet(files.stage(out / "explore.parquet"))
            written.append("explore.parquet")
        except ImportError as e:
            files.drop(out / "explore.parquet")
            print(e)
        if plot and have_matplotlib():
            try:
                res.plot_pareto(files.stage(out / "explore_pareto.png"))
                written.append("explore_pareto.png")
            except ValueError as e:          # nothing varies that costs something
                files.drop(out / "explore_pareto.png")
                print(f"no Pareto plot: {e}")
        elif plot:
            print(PLOT_INSTALL_HINT)
        files.commit()
    return written


def _cmd_explore(args: argparse.Namespace) -> int:
    from ..nn.models import MODELS
    unknown = [n for n in args.networks if n not in MODELS]
    if unknown:                     # a name that names nothing: a usage error (exit 2)
        raise UsageError(f"unknown network(s) {unknown}; zoo models are {sorted(MODELS)}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise OSError(f"--out {out} exists and is not a directory")
    settings: dict = {"machine": args.machine}
    if args.batch is not None:
        settings["batch" if not (args.systems or args.tune) else "micro_batch"] = args.batch
    if args.dtype is not None:
        settings["dtype"] = args.dtype
    if args.system is not None or args.systems or args.tune:
        settings["system"] = args.system or "POD16"
    with Progress(f"explore {','.join(args.networks)}", enabled=progress_enabled(args)) as prog:
        res = explore(args.networks, machines=_ranges(args.vary, args.oat),
                      systems=_ranges(args.systems, args.oat), tune=args.tune, scheduler=args.scheduler,
                      n_workers=args.workers, out=out / "explore.jsonl", progress=prog, **settings)
    print(res.summary())
    written = _write(res, out, not args.no_plot)
    print(f"wrote explore.jsonl, {', '.join(written)} to {out}")
    return 1 if res.lost else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explore", help="sweep networks over machine / system variants (Dask, resumable)",
                       epilog="examples:\n"
                              "  ipukern explore resnet50 efficientnet_b0 "
                              "--vary exchange_bandwidth=8e12,16e12 "
                              "--vary tile_bytes=x1,x2\n"
                              "  ipukern explore resnet50 --vary n_tiles=x0.5,x1 --oat --scheduler serial\n"
                              "(on a Dask cluster: --scheduler tcp://HOST:8786)\n"
                              "  ipukern explore resnet8 --tune --vary-system n_ipus=4,16 --scheduler serial",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("networks", nargs="+", help="zoo models (resnet50, efficientnet_b0, bert_base, ...)")
    p.add_argument("--vary", action="append", type=_range(MACHINE_CONSTANTS), metavar="NAME=V1,V2",
                   help="a machine constant's values (numbers, or x<factor> of the base); repeat for a "
                        f"grid. Constants: {', '.join(MACHINE_CONSTANTS)}")
    p.add_argument("--vary-system", dest="systems", action="append", type=_range(SYSTEM_CONSTANTS),
                   metavar="NAME=V1,V2", help="a system constant's values (training points): "
                                              f"{', '.join(SYSTEM_CONSTANTS)}")
    p.add_argument("--oat", action="store_true",
                   help="one constant at a time around the base instead of every combination")
    mg = p.add_mutually_exclusive_group()
    mg.add_argument("--machine", type=one_machine, default="GC200", metavar="NAME",
                    help="the base machine: GC200 (default), BOW or GC2")
    mg.add_argument("--machine-file", dest="machine", type=machine_file, metavar="FILE.toml",
                    help="the base machine from a machine file")
    p.add_argument("--system", default=None, help="the base system of training points (default POD16)")
    p.add_argument("--tune", action="store_true",
                   help="each point is ipukern tune's best fitting training configuration on its system")
    p.add_argument("--batch", type=int_list, default=None, metavar="B1,B2",
                   help="batch sizes (micro-batch of training points); default 16 / searched by --tune")
    p.add_argument("--dtype", choices=["float16", "float32"], default=None, help="dtype (default float16)")
    p.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="a Dask scheduler (tcp://host:8786), 'local' (a LocalCluster), 'process' or "
                        "'serial'; default a LocalCluster where Dask is installed, else a process pool")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="workers of a LocalCluster or process pool (default: the CPUs)")
    p.add_argument("--out", default=".", metavar="DIR",
                   help="directory of the stream file and the tables (default: the current "
                        "directory, as scaling and validate); an existing stream file there is resumed")
    p.add_argument("--no-plot", action="store_true", help="no Pareto plot")
    add_progress_options(p)
    p.set_defaults(func=_cmd_explore)
