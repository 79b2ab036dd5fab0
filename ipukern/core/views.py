"""Views of a profile for other tools: a Chrome/Perfetto trace, and profile-vs-profile diffs.

- :func:`to_trace` writes the trace-event JSON format (the one ``chrome://tracing`` and
  ui.perfetto.dev open): one row with every superstep of the slowest tile (compute, sync,
  exchange nested inside the superstep), one row per group of ``TILE_GROUP`` tiles (how long
  the group's slowest tile computes and exchanges, and how many of its tiles compute), and
  counters for the tiles computing and exchanging. Standard library only.
- :func:`diff_profiles` compares two profiles (objects or their ``to_dict()``/JSON form) per
  superstep, per category and per memory category, the way one compares two PopVision
  reports.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._files import read_input_text
from .._format import MISSING, Rest, fmt_num, format_table
from .._version import schema

__all__ = ["to_trace", "diff_profiles", "format_diff", "load_profile_dict", "TILE_GROUP", "TraceEvents",
           "delta", "diff_keyed", "format_delta_sections", "DeltaSection", "profile_kind"]

#: tiles per group in a profile's per-group activity (one row of a GC200's 46 x 32 tile
#: map); the trace draws one row per group. Views work on a profile's ``to_dict()`` form,
#: so this module does not import :mod:`.profile` (which re-exports the constant).
TILE_GROUP = 32

_PID = 1


def _as_dict(profile: Any) -> dict[str, Any]:
    return profile if isinstance(profile, dict) else profile.to_dict()


def to_trace(profile: Any, path: str | Path | None = None) -> dict[str, Any]:
    """The profile as a trace-event JSON object (``{"traceEvents": [...], ...}``).

    Parameters
    ----------
    profile : Profile or dict
        A profile, or its ``to_dict()`` form (e.g. read back from ``--json``).
    path : str or Path, optional
        Where to write the JSON (``"-"`` is not special here; the CLI handles stdout).

    Returns
    -------
    dict
        ``traceEvents`` (complete ``"X"``, counter ``"C"`` and metadata ``"M"`` events,
        timestamps in microseconds of simulated time at the machine's clock),
        ``displayTimeUnit`` and ``otherData`` (machine, label, totals).
    """
    d = _as_dict(profile)
    clock = float(d["clock_hz"])
    n_tiles = int(d["n_tiles"])
    us = lambda cycles: cycles * 1e6 / clock  # noqa: E731 - one conversion, used everywhere
    steps = d["supersteps"]
    n_groups = max((len(s.get("group_compute_cycles") or s.get("group_exchange_cycles") or ())
                    for s in steps), default=0)
    title = f"{d.get('label') or 'program'} on {d['machine']}"
    ev: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": title}},
        {"name": "thread_name", "ph": "M", "pid": _PID, "tid": 0,
         "args": {"name": "supersteps (slowest tile)"}},
        {"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": 0, "args": {"sort_index": 0}},
    ]
    for g in range(n_groups):
        lo, hi = g * TILE_GROUP, min(n_tiles, (g + 1) * TILE_GROUP) - 1
        ev.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": g + 1,
                   "args": {"name": f"tiles {lo}-{hi}"}})
        ev.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": g + 1,
                   "args": {"sort_index": g + 1}})

    def span(name: str, cat: str, tid: int, start: int, cycles: int, **args: Any) -> None:
        ev.append({"name": name, "cat": cat, "ph": "X", "pid": _PID, "tid": tid,
                   "ts": us(start), "dur": us(start + cycles) - us(start),
                   "args": dict(args, cycles=cycles)})

    t = 0
    for s in steps:
        c, y, x = int(s["compute_cycles"]), int(s["sync_cycles"]), int(s["exchange_cycles"])
        total = c + y + x
        span(f"#{s['index']} {s['name']}", s["category"], 0, t, total,
             bytes_exchanged=s["bytes_exchanged"], tiles_computing=s["tiles_computing"],
             user_estimate=s["user_estimate"])
        if c:
            span("compute", "compute", 0, t, c, tile=s["compute_tile"], why=s["compute_why"])
        span("sync", "sync", 0, t + c, y)
        if x:
            span("exchange", "exchange", 0, t + c + y, x, tile=s["exchange_tile"],
                 why=s["exchange_why"], bytes=s["bytes_exchanged"])
        ev.append({"name": "tiles", "ph": "C", "pid": _PID, "tid": 0, "ts": us(t),
                   "args": {"computing": s["tiles_computing"],
                            "exchanging": s.get("tiles_exchanging", 0)}})
        gc = s.get("group_compute_cycles") or ()
        gn = s.get("group_tiles_computing") or ()
        gx = s.get("group_exchange_cycles") or ()
        for g in range(n_groups):
            if g < len(gc) and gc[g]:
                span("compute", "compute", g + 1, t, int(gc[g]), step=s["name"],
                     tiles_computing=int(gn[g]) if g < len(gn) else None)
            span("sync", "sync", g + 1, t + c, y)
            if g < len(gx) and gx[g]:
                span("exchange", "exchange", g + 1, t + c + y, int(gx[g]), step=s["name"])
        t += total
    ev.append({"name": "tiles", "ph": "C", "pid": _PID, "tid": 0, "ts": us(t),
               "args": {"computing": 0, "exchanging": 0}})
    trace = {"traceEvents": ev, "displayTimeUnit": "ns",
             "otherData": {"generator": "ipukern", **schema("trace"), "machine": d["machine"],
                           "label": d.get("label", ""), "clock_hz": clock, "n_tiles": n_tiles,
                           "tile_group": TILE_GROUP, "total_cycles": d["total_cycles"]}}
    if path is not None:
        Path(path).write_text(json.dumps(trace))
    return trace


# =========================================================================== diff
def load_profile_dict(path: str | Path) -> dict[str, Any]:
    """A profile JSON (``profile.to_json()`` / ``--json``) read back as a dict.

    Raises
    ------
    ValueError
        The file is not JSON or not a profile (the message names the file).
    """
    try:
        d = json.loads(read_input_text(path, "profile"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(d, dict) or not {"supersteps", "total_cycles", "machine"} <= d.keys():
        raise ValueError(f"{path}: not an ipukern profile (expected the output of --json or "
                         "profile.to_json())")
    return d


def delta(a: float, b: float) -> dict[str, float | None]:
    """One compared value: ``a``, ``b``, ``delta`` (b - a) and ``ratio`` (b / a, None when a is 0)."""
    return {"a": a, "b": b, "delta": b - a, "ratio": (b / a) if a else None}



def diff_profiles(a: Any, b: Any) -> dict[str, Any]:
    """Compare profile ``b`` with profile ``a``: totals, per category, per superstep, memory.

    Supersteps are matched by position; a step whose name differs between the two, or
    that exists in only one, is flagged. Every entry holds ``a``, ``b``, ``delta`` (b - a)
    and ``ratio`` (b / a, None when a is 0).

    Parameters
    ----------
    a, b : Profile or dict
        Profiles or their ``to_dict()`` form.

    Returns
    -------
    dict
        ``totals``, ``by_category``, ``supersteps``, ``memory`` and ``same_program`` (same
        number and names of supersteps).
    """
    a, b = _as_dict(a), _as_dict(b)
    totals = {k: delta(a[k], b[k]) for k in ("total_cycles", "compute_cycles", "sync_cycles",
                                               "exchange_cycles", "bytes_exchanged", "seconds")}
    cats = list(dict.fromkeys([*a["by_category"], *b["by_category"]]))
    zero = {"compute": 0, "sync": 0, "exchange": 0, "total": 0}
    by_cat = {c: {k: delta(a["by_category"].get(c, zero)[k], b["by_category"].get(c, zero)[k])
                  for k in zero} for c in cats}
    sa, sb = a["supersteps"], b["supersteps"]
    steps = []
    for i in range(max(len(sa), len(sb))):
        x = sa[i] if i < len(sa) else None
        y = sb[i] if i < len(sb) else None
        row: dict[str, Any] = {"index": i, "name_a": x and x["name"], "name_b": y and y["name"]}
        for k in ("compute_cycles", "sync_cycles", "exchange_cycles", "total_cycles",
                  "bytes_exchanged"):
            row[k] = delta(x[k] if x else 0, y[k] if y else 0)
        row["status"] = ("only in a" if y is None else "only in b" if x is None
                         else "renamed" if x["name"] != y["name"] else "same step")
        steps.append(row)
    mem: dict[str, Any] = {}
    ma, mb = a.get("memory") or {}, b.get("memory") or {}
    for c in dict.fromkeys([*ma.get("by_category", {}), *mb.get("by_category", {})]):
        mem[c] = delta(ma.get("by_category", {}).get(c, {}).get("max", 0),
                        mb.get("by_category", {}).get(c, {}).get("max", 0))
    if ma or mb:
        mem["total"] = delta(ma.get("max_bytes", 0), mb.get("max_bytes", 0))
    same = len(sa) == len(sb) and all(r["status"] == "same step" for r in steps)
    return {**schema("diff"), "kind": "profile",
            "a": {"label": a.get("label", ""), "machine": a["machine"]},
            "b": {"label": b.get("label", ""), "machine": b["machine"]},
            "totals": totals, "by_category": by_cat, "supersteps": steps, "memory": mem,
            "same_program": same}


def _fmt_ratio(e: dict[str, Any]) -> str:
    if e["ratio"] is None:
        return "new" if e["b"] else MISSING
    return f"{e['ratio']:.3f}x"


def format_diff(diff: dict[str, Any], *, only_changed: bool = False) -> str:
    """Readable text of :func:`diff_profiles`: totals, categories, supersteps, memory."""
    a, b = diff["a"], diff["b"]
    out = [f"a: {a['label']} on {a['machine']}", f"b: {b['label']} on {b['machine']}"]
    if not diff["same_program"]:
        out.append("note: the programs differ (supersteps renamed, added or removed)")
    tot = dict(diff["totals"])
    secs = tot.pop("seconds")
    sections: list[DeltaSection] = [
        ("total", [*tot.items()], 1.0, False), (None, [("seconds (us)", secs)], 1e6, False),
        ("per category (total cycles)", [(c, r["total"]) for c, r in diff["by_category"].items()],
         1.0, only_changed)]
    steps = []
    for r in diff["supersteps"]:
        e = r["total_cycles"]
        if only_changed and not e["delta"] and r["status"] == "same step":
            continue
        name = r["name_a"] if r["status"] in ("same step", "only in a") else r["name_b"]
        if r["status"] == "renamed":
            name = f"{r['name_a']} -> {r['name_b']}"
        flag = "" if r["status"] == "same step" else f" [{r['status']}]"
        steps.append((f"#{r['index']}", e, f"{name}{flag}"))
    sections.append(("per superstep (total cycles)", steps, 1.0, False))
    if diff["memory"]:
        sections.append(("memory, busiest tile per category (bytes)", list(diff["memory"].items()),
                         1.0, only_changed))
    return "\n".join(out + format_delta_sections(sections, what="step"))


# =========================================================================== shared pieces
def profile_kind(d: dict[str, Any]) -> str:
    """"profile" (one program), "network" or "training" for a JSON document read back;
    documents written before the schema field are told apart by their fields."""
    name = str(d.get("schema", ""))
    if name.startswith("ipukern."):
        return name.split(".", 1)[1]
    if {"supersteps", "total_cycles", "machine"} <= d.keys():
        return "profile"
    if "layers" in d and "total_cycles" in d:
        return "network"
    if "breakdown" in d and "step_seconds" in d:
        return "training"
    return "unknown"


def diff_keyed(rows_a: list[dict], rows_b: list[dict], key: Any, fields: tuple[str, ...]
               ) -> list[dict[str, Any]]:
    """Rows of two documents matched by ``key(row)`` (in ``a``'s order, then ``b``'s new
    ones), each field compared with :func:`delta`; ``status`` is "same", "only in a" or
    "only in b"."""
    by_b = {key(r): r for r in rows_b}
    seen = set()
    out = []
    for r in rows_a:
        k = key(r)
        seen.add(k)
        other = by_b.get(k)
        out.append({"key": k, "status": "same" if other is not None else "only in a",
                    **{f: delta(r.get(f, 0) or 0, (other or {}).get(f, 0) or 0) for f in fields}})
    for r in rows_b:
        if key(r) not in seen:
            out.append({"key": key(r), "status": "only in b",
                        **{f: delta(0, r.get(f, 0) or 0) for f in fields}})
    return out


#: one titled block of a delta table: (title or None, rows, scale, only_changed); a row is
#: ``(name, entry)`` or ``(name, entry, note)``, the note free text at the line's end
DeltaSection = tuple[Any, Sequence[tuple], float, bool]


def _delta_cells(e: dict[str, Any], scale: float) -> list[str]:
    a, b, d = (e[k] * scale for k in ("a", "b", "delta"))
    if all(float(v).is_integer() for v in (a, b)):
        return [fmt_num(int(a)), fmt_num(int(b)), f"{int(d):+,}", _fmt_ratio(e)]
    return [fmt_num(a, 3), fmt_num(b, 3), f"{d:+,.3f}", _fmt_ratio(e)]


def format_delta_sections(sections: Sequence[DeltaSection], *, what: str = "") -> list[str]:
    """The lines of one a / b / b - a / b / a table (:func:`ipukern._format.format_table`,
    one set of column widths) whose titled sections follow each other; ``scale`` multiplies
    a section's values (1e3 for seconds shown in ms), integers print with digit groups and
    a sign on the difference. ``what`` heads the column of the rows' notes."""
    headers = ["", "a", "b", "b - a", "b / a"] + ([what] if what else [])
    rows: list[list[Any]] = []
    titles: dict[int, str] = {}
    for title, entries, scale, only_changed in sections:
        if title is not None:
            titles[len(rows)] = title
        for name, e, *note in entries:
            if only_changed and not e["delta"]:
                continue
            rows.append([name, *_delta_cells(e, scale), *(Rest(n) for n in note)])
    lines = format_table(headers, rows, align="lrrrr" + "l" * bool(what), indent="  ").split("\n")
    out = [lines[0]]
    for i, line in enumerate(lines[1:]):
        if i in titles:
            out.append(titles[i])
        out.append(line)
    out += [titles[i] for i in titles if i >= len(rows)]      # a title whose rows all dropped
    return out


class TraceEvents:
    """A Chrome / Perfetto trace-event document built up event by event (timestamps in
    microseconds of simulated time): the format :func:`to_trace` writes, for the traces of
    networks and training steps."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def process(self, pid: int, name: str) -> None:
        self.events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"name": name}})
        self.events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid}})

    def thread(self, pid: int, tid: int, name: str) -> None:
        self.events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                            "args": {"name": name}})
        self.events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                            "args": {"sort_index": tid}})

    def span(self, pid: int, tid: int, name: str, cat: str, ts_us: float, dur_us: float,
             **args: Any) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                            "ts": ts_us, "dur": dur_us, "args": args})

    def counter(self, pid: int, name: str, ts_us: float, **values: float) -> None:
        self.events.append({"name": name, "ph": "C", "pid": pid, "tid": 0, "ts": ts_us,
                            "args": values})

    def document(self, path: str | Path | None = None, **other: Any) -> dict[str, Any]:
        """``{"traceEvents": ..., "otherData": {generator, **other}}``; written to ``path``."""
        trace = {"traceEvents": self.events, "displayTimeUnit": "ns",
                 "otherData": {"generator": "ipukern", **schema("trace"), **other}}
        if path is not None:
            Path(path).write_text(json.dumps(trace))
        return trace
