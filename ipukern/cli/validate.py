"""``ipukern validate``: the model next to published measurements of real IPUs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import Progress, progress_enabled


def _cmd_validate(args: argparse.Namespace) -> int:
    from .. import validation

    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a directory")
    measurements = validation.load_measurements(args.measurements)
    groups = [g.strip() for g in args.group.split(",") if g.strip()] if args.group else None
    with Progress("validate", enabled=progress_enabled(args)) as bar:
        result = validation.run(measurements, groups=groups, progress=bar)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not args.quiet:
        print(result.format_rows())
        print()
    print(result.format_summary())
    written = [result.to_csv(out_dir / "validation.csv")]
    result.to_json(out_dir / "validation.json")
    written.append(out_dir / "validation.json")
    if not args.no_plot:
        from ..validation.plot import plot_validation
        try:
            written.append(plot_validation(result, out_dir / "validation.png"))
        except ImportError as e:
            print(f"validation.png not written: {e}", file=sys.stderr)
    if not args.quiet:
        print("\nMAPE = mean |model - measured| / measured; ratio = geometric mean of model/measured; "
              "r(log) = Pearson correlation of log values.")
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser(
        "validate", help="compare the model with published measurements of real IPUs",
        description="Run every published IPU measurement in the packaged table (each with its "
                    "source, hardware, clock and configuration) through the model, on the "
                    "default and the datasheet exchange rate. Prints the model/measured ratio "
                    "per point and MAPE / correlation per group; writes validation.csv, "
                    "validation.json and validation.png into --out.",
        epilog="examples:\n"
               "  ipukern validate                      # every group, writes into .\n"
               "  ipukern validate --out results/ --no-plot",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--out", default=".", metavar="DIR", help="output directory (default .)")
    v.add_argument("--group", metavar="NAMES", default=None,
                   help="comma-separated group names to run (default: all)")
    v.add_argument("--measurements", metavar="CSV", default=None,
                   help="a measurement table with the packaged columns (default: the packaged one)")
    v.add_argument("--no-plot", action="store_true", help="do not draw validation.png")
    v.add_argument("-q", "--quiet", action="store_true", help="print only the per-group summary")
    prog = v.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="show a progress line on stderr even when it is not a terminal")
    prog.add_argument("--no-progress", dest="progress", action="store_false",
                      help="never show a progress line")
    v.set_defaults(func=_cmd_validate)
