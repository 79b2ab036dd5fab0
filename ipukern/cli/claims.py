"""``ipukern claims``: Graphcore's public claims next to the model's numbers and verdicts."""
from __future__ import annotations

import argparse
from pathlib import Path

from ._common import Outputs, Progress, UsageError, add_progress_options, progress_enabled


def _cmd_claims(args: argparse.Namespace) -> int:
    from ..validation.claims import claims_report

    ids = [i.strip() for i in args.ids.split(",") if i.strip()] if args.ids else None
    if args.ids is not None and not ids:
        raise ValueError(f"--ids wants comma-separated claim ids (e.g. 1a,2,10b), got {args.ids!r}")
    if ids:                         # an id that names nothing: a usage error (exit 2), before the run
        from ..validation.claims import load_claims
        known = {c.id for c in load_claims()}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise UsageError(f"--ids: unknown id(s) {unknown}; ids are {sorted(known)}")
    for flag in ("csv", "json", "markdown"):       # refuse a bad target before minutes of work
        target = getattr(args, flag)
        if target and target != "-":
            path = Path(target)
            if path.is_dir() or not path.absolute().parent.is_dir():
                raise OSError(f"--{flag} {target}: " + ("is a directory" if path.is_dir()
                                                         else f"no directory {path.absolute().parent}"))
    with Progress("claims", enabled=progress_enabled(args)) as bar:
        report = claims_report(ids=ids, fast=args.fast, progress=bar)
    with Outputs() as out:          # all files or none
        if args.csv:
            report.to_csv(out.stage(args.csv))
        if args.json and args.json != "-":
            out.stage(args.json).write_text(report.to_json())
        if args.markdown:
            out.stage(args.markdown).write_text(report.to_markdown() + "\n")
        written = out.commit()
    print(report.format_table())
    if args.details:
        print()
        print(report.format_details())
    if args.json == "-":
        args.json_stream.write(report.to_json() + "\n")
        args.json_stream.flush()
    for path in written:
        print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "claims", help="Graphcore's public claims next to the model (one verdict per claim)",
        description="Run each of Graphcore's public performance claims (Mk2 launch, July 2020; MK2 "
                    "benchmarks, December 2020; MLPerf Training v1.0, June 2021) through the model: "
                    "the configuration of both sides and the basis chosen, the model's number on the "
                    "default (47.5 TB/s) and the datasheet (8 TB/s) exchange, model / claim and a "
                    "verdict: reproduced (within +-25%%), direction right, size off, contradicted, or not "
                    "modelled with what is missing. The full report takes about two to three minutes.",
        epilog="examples:\n"
               "  ipukern claims --ids 11e,12a,14a --details  # rows from the presets, in full\n"
               "  ipukern claims --ids 1a,2,4a --json -       # the MLPerf rows, the JSON on stdout\n"
               "  ipukern claims --fast --markdown claims.md --csv claims.csv\n"
               "(ipukern claims alone runs every claim: two to three minutes)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--ids", metavar="IDS", default=None,
                   help="comma-separated claim ids (1a, 2, 10b, ...; default: every claim)")
    c.add_argument("--fast", action="store_true",
                   help="one candidate per search and no datasheet-exchange runs (about half the time; "
                        "every row still gets its model number or reason)")
    c.add_argument("--details", action="store_true",
                   help="after the table, every row in full: source, both sides' configurations, basis")
    c.add_argument("--csv", metavar="FILE", help="write one line per claim as CSV")
    c.add_argument("--json", metavar="FILE",
                   help="write the report as JSON ('-': to stdout, the table then goes to stderr)")
    c.add_argument("--markdown", metavar="FILE", help="write the report as a Markdown table")
    add_progress_options(c)
    c.set_defaults(func=_cmd_claims)
