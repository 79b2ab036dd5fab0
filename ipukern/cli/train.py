"""``ipukern train`` and ``ipukern compare``: training on IPU systems (and DGX A100).

``ipukern train MODEL --system POD16 --micro-batch 20 --gradient-accumulation 6`` prints the
breakdown of :func:`ipukern.estimate_training` and writes into ``--out DIR`` ``train.csv`` (one row per IPU),
``train.json`` and ``train.png`` (the pipeline schedule, IPU x time). ``--costs FILE.json``
takes per-layer costs (a list of :class:`~ipukern.LayerCost` fields) instead of a model.
``ipukern train MODEL --execute`` runs one real step instead (:mod:`.train_run`; also under
``mpiexec -n K``).
``ipukern compare MODEL --systems POD16,DGX_A100 [--prices POD16=USD]`` prints
throughput, time-to-train, and throughput per US$1,000 and per watt of each system from the
sourced figures of :mod:`ipukern.market` (one footnote per figure; ``--prices`` replaces one).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from .. import market
from .._files import read_input_text
from .._format import fmt_num, format_table
from .._version import schema
from ..core import TraceEvents
from ..systems import (SYSTEM_PRESETS, LayerCost, StageMemoryError, estimate_training, get_system,
                       training_trace)
from . import train_run
from ._common import (Progress, UsageError, add_document_views, add_machine_options, add_optimizer,
                      add_optimizer_state_dtype, add_partials, add_progress_options, out_dir,
                      progress_enabled, write_documents)
from ._models import known_system
from ._models import model as _model
from ._models import pipeline as _pipeline


def _costs(path: str | None) -> list[LayerCost] | None:
    if path is None:
        return None
    try:
        rows = json.loads(read_input_text(path, "--costs"))
        return [LayerCost(**r) for r in rows]
    except (TypeError, json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"--costs {path}: expected a JSON list of LayerCost objects ({e})") from None


def _recompute(args: argparse.Namespace) -> Any:
    """``--recompute`` (stage recomputation) or ``--checkpoints L1,L2`` (checkpoint layers)."""
    if args.checkpoints is None:
        return args.recompute
    if args.recompute:
        raise ValueError("give --recompute (stage recomputation) or --checkpoints, not both")
    names = [s for s in args.checkpoints.split(",") if s]
    if not names:
        raise ValueError("--checkpoints needs comma-separated layer names or 'auto'")
    return "auto" if names == ["auto"] else names


def _system(args: argparse.Namespace, name: str) -> Any:
    """The preset ``name``; with ``--machine`` / ``--machine-file`` its IPUs are that chip
    (tiles, memory, clock), its links and hosts stay the preset's."""
    system = get_system(known_system(name))
    if args.machine is None or args.machine == system.chip:
        return system
    return system.replace(chip=args.machine, name=f"{system.name}-{args.machine.name}")


def _estimate(args: argparse.Namespace, system: str) -> Any:
    net, costs = _model(args.model), _costs(args.costs)
    if net is None and costs is None:
        raise ValueError("give a MODEL or --costs")
    pipeline = _pipeline(args.pipeline)
    if pipeline is None and args.ipus_per_replica > 1:
        pipeline = "auto"
    try:
        return estimate_training(net, _system(args, system), micro_batch=args.micro_batch,
                                 gradient_accumulation=args.gradient_accumulation, replicas=args.replicas,
                                 ipus_per_replica=args.ipus_per_replica, pipeline=pipeline,
                                 dtype=args.dtype, partials=args.partials, recompute=_recompute(args),
                                 optimizer=args.optimizer, optimizer_state=args.optimizer_state,
                                 optimizer_state_dtype=args.optimizer_state_dtype,
                                 replicated_sharding=args.replicated_sharding, costs=costs,
                                 bn_replica_group=args.bn_group, allow_overflow=args.allow_overflow,
                                 available_memory_proportion=args.available_memory_proportion,
                                 io_tiles=args.io_tiles)
    except StageMemoryError as e:
        raise RuntimeError(str(e)) from None


def _cmd_train(args: argparse.Namespace) -> int:
    if args.execute:
        if args.available_memory_proportion is not None or args.checkpoints is not None or args.io_tiles:
            raise ValueError("--available-memory-proportion, --checkpoints and --io-tiles apply to "
                             "estimates, not --execute")
        return train_run.execute(args)
    if args.tiles is not None:
        raise ValueError("--tiles applies to --execute")
    with Progress(f"train {args.model or args.costs} on {args.system}", enabled=progress_enabled(args)):
        est = _estimate(args, args.system)
    print(est.summary())
    if args.epochs is not None:
        t = est.time_to_train(epochs=args.epochs, dataset_size=args.dataset_size)
        print(f"time to train {args.epochs} epochs of {args.dataset_size:,} samples: {t / 60:.1f} min")
    out = out_dir(args)
    files = []
    if out is not None:
        from .. import plots
        files = [(out / "train.csv", lambda p: _breakdown_csv(est, p), False),
                 (out / "train.json", lambda p: p.write_text(est.to_json(indent=1)), False),
                 (out / "train.png", lambda p: plots.pipeline_schedule_png(est, p), True)]
    write_documents(args, lambda: est.to_json(indent=1), est.to_trace, files)
    return 0


def _breakdown_csv(est: Any, path: Path) -> None:
    """One row per IPU; nested fields (bytes by kind) as JSON text."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(est.breakdown[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()}
                    for r in est.breakdown)


def _prices(text: str | None, names: list[str]) -> dict[str, float]:
    """``--prices NAME=USD,...``: positive finite prices of systems that are compared."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item:
            continue
        key, _, val = item.partition("=")
        try:
            usd = float(val)
        except ValueError:
            raise ValueError(f"--prices wants NAME=PRICE pairs, got {item!r}") from None
        if not math.isfinite(usd) or usd <= 0:
            raise ValueError(f"--prices {item!r}: a price is a positive number of US$")
        if key.strip().upper() not in names:
            raise ValueError(f"--prices {item!r}: {key.strip()!r} is not one of --systems {','.join(names)}")
        out[key.strip().upper()] = usd
    return out


def _compare_one(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """One system's row of ``ipukern compare`` (its estimate under "estimate")."""
    from ..gpu import GPU_SYSTEMS, estimate_network_gpu
    if name.replace("-", "_") in GPU_SYSTEMS:
        net = _model(args.model)
        if net is None:
            raise ValueError("GPU systems need a MODEL (not --costs)")
        est = estimate_network_gpu(net, args.gpu_batch, name, dtype=args.dtype, training=True,
                                   optimizer=args.optimizer)
        kind, fits, doc = "gpu", True, dataclasses.asdict(est)
        system: Any = GPU_SYSTEMS[name.replace("-", "_")]
        note = (f"{name}: batch {args.gpu_batch} per GPU as given (--gpu-batch; not tuned)"
                if args.tune else None)
    elif name.replace("-", "_") in SYSTEM_PRESETS and args.tune:
        from .tune import run_tune
        res = run_tune(_TuneArgs(args), name)
        est, system = res.best, _system(args, name)
        kind, fits, doc = "ipu", True, est.to_dict()
        note = f"{name}: best fitting configuration (ipukern tune): {res.candidates[0].label()}"
    elif name.replace("-", "_") in SYSTEM_PRESETS:
        est, system = _estimate(args, name), _system(args, name)
        note = None
        kind, fits, doc = "ipu", bool(est.info.get("fits", True)), est.to_dict()
    else:
        known = sorted(SYSTEM_PRESETS) + sorted(GPU_SYSTEMS)
        raise UsageError(f"unknown system {name!r}; systems are {known}")
    return {"system": name, "kind": kind, "samples_per_second": est.samples_per_second,
            "time_to_train_s": est.time_to_train(epochs=args.epochs, dataset_size=args.dataset_size),
            "fits": fits, "estimate": doc, "_est": est, "_note": note, "_system": system}


class _TuneArgs:
    """``compare --tune``: the compare options as ``ipukern tune`` reads them (what compare
    fixes, e.g. the optimizer, stays fixed; micro-batch and layout are searched)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.__dict__.update(vars(args))
        self.tune_micro_batch = None
        self.tune_ipus_per_replica = None
        self.replicas = None
        self.pipeline = None
        self.progress = False          # compare's own line shows the system being tuned


def _add_market(rows: list[dict[str, Any]], prices: dict[str, float]) -> None:
    """Per-dollar and per-watt columns from ipukern.market (``--prices`` overrides a price)."""
    for r in rows:
        eff = market.efficiency(r["samples_per_second"], r["_system"], price_usd=prices.get(r["system"]))
        r.update(eff.to_dict(), _eff=eff)
        per_k = r["samples_per_second_per_kusd"]
        r["samples_per_second_per_musd"] = None if per_k is None else per_k * 1e3


def _print_compare(rows: list[dict[str, Any]]) -> None:
    """The table, then one footnote per price / power figure it used."""
    footnotes: list[str] = []

    def mark(r: dict[str, Any], what: str) -> str:
        fig = getattr(r["_eff"], what)
        if fig is None:
            return ""
        footnotes.append(f"[{len(footnotes) + 1}] {r['system']} {what}: {fig.footnote()}")
        return f" [{len(footnotes)}]"
    body = [[r["system"], fmt_num(r["samples_per_second"]), fmt_num(r["time_to_train_s"] / 60, 1, " min"),
             fmt_num(r["samples_per_second_per_kusd"], 2) + mark(r, "price"),
             fmt_num(r["samples_per_second_per_watt"], 3) + mark(r, "power"),
             "fits" if r["fits"] else "DOES NOT FIT"] for r in rows]
    print(format_table(["system", "samples/s", "time to train", "samples/s per $1k", "samples/s per W",
                        "memory"], body, align="lrrrrl"))
    if footnotes:
        print("price and power figures (ipukern.market; '-': no public figure):")
        print("\n".join(footnotes))


def _cmd_compare(args: argparse.Namespace) -> int:
    names = [s.strip().upper() for s in args.systems.split(",") if s.strip()]
    from ..gpu import GPU_SYSTEMS
    for name in names:            # every name before minutes of estimates: a usage error (exit 2)
        if name.replace("-", "_") not in GPU_SYSTEMS and name.replace("-", "_") not in SYSTEM_PRESETS:
            raise UsageError(f"unknown system {name!r}; systems are "
                             f"{sorted(SYSTEM_PRESETS) + sorted(GPU_SYSTEMS)}")
    prices = _prices(args.prices, names)
    rows = []
    with Progress("compare", enabled=progress_enabled(args)) as bar:
        for k, name in enumerate(names):
            bar(k, len(names), name)
            rows.append(_compare_one(args, name))
            bar(k + 1, len(names), name)
    _add_market(rows, prices)
    # printed only once every system is estimated: a failing one leaves no partial table
    _print_compare(rows)
    notes = [r["_note"] for r in rows if r["_note"]]
    if notes:
        print("\n".join(notes))
    elif any(r["kind"] == "ipu" for r in rows):
        print("IPU systems at the given configuration (--tune: each at its best fitting one)")
    if not all(r["fits"] for r in rows):
        print("(a system marked DOES NOT FIT was estimated with --allow-overflow: its rate is not "
              "reachable as configured)")
    doc = {**schema("compare"), "epochs": args.epochs, "dataset_size": args.dataset_size,
           "systems": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]}

    def trace(path: Path) -> None:
        events = TraceEvents()
        for pid, r in enumerate((r for r in rows if r["kind"] == "ipu"), start=1):
            training_trace(r["_est"], pid=pid, events=events)
        events.document(path, kind="compare", systems=names)

    def table(path: Path) -> None:
        cols = ["system", "kind", "samples_per_second", "time_to_train_s", "samples_per_second_per_kusd",
                "samples_per_second_per_watt", "price_usd", "power_w", "fits"]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows({**r, "price_usd": r["price"] and r["price"]["value"],
                         "power_w": r["power"] and r["power"]["value"]} for r in rows)
    out = out_dir(args)
    files = [] if out is None else [(out / "compare.csv", table, False),
                                    (out / "compare.json", lambda p: p.write_text(json.dumps(doc, indent=1)),
                                     False)]
    write_documents(args, lambda: json.dumps(doc, indent=1), trace, files)
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="model name from ipukern.nn.models (e.g. resnet50)")
    p.add_argument("--costs", help="JSON list of per-layer LayerCost fields instead of a model")
    p.add_argument("--micro-batch", type=int, default=20,
                   help="samples per replica per micro-batch (default 20)")
    p.add_argument("--gradient-accumulation", type=int, default=1,
                   help="micro-batches per step per replica (default 1)")
    p.add_argument("--replicas", type=int, default=None,
                   help="data-parallel replicas (default: as many as the system holds)")
    p.add_argument("--ipus-per-replica", type=int, default=1,
                   help="1, 2, 4, 8 or 16 IPUs per replica; > 1 pipelines the network (default 1)")
    p.add_argument("--pipeline", default=None, help="'auto' or comma-separated split layers")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"],
                   help="activation and weight dtype (default float16)")
    add_partials(p, "half")
    p.add_argument("--recompute", action="store_true",
                   help="re-run each stage's forward in its backward; stash only the stage input")
    p.add_argument("--checkpoints", default=None, metavar="L1,L2",
                   help="recomputation checkpoint layers, or 'auto' (about sqrt(n) of the n block "
                        "boundaries; e.g. Graphcore's MLPerf ResNet-50: "
                        "layer1.0.relu3,layer1.2.relu3,layer2.0.relu3,layer2.2.relu3,layer3.0.relu3,"
                        "layer3.3.relu3)")
    p.add_argument("--available-memory-proportion", type=float, default=None, metavar="P",
                   help="share of each tile a conv/matmul pass may use for temporaries (PopLibs' "
                        "option; default 0.6; Graphcore's MLPerf ResNet-50 used 0.15)")
    add_optimizer(p)
    p.add_argument("--optimizer-state", default="chip", choices=["chip", "streaming"],
                   help="keep the optimizer state on chip (default) or in Streaming Memory")
    add_optimizer_state_dtype(p)
    p.add_argument("--replicated-sharding", action="store_true",
                   help="shard the optimizer state and update across replicas")
    p.add_argument("--bn-group", type=int, default=1, metavar="N",
                   help="batch norm statistics over groups of N replicas (default 1: per replica; "
                        "Graphcore's MLPerf ResNet-50 used 2)")
    p.add_argument("--allow-overflow", action="store_true",
                   help="report stages that do not fit their IPU's tiles instead of failing")
    p.add_argument("--io-tiles", type=int, default=0, metavar="N",
                   help="tiles set aside for host I/O, overlapping it with compute on the rest "
                        "(default 0: each micro-batch's input is a synchronous host exchange, "
                        "as in Graphcore's MLPerf ResNet-50 runs)")
    p.add_argument("--dataset-size", type=int, default=1_281_167, help="samples per epoch (ImageNet)")
    add_machine_options(p, default=None, what="IPU preset of the system's chips (default: the "
                                                "system's own; its links and hosts stay the preset's)")


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="estimate training on an IPU system (breakdown, CSV/JSON, schedule)",
                       epilog="examples:\n"
                              "  ipukern train resnet50 --system POD16 --micro-batch 20 "
                              "--gradient-accumulation 6 --checkpoints auto "
                              "--available-memory-proportion 0.15\n"
                              "  ipukern train --costs layers.json --system POD16 --micro-batch 20\n"
                              "  ipukern train --costs layers.json --ipus-per-replica 4 --pipeline auto "
                              "--recompute\n"
                              "  mpiexec -n 4 python -m ipukern train resnet8 --system M2000 --micro-batch 2 "
                              "--execute",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(t)
    t.add_argument("--system", default="POD16", help=f"one of {sorted(SYSTEM_PRESETS)}")
    t.add_argument("--epochs", type=float, default=None,
                   help="also report the time to train this many epochs")
    add_document_views(t, out_files="train.csv (one row per IPU), train.json and train.png (the "
                                    "pipeline schedule)")
    add_progress_options(t)
    train_run.register_flags(t)
    t.set_defaults(func=_cmd_train)
    c = sub.add_parser("compare", help="training throughput of IPU systems and DGX A100 side by side",
                       epilog="examples:\n"
                              "  ipukern compare resnet50 --systems POD16,DGX_A100 --checkpoints auto "
                              "--available-memory-proportion 0.15\n"
                              "  ipukern compare --costs layers.json --systems POD16,POD64 --json -\n"
                              "  ipukern compare --costs layers.json --systems POD16,POD64 "
                              "--prices POD16=150000,POD64=600000",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(c)
    c.add_argument("--training", action="store_true",
                   help="compare training throughput (the default and only comparison; accepted "
                        "for older command lines)")
    add_document_views(c, out_files="compare.csv and compare.json")
    c.add_argument("--systems", default="POD16,DGX_A100",
                   help="comma-separated IPU system presets and GPU systems (default POD16,DGX_A100)")
    c.add_argument("--prices", default=None, metavar="NAME=USD,...",
                   help="your own price of a system in US dollars (e.g. POD16=150000) instead of "
                        "the sourced list price (ipukern info --market)")
    c.add_argument("--epochs", type=float, default=1.0,
                   help="epochs for the time-to-train column (default 1)")
    c.add_argument("--gpu-batch", type=int, default=256, help="samples per GPU per step")
    c.add_argument("--tune", action="store_true",
                   help="each IPU system at its best fitting configuration (ipukern tune) instead of "
                        "the given one; GPUs stay at --gpu-batch")
    from .tune import add_tune_options
    add_tune_options(c)
    add_progress_options(c)
    c.set_defaults(func=_cmd_compare)
