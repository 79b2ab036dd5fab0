"""``ipukern tune MODEL --system POD16``: the best fitting training configuration
(:func:`ipukern.tune`): the winner and the runners-up with why each lost; ``--json PATH``
writes the result (``-``: to stdout, the report then goes to stderr), ``--trace`` the winning
step's Perfetto trace, ``--out DIR`` tune.json. ``--chip GC2`` tunes the
system with that chip; ``--compare-chips GC2,GC200`` tunes it with each and prints the ratio
(:func:`ipukern.compare_chips`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .._version import schema
from ..core import TraceEvents
from ..systems import SYSTEM_PRESETS, training_trace
from ..systems.tune import (DEFAULT_MAX_GLOBAL_BATCH, PUBLISHED_MK1, ChipComparison, on_chip,
                            published_mk1, tune)
from ._models import known_system
from ._models import model as _model
from ._models import pipeline as _pipeline
from ._common import (Progress, add_document_views, add_optimizer, add_optimizer_state_dtype, add_partials,
                      add_progress_options, machine_file, one_machine, out_dir, progress_enabled,
                      write_documents)


def run_tune(args: argparse.Namespace, system: str, net=None):
    """:func:`ipukern.tune` with the command's options (shared with ``compare --tune``)."""
    net = net if net is not None else _model(args.model)
    if net is None:
        raise ValueError("tune needs a MODEL")
    amp = getattr(args, "available_memory_proportion", None)
    checkpoints = getattr(args, "checkpoints", None)
    recompute = None
    if checkpoints is not None:
        names = [s for s in checkpoints.split(",") if s]
        recompute = "auto" if names == ["auto"] else names
    elif getattr(args, "recompute", False):
        recompute = True
    label = system if isinstance(system, str) else system.name
    with Progress(f"tune {args.model} on {label}", enabled=progress_enabled(args)) as prog:
        return tune(net, system, max_global_batch=args.max_global_batch,
                    micro_batch=args.tune_micro_batch, replicas=args.replicas,
                    ipus_per_replica=args.tune_ipus_per_replica,
                    pipeline=_pipeline(args.pipeline) if args.pipeline not in (None, "auto") else None,
                    recompute=recompute, available_memory_proportion=amp,
                    pipelines=True if args.pipelines else None, progress=prog,
                    optimizer=args.optimizer, optimizer_state_dtype=args.optimizer_state_dtype,
                    dtype=args.dtype, partials=args.partials, bn_replica_group=args.bn_group,
                    sample_bytes=getattr(args, "sample_bytes", None))


def _chips(text: str) -> tuple[str, str]:
    """``--compare-chips A,B``: two chip names."""
    chips = [c.strip() for c in text.split(",") if c.strip()]
    if len(chips) != 2:
        raise ValueError(f"--compare-chips takes two chips, e.g. GC2,GC200; got {text!r}")
    return chips[0], chips[1]


def _published_rows(args: argparse.Namespace, net, systems, results) -> None:
    """Graphcore's public Mk1 configuration beside the winner, on each Mk1 system compared."""
    if args.model not in PUBLISHED_MK1:
        return
    for system, res in zip(systems, results):
        if system.chip.generation != "Mk1":
            continue
        # the published layout, batch, split, recomputation and proportion with this run's
        # other options, so that the row and the winner differ only in what tune searches
        row = published_mk1(args.model, system, net, sample_bytes=getattr(args, "sample_bytes", None),
                            bn_replica_group=args.bn_group, optimizer=args.optimizer,
                            optimizer_state_dtype=args.optimizer_state_dtype)
        fits = "fits" if row.fits else row.why.split("; ", 1)[-1] + ", memory ignored"
        print(f"published Mk1 configuration on {system.name} (this run's other options): {row.label()}: "
              f"{row.samples_per_second:,.0f} samples/s ({fits}); the best found is "
              f"{res.samples_per_second / row.samples_per_second:.2f}x it")


def _cmd_tune(args: argparse.Namespace) -> int:
    known_system(args.system)
    if args.compare_chips:
        if args.chip:
            raise ValueError("give --chip (or --machine-file) or --compare-chips, not both")
        net = _model(args.model)
        a, b = (run_tune(args, on_chip(args.system, c), net) for c in _chips(args.compare_chips))
        res = ChipComparison(a, b, b.samples_per_second / a.samples_per_second)
        print(res.summary(max_rows=args.top))
        _published_rows(args, net, (on_chip(args.system, c) for c in _chips(args.compare_chips)), (a, b))
    else:
        res = run_tune(args, on_chip(args.system, args.chip) if args.chip else args.system)
        print(res.summary(max_rows=args.top))
    _write(args, res)
    return 0


def _write(args: argparse.Namespace, res: Any) -> None:
    """``--json`` (with a schema), ``--trace`` (the winning step; both winners with
    ``--compare-chips``, one process each) and ``--out DIR`` (tune.json)."""
    kind = "tune.compare_chips" if isinstance(res, ChipComparison) else "tune"
    doc = lambda: json.dumps({**schema(kind), **res.to_dict()}, indent=1, default=str)  # noqa: E731
    best = [res.a.best, res.b.best] if isinstance(res, ChipComparison) else [res.best]

    def trace(path: Path) -> None:
        events = TraceEvents()
        for pid, est in enumerate(best, start=1):
            training_trace(est, pid=pid, events=events)
        events.document(path, kind=kind, systems=[est.system for est in best])
    out = out_dir(args)
    files = [] if out is None else [(out / "tune.json", lambda p: p.write_text(doc()), False)]
    write_documents(args, doc, trace, files)


def add_tune_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-global-batch", type=int, default=DEFAULT_MAX_GLOBAL_BATCH, metavar="N",
                   help=f"bound on replicas x micro-batch x accumulation "
                        f"(default {DEFAULT_MAX_GLOBAL_BATCH}: "
                        "above every published ResNet-50 configuration)")
    p.add_argument("--pipelines", action="store_true",
                   help="also search pipelined layouts when a single-IPU replica fits")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="the fastest training configuration that fits an IPU system",
                       epilog="examples:\n"
                              "  ipukern tune resnet50 --system POD16\n"
                              "  ipukern tune resnet50 --system POD16 --bn-group 2 --sample-bytes 150528  "
                              "# the MLPerf v1.0 options\n"
                              "  ipukern tune resnet8 --system M2000 --json -\n"
                              "  ipukern tune resnet8 --system M2000 --compare-chips GC2,GC200 "
                              "--max-global-batch 64  # Mk1 vs Mk2, each at its best",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model name from ipukern.nn.models (e.g. resnet50)")
    p.add_argument("--system", default="POD16", help=f"one of {sorted(SYSTEM_PRESETS)}")
    add_tune_options(p)
    chip = p.add_mutually_exclusive_group()
    chip.add_argument("--chip", default=None, metavar="CHIP", type=one_machine,
                      help="the system with this chip in every IPU (GC2, GC200, BOW; default the system's)")
    chip.add_argument("--machine-file", dest="chip", type=machine_file, metavar="FILE.toml",
                      help="the system with this chip, described in a TOML file, in every IPU (as "
                           "train's and compare's --machine-file; see ipukern.machine)")
    p.add_argument("--compare-chips", default=None, metavar="A,B",
                   help="tune the system with chip A and with chip B; print both and B's speed-up over A")
    p.add_argument("--micro-batch", dest="tune_micro_batch", type=int, default=None,
                   help="fix the micro-batch (default: searched)")
    p.add_argument("--replicas", type=int, default=None, help="fix the replicas (default: searched)")
    p.add_argument("--ipus-per-replica", dest="tune_ipus_per_replica", type=int, default=None,
                   help="fix the IPUs per replica (default: searched)")
    p.add_argument("--pipeline", default=None, help="a fixed split: comma-separated split layers")
    p.add_argument("--recompute", action="store_true", help="fix stage recomputation")
    p.add_argument("--checkpoints", default=None, metavar="L1,L2", help="fix checkpoint layers, or 'auto'")
    p.add_argument("--available-memory-proportion", type=float, default=None, metavar="P",
                   help="fix the proportion (default: 0.6, 0.3 and 0.15 are tried)")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"],
                   help="activation and weight dtype (default float16)")
    add_partials(p, "half")
    add_optimizer(p)
    add_optimizer_state_dtype(p)
    p.add_argument("--bn-group", type=int, default=1, metavar="N",
                   help="batch norm statistics over groups of N replicas (default 1)")
    p.add_argument("--sample-bytes", type=int, default=None, metavar="B",
                   help="bytes per sample over the host link (default: the network input in --dtype; "
                        "the MLPerf ResNet-50 runs fed 8-bit images, 150528)")
    p.add_argument("--top", type=int, default=12, help="runners-up printed (default 12)")
    add_document_views(p, out_files="tune.json (the result)")
    add_progress_options(p)
    p.set_defaults(func=_cmd_tune)
