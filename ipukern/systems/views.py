"""Views of a :class:`~ipukern.TrainingEstimate` for other tools: its JSON form, the step's
schedule (what each IPU does when), a Chrome/Perfetto trace of it, a pandas table and
training-vs-training diffs.

The schedule is the grouped pipeline schedule the estimate composes: each pipeline cycle a
stage runs one micro-batch's forward and backward (and its batch-norm all-reduces), then
waits for the slowest stage, the links and the cross-IPU sync; fill and drain are the cycles
before a stage's first and after its last micro-batch; the gradient all-reduce, the optimizer
(and Streaming Memory traffic) follow, then the host I/O the pipeline did not hide.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .._version import schema
from ..core import TraceEvents, delta, diff_keyed, format_delta_sections

__all__ = ["training_to_dict", "training_schedule", "training_trace", "training_to_pandas",
           "diff_trainings", "format_training_diff"]

#: the per-IPU fields of a breakdown row a diff compares (seconds)
_IPU_FIELDS = ("compute_s", "bn_all_reduce_s", "fill_drain_s", "idle_s", "links_s", "sync_s",
               "all_reduce_s", "optimizer_s", "streaming_s", "host_io_s")


def training_to_dict(est: Any) -> dict[str, Any]:
    """The estimate as a JSON-serialisable dictionary (what ``ipukern train --json`` writes)."""
    return {**schema("training"), "system": est.system, "replicas": est.replicas,
            "ipus_per_replica": est.ipus_per_replica, "micro_batch": est.micro_batch,
            "gradient_accumulation": est.gradient_accumulation, "global_batch": est.global_batch,
            "stages": est.stages, "step_seconds": est.step_seconds,
            "samples_per_second": est.samples_per_second, "bottleneck": est.bottleneck,
            "info": est.info, "breakdown": est.breakdown}


def _as_dict(est: Any) -> dict[str, Any]:
    return est if isinstance(est, dict) else training_to_dict(est)


def training_schedule(est: Any, *, replica: int | None = 0) -> list[dict[str, Any]]:
    """What each IPU does during one step, in seconds from the step's start.

    Parameters
    ----------
    est : TrainingEstimate or its dict form
    replica : int or None
        Only this replica's IPUs (default 0: replicas run the same schedule); None: all.

    Returns
    -------
    list of dict
        ``ipu``, ``replica``, ``stage``, ``phase`` ("compute", "bn all-reduce", "wait",
        "all-reduce", "optimizer", "streaming memory", "host sync", "host I/O"), ``micro_batch`` (None
        outside the pipeline), ``start_s`` and ``seconds``.
    """
    d = _as_dict(est)
    m, ipr = d["gradient_accumulation"], d["ipus_per_replica"]
    cycle = d["info"]["pipeline_cycle_s"]
    end = (m + ipr - 1) * cycle
    host = d["info"].get("parts_s", {}).get("host I/O", 0.0)
    hsync = d["info"].get("parts_s", {}).get("host sync", 0.0)
    out: list[dict[str, Any]] = []
    for r in d["breakdown"]:
        if replica is not None and r["replica"] != replica:
            continue
        s = r["stage"]

        def add(phase: str, start: float, seconds: float, mb: int | None = None, r: dict = r) -> None:
            if seconds > 0:
                out.append({"ipu": r["ipu"], "replica": r["replica"], "stage": r["stage"],
                            "phase": phase, "micro_batch": mb, "start_s": start, "seconds": seconds})
        busy, bn = r["compute_s"] / m, r.get("bn_all_reduce_s", 0.0) / m
        for k in range(m):
            t = (s + k) * cycle
            add("compute", t, busy, k)
            add("bn all-reduce", t + busy, bn, k)
            add("wait", t + busy + bn, cycle - busy - bn, k)
        t = end
        for phase, key in (("all-reduce", "all_reduce_s"), ("optimizer", "optimizer_s"),
                           ("streaming memory", "streaming_s")):
            add(phase, t, r[key])
            t += r[key]
        add("host sync", d["step_seconds"] - host - hsync, hsync)
        add("host I/O", d["step_seconds"] - host, host)
    return out


#: schedule phase -> trace category (Perfetto colours spans by name; the category groups them)
_CATEGORY = {"compute": "compute", "bn all-reduce": "exchange", "wait": "sync", "all-reduce": "exchange",
             "optimizer": "compute", "streaming memory": "exchange", "host sync": "sync",
             "host I/O": "exchange"}


def training_trace(est: Any, path: str | Path | None = None, *, pid: int = 1,
                   events: TraceEvents | None = None) -> dict[str, Any]:
    """The training step as trace-event JSON (opens in ui.perfetto.dev): one row per IPU of
    replica 0 (its pipeline stage), one span per micro-batch's forward + backward, the wait
    for the slowest stage / links / sync, then the gradient all-reduce and the optimizer.
    ``events`` and ``pid`` add it to a trace shared with other steps (``ipukern compare``)."""
    d = _as_dict(est)
    tr = events if events is not None else TraceEvents()
    tr.process(pid, f"{d['system']}: {d['replicas']} replicas x {d['ipus_per_replica']} IPU(s), "
                    f"global batch {d['global_batch']} (replica 0 shown)")
    layers = {r["ipu"]: r["layers"] for r in d["breakdown"]}
    rows = training_schedule(d)
    for ipu in dict.fromkeys(r["ipu"] for r in rows):
        tr.thread(pid, ipu + 1, f"IPU {ipu}: {layers[ipu]}")
    for r in rows:
        name = r["phase"] if r["micro_batch"] is None else f"{r['phase']} mb {r['micro_batch']}"
        tr.span(pid, r["ipu"] + 1, name, _CATEGORY[r["phase"]], r["start_s"] * 1e6, r["seconds"] * 1e6,
                stage=r["stage"], seconds=r["seconds"])
    return tr.document(path, kind="training", system=d["system"], step_seconds=d["step_seconds"],
                       samples_per_second=d["samples_per_second"])


def training_to_pandas(est: Any) -> Any:
    """One row per IPU (the estimate's breakdown), indexed by IPU. Needs pandas."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("TrainingEstimate.to_pandas needs pandas: pip install pandas") from e
    rows = [{k: v for k, v in r.items() if not isinstance(v, dict)} for r in _as_dict(est)["breakdown"]]
    return pd.DataFrame(rows).set_index("ipu")


def diff_trainings(a: Any, b: Any) -> dict[str, Any]:
    """Compare training estimate ``b`` with ``a``: step time, throughput, the step's parts
    (``info["parts_s"]``) and every IPU's breakdown (matched by IPU number)."""
    a, b = _as_dict(a), _as_dict(b)
    totals = {k: delta(a[k], b[k]) for k in ("step_seconds", "samples_per_second", "global_batch")}
    pa, pb = a["info"].get("parts_s", {}), b["info"].get("parts_s", {})
    parts = {k: delta(pa.get(k, 0.0), pb.get(k, 0.0)) for k in dict.fromkeys([*pa, *pb])}
    ipus = diff_keyed(a["breakdown"], b["breakdown"], lambda r: r["ipu"], _IPU_FIELDS)
    return {**schema("diff"), "kind": "training",
            "a": {"system": a["system"], "bottleneck": a["bottleneck"]},
            "b": {"system": b["system"], "bottleneck": b["bottleneck"]},
            "totals": totals, "parts": parts, "ipus": ipus,
            "same_layout": all(r["status"] == "same" for r in ipus)}


def format_training_diff(diff: dict[str, Any], *, only_changed: bool = False) -> str:
    """Readable text of :func:`diff_trainings` (seconds shown in ms)."""
    a, b = diff["a"], diff["b"]
    out = [f"a: training on {a['system']}, bound by {a['bottleneck']}",
           f"b: training on {b['system']}, bound by {b['bottleneck']}"]
    if not diff["same_layout"]:
        out.append("note: the systems have different IPUs (replicas or stages added or removed)")
    t = diff["totals"]
    ipus = [(f"IPU {r['key']} {f[:-2].replace('_', ' ')}"
             + ("" if r["status"] == "same" else f" [{r['status']}]"), r[f])
            for r in diff["ipus"] for f in _IPU_FIELDS]
    return "\n".join(out + format_delta_sections([
        (None, [("step (ms)", t["step_seconds"])], 1e3, False),
        (None, [("samples/s", t["samples_per_second"]), ("global batch", t["global_batch"])], 1.0, False),
        ("parts of the step (ms)", list(diff["parts"].items()), 1e3, only_changed),
        ("per IPU (ms, the fields that changed)", ipus, 1e3, True)]))
