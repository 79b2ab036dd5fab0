"""``ipukern validate``: the model next to published measurements of real IPUs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._common import Outputs, Progress, UsageError, add_progress_options, progress_enabled


def _write_files(out_dir: Path, files: list[tuple[str, Any, bool]]) -> list[Path]:
    """``(name, writer(path), is_plot)`` files into ``out_dir`` through :class:`Outputs`:
    staged, then written all together (atomic, devices and links kept), so a failing
    writer leaves nothing half-written; a plot without matplotlib is skipped with a note."""
    with Outputs() as out:
        for name, writer, is_plot in files:
            try:
                writer(out.stage(out_dir / name))
            except ImportError as e:
                if not is_plot:
                    raise
                out.drop(out_dir / name)
                print(f"{name} not written: {e}", file=sys.stderr)
        return out.commit()


def _cmd_validate(args: argparse.Namespace) -> int:
    from .. import validation

    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a directory")
    if sum(map(bool, (args.systems, args.inference, args.gpu))) > 1:
        raise ValueError("--systems, --inference and --gpu are separate tables: give one")
    if args.gpu:
        return _cmd_gpu(args, out_dir)
    if args.systems:
        return _cmd_systems(args, out_dir)
    if args.inference:
        return _cmd_inference(args, out_dir)
    if args.only:
        raise UsageError("--only selects rows of --systems or --inference")
    measurements = validation.load_measurements(args.measurements)
    groups = [g.strip() for g in args.group.split(",") if g.strip()] if args.group else None
    _names_known(groups, {m.group for m in measurements}, "--group", "group")
    with Progress("validate", enabled=progress_enabled(args)) as bar:
        result = validation.run(measurements, groups=groups, progress=bar)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not args.quiet:
        print(result.format_rows())
        print()
    print(result.format_summary())
    files = [("validation.csv", result.to_csv, False), ("validation.json", result.to_json, False)]
    if not args.no_plot:
        from ..validation.plot import plot_validation
        files.append(("validation.png", lambda p: plot_validation(result, p), True))
    written = _write_files(out_dir, files)
    if not args.quiet:
        print("\nMAPE = mean |model - measured| / measured; ratio = geometric mean of model/measured; "
              "r(log) = Pearson correlation of log values.")
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _names_known(names: list[str] | None, known: set[str], flag: str, what: str) -> None:
    """A name that names nothing is a usage error (exit 2), as an unknown model or preset."""
    bad = [n for n in names or () if n not in known]
    if bad:
        raise UsageError(f"{flag}: unknown {what}(s) {bad}; {what}s are {sorted(known)}")


def _published_report(args: argparse.Namespace, out_dir: Path, flag: str, load: Any, report_fn: Any) -> Any:
    """The report of a published table (``--systems``, ``--inference``) on ``--only``'s rows,
    its table printed."""
    if args.group or args.measurements:
        raise ValueError(f"--group and --measurements apply to the measurement table, not {flag}")
    runs = load()
    ids = [i.strip() for i in args.only.split(",") if i.strip()] if args.only else None
    _names_known(ids, {r.id for r in runs}, "--only", "id")
    with Progress(f"validate {flag}", enabled=progress_enabled(args)) as bar:
        report = report_fn(runs, ids=ids, progress=bar)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(report.format_table())
    return report


def _write(report: Any, out_dir: Path, stem: str) -> list[Path]:
    """``<stem>.csv`` and ``<stem>.json`` of a published-table report; the paths written."""
    return _write_files(out_dir, [(f"{stem}.csv", report.to_csv, False),
                                  (f"{stem}.json", report.to_json, False)])


def _cmd_systems(args: argparse.Namespace, out_dir: Path) -> int:
    """``--systems``: published training runs (MLPerf, Graphcore's table) next to the model."""
    from ..validation.systems import load_published, systems_report

    report = _published_report(args, out_dir, "--systems", load_published, systems_report)
    if report.scaling:
        print()
        print(report.format_scaling())
    written = _write(report, out_dir, "systems")
    if not args.quiet:
        s = report.summary()
        print(f"\n{s['modelled']} of {s['rows']} rows modelled; geometric-mean model/published:")
        for kind, k in s["by_kind"].items():
            ds = f" (8 TB/s exchange: {k['geomean_datasheet_ratio']})" if k["geomean_datasheet_ratio"] else ""
            print(f"  {kind}: throughput {k['geomean_throughput_ratio']}{ds}, time-to-train "
                  f"{k['geomean_minutes_ratio']} ({k['modelled']} of {k['rows']} rows)")
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _cmd_gpu(args: argparse.Namespace, out_dir: Path) -> int:
    """``--gpu``: the GPU model next to NeuSight's measured kernels and models and MLPerf."""
    from ..validation.gpu import gpu_report

    if args.group or args.measurements or args.only:
        raise ValueError("--group, --measurements and --only do not apply to --gpu")
    with Progress("validate --gpu", enabled=progress_enabled(args)) as bar:
        report = gpu_report(progress=bar)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(report.format_table())
    written = _write(report, out_dir, "gpu_validation")
    if not args.quiet:
        s = report.summary()
        print("\nheld-out kernels (H100, L4; never fitted), MAPE per op class:")
        for cls, v in s["held_out_kernel_mape"].items():
            print(f"  {cls}: {', '.join(v)}")
        print(f"end to end: {s['e2e_within_15pct']} of {s['e2e_rows']} rows within +-15%; MAPE "
              f"{s['e2e_mape']}% (NeuSight on the same rows: {s['e2e_neusight_mape']}%)")
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _cmd_inference(args: argparse.Namespace, out_dir: Path) -> int:
    """``--inference``: published inference figures (PopRT, ByteMLPerf) next to the model."""
    from ..validation.inference import inference_report, load_inference

    report = _published_report(args, out_dir, "--inference", load_inference, inference_report)
    written = _write(report, out_dir, "inference")
    if not args.quiet:
        s = report.summary()
        print(f"\n{s['modelled']} of {s['rows']} rows modelled; geometric-mean model/published throughput:")
        for key, g in s["geomean_ratio"].items():
            print(f"  {key}: {g}")
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
               "  ipukern validate --out results/ --no-plot\n"
               "  ipukern validate --systems --only mlperf1.0-resnet-pod16\n"
               "  ipukern validate --inference --only poprt-bert-base-sl128-b16\n"
               "  ipukern validate --gpu --out results/",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--out", default=".", metavar="DIR", help="output directory (default .)")
    v.add_argument("--group", metavar="NAMES", default=None,
                   help="comma-separated group names to run (default: all)")
    v.add_argument("--measurements", metavar="CSV", default=None,
                   help="a measurement table with the packaged columns (default: the packaged one)")
    v.add_argument("--no-plot", action="store_true", help="do not draw validation.png")
    v.add_argument("--systems", action="store_true",
                   help="instead: the published training runs (MLPerf v1.0/v1.1 on POD16/POD64 and DGX "
                        "A100, Graphcore's performance table) through estimate_training; writes "
                        "systems.csv and systems.json")
    v.add_argument("--inference", action="store_true",
                   help="instead: the published inference figures (Graphcore's PopRT benchmarks, its "
                        "ByteMLPerf C600 results) through "
                        "estimate_network on each machine they may have run on; writes inference.csv and "
                        "inference.json")
    v.add_argument("--gpu", action="store_true",
                   help="instead: the GPU model against NeuSight's measured GPU kernels (H100/L4 held "
                        "out) and end-to-end transformer steps, with NeuSight's, roofline and Habitat "
                        "predictions beside it, and the MLPerf DGX A100 rows; writes gpu_validation.csv "
                        "and gpu_validation.json")
    v.add_argument("--only", metavar="IDS", default=None,
                   help="with --systems or --inference: comma-separated row ids (default: all rows; the "
                        "full --systems table takes about a minute, --inference about a minute)")
    v.add_argument("-q", "--quiet", action="store_true", help="print only the per-group summary")
    add_progress_options(v)
    v.set_defaults(func=_cmd_validate)
