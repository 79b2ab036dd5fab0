"""Views of a :class:`~ipukern.nn.NetworkProfile` for other tools: a pandas table, a
Chrome/Perfetto trace (one row per pass, one span per layer) and network-vs-network diffs.

They work on the profile's ``to_dict()`` form as well, so a ``--json`` file read back can be
traced or compared without re-planning the network.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .._version import schema
from ..core import TraceEvents, delta, diff_keyed, format_delta_sections

__all__ = ["network_to_pandas", "network_trace", "diff_networks", "format_network_diff", "PASS_NAMES"]

#: a layer row's ``pass`` -> the trace row it is drawn on
PASS_NAMES = {"fwd": "forward", "bwd": "backward", "wu": "weight update", "update": "optimizer update"}

#: the per-layer fields a diff compares
_LAYER_FIELDS = ("cycles", "exchange", "rearrange", "memory")


def _as_dict(profile: Any) -> dict[str, Any]:
    return profile if isinstance(profile, dict) else profile.to_dict()


def network_to_pandas(profile: Any) -> Any:
    """One row per layer pass (name, op, pass, method, cycles, share, exchange, rearrange,
    memory, ...) in program order. Needs pandas (``pip install pandas``)."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("NetworkProfile.to_pandas needs pandas: pip install pandas") from e
    rows = [{k: (tuple(v) if isinstance(v, list) else v) for k, v in r.items()}
            for r in _as_dict(profile)["layers"]]
    df = pd.DataFrame(rows)
    df.index.name = "step"
    return df


def network_trace(profile: Any, path: str | Path | None = None) -> dict[str, Any]:
    """The network program as trace-event JSON (opens in ui.perfetto.dev): one row per pass
    (forward, backward, weight update, optimizer update) with one span per layer pass in
    program order, its inserted rearrangement nested at its start, and a counter of the
    busiest tile's live bytes. Written to ``path`` when given."""
    d = _as_dict(profile)
    clock = float(d.get("clock_hz") or 0) or None
    if clock is None:
        raise ValueError("network trace: the profile has no clock_hz (written before schema 1?)")
    us = 1e6 / clock
    tr = TraceEvents()
    kind = "training step" if d["training"] else "inference"
    tr.process(1, f"{d['label'] or 'network'} on {d['machine']}: batch {d['batch']}, {kind}")
    passes = list(dict.fromkeys(r["pass"] for r in d["layers"]))
    tid = {p: k + 1 for k, p in enumerate(passes)}
    for p in passes:
        tr.thread(1, tid[p], PASS_NAMES.get(p, p))
    t = 0
    peaks = d.get("step_peak_bytes") or []
    for k, r in enumerate(d["layers"]):
        cycles = int(r["cycles"])
        tr.span(1, tid[r["pass"]], r["name"], r["op"], t * us, cycles * us, op=r["op"],
                **{"pass": r["pass"]}, method=r["method"], out_shape=r["out_shape"], cycles=cycles,
                exchange_cycles=r["exchange"], rearrange_cycles=r["rearrange"],
                peak_tile_bytes=r["memory"])
        if r["rearrange"]:
            tr.span(1, tid[r["pass"]], "rearrange", "exchange", t * us, int(r["rearrange"]) * us,
                    cycles=int(r["rearrange"]))
        if k < len(peaks):
            tr.counter(1, "busiest tile live bytes", t * us, bytes=int(peaks[k]))
        t += cycles
    tr.counter(1, "busiest tile live bytes", t * us, bytes=0)
    return tr.document(path, kind="network", machine=d["machine"], label=d["label"],
                       batch=d["batch"], clock_hz=clock, total_cycles=d["total_cycles"])


def diff_networks(a: Any, b: Any) -> dict[str, Any]:
    """Compare network profile ``b`` with ``a``: totals, time per category, per layer pass
    (matched by layer name and pass) and the busiest tile's peak bytes; every entry holds
    ``a``, ``b``, ``delta`` and ``ratio`` (see :func:`ipukern.core.views.delta`)."""
    a, b = _as_dict(a), _as_dict(b)
    totals = {k: delta(a[k], b[k]) for k in ("total_cycles", "seconds", "samples_per_second", "flops")}
    totals["peak_tile_bytes"] = delta(a["memory"]["peak_bytes"], b["memory"]["peak_bytes"])
    cats = list(dict.fromkeys([*a["by_category"], *b["by_category"]]))
    by_cat = {c: delta(a["by_category"].get(c, 0), b["by_category"].get(c, 0)) for c in cats}
    layers = diff_keyed(a["layers"], b["layers"], lambda r: f"{r['name']} [{r['pass']}]", _LAYER_FIELDS)
    return {**schema("diff"), "kind": "network",
            "a": {"label": a["label"], "machine": a["machine"], "batch": a["batch"]},
            "b": {"label": b["label"], "machine": b["machine"], "batch": b["batch"]},
            "totals": totals, "by_category": by_cat, "layers": layers,
            "same_program": all(r["status"] == "same" for r in layers)}


def format_network_diff(diff: dict[str, Any], *, only_changed: bool = False) -> str:
    """Readable text of :func:`diff_networks`."""
    a, b = diff["a"], diff["b"]
    out = [f"a: network {a['label']} on {a['machine']}, batch {a['batch']}",
           f"b: network {b['label']} on {b['machine']}, batch {b['batch']}"]
    if not diff["same_program"]:
        out.append("note: the programs differ (layer passes added or removed)")
    tot = dict(diff["totals"])
    secs = tot.pop("seconds")
    rows = [(r["key"] + ("" if r["status"] == "same" else f" [{r['status']}]"), r["cycles"])
            for r in diff["layers"] if not only_changed or r["cycles"]["delta"] or r["status"] != "same"]
    return "\n".join(out + format_delta_sections([
        (None, [(k.replace("_", " "), e) for k, e in tot.items()], 1.0, False),
        (None, [("time per batch (ms)", secs)], 1e3, False),
        ("per category (cycles)", list(diff["by_category"].items()), 1.0, only_changed),
        ("per layer pass (cycles)", rows, 1.0, False)]))
