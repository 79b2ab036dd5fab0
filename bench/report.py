"""Turn a saved pytest-benchmark run into tables of times and ratios.

Usage::

    python -m pytest bench --benchmark-json=run.json      # or --benchmark-autosave
    python bench/report.py run.json                       # one table per benchmark group
    python bench/report.py                                # newest .benchmarks/**/*.json
    python bench/report.py run.json --group planner --extra simulated_cycles,method

Each table has one row per benchmark: min and median host time, rounds, then every
``extra_info`` field whose name starts with ``ratio`` (the same-run comparisons the
benchmarks record, e.g. ``ratio_vs_baseline``), plus any ``--extra`` fields. A group's
``baseline`` description, when the benchmarks give one, is printed under its table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence


def find_latest(root: str | Path = ".benchmarks") -> Path | None:
    """Newest pytest-benchmark autosave JSON under ``root`` (None if there is none)."""
    files = sorted(Path(root).glob("**/*.json"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def load(path: str | Path) -> list[dict[str, Any]]:
    """The ``benchmarks`` list of a pytest-benchmark JSON file."""
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or "benchmarks" not in doc:
        raise ValueError(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks' key)")
    return doc["benchmarks"]


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def report(benchmarks: Sequence[dict[str, Any]], *, group: str | None = None,
           extra: Sequence[str] = ()) -> str:
    """Text tables, one per benchmark group (in order of first appearance)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for b in benchmarks:
        g = b.get("group") or "(no group)"
        if group is None or g == group:
            groups.setdefault(g, []).append(b)
    if not groups:
        return f"no benchmarks{'' if group is None else f' in group {group!r}'}"
    out = []
    for g, items in groups.items():
        ratio_keys: list[str] = []
        for b in items:
            for k in (b.get("extra_info") or {}):
                if k.startswith("ratio") and k not in ratio_keys:
                    ratio_keys.append(k)
        keys = ratio_keys + [k for k in extra if k not in ratio_keys]
        header = ["benchmark", "min", "median", "rounds"] + keys
        rows = []
        for b in items:
            st = b.get("stats") or {}
            info = b.get("extra_info") or {}
            rows.append([b.get("name", "?"), fmt_time(st.get("min")), fmt_time(st.get("median")),
                         str(st.get("rounds", "-"))] + [fmt_value(info.get(k)) for k in keys])
        out.append(f"group {g}: {len(items)} benchmark{'s' if len(items) != 1 else ''}")
        out.append(_table(header, rows, right=set(range(1, len(header)))))
        baselines = list(dict.fromkeys(str((b.get("extra_info") or {}).get("baseline"))
                                       for b in items
                                       if (b.get("extra_info") or {}).get("baseline")))
        for text in baselines:
            out.append(f"  baseline: {text}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="pytest-benchmark JSON files "
                                            "(default: newest .benchmarks/**/*.json)")
    p.add_argument("--group", help="only this benchmark group")
    p.add_argument("--extra", default="", help="comma-separated extra_info fields to show too")
    args = p.parse_args(argv)
    files = [Path(f) for f in args.files]
    if not files:
        latest = find_latest()
        if latest is None:
            print("no JSON given and no .benchmarks/**/*.json found; run e.g. "
                  "python -m pytest bench --benchmark-autosave", file=sys.stderr)
            return 1
        files = [latest]
    extra = [k.strip() for k in args.extra.split(",") if k.strip()]
    for f in files:
        try:
            benchmarks = load(f)
        except (OSError, ValueError) as e:
            print(f"report.py: {e}", file=sys.stderr)
            return 1
        if len(files) > 1:
            print(f"== {f}")
        print(report(benchmarks, group=args.group, extra=extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
