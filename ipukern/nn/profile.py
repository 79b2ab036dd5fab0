"""NetworkProfile: what a network costs on the simulated chip, layer by layer, and its memory."""
from __future__ import annotations

import csv
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _progress
from .._format import Rest, fmt_bytes, fmt_num, format_table
from .._version import schema
from ..core import SuperstepRecord
from .views import network_to_pandas, network_trace

__all__ = ["CATEGORY", "NetworkProfile"]

#: layer op -> time category of the per-layer plot
CATEGORY = {"conv2d": "conv", "conv2d+bn": "conv", "matmul": "matmul", "linear": "matmul",
            "activation": "elementwise", "add": "elementwise", "batchnorm": "elementwise",
            "scale_channels": "elementwise", "softplus": "elementwise", "select": "elementwise",
            "maxpool": "pool", "avgpool": "pool",
            "global_avgpool": "pool", "softmax": "norm", "layernorm": "norm",
            "embedding": "gather", "softmax_cross_entropy": "loss", "permute": "rearrange",
            "reshape": "view", "flatten": "view"}


class NetworkProfile:
    """Cost and memory of one network program (forward, or a training step).

    Attributes
    ----------
    batch : int
    machine : MachineSpec
    total_cycles : int
    seconds : float
        Simulated time of one batch at the machine's clock.
    samples_per_second : float
    flops : int
        Useful FLOPs of the batch (convs and matmuls count 2 per MAC; vector ops their
        element operations).
    tflops, utilisation : float
        Achieved TFLOP/s, and its share of the AMP peak for the dtype/partials pair.
    layers : list of dict
        One row per layer pass: name, op, shapes, pass, method, cycles, share, exchange
        (cycles of rearrangements and the op's own exchanges), rearrange (cycles of the
        inserted rearrangements), memory (peak live bytes on the busiest tile during it).
    memory : dict
        peak_bytes (per tile, reserve included), budget_bytes (tile SRAM), reserve_bytes,
        busiest_tile, busiest_step, busiest_layer, weights_bytes (busiest tile's resident
        parameters), fits, tile_bytes_by_kind (training: the busiest tile's bytes at the busiest
        step by kind, :func:`ipukern.nn.training.tile_breakdown`), max_batch (the largest
        batch that fits, searched with the real planner and liveness on first access of
        ``memory``; ``summary()`` and ``to_json()`` show it once computed).
    supersteps : list of SuperstepRecord
    step_peak_bytes : ndarray
        Peak per-tile bytes at each layer step (memory over the program).
    """

    def __init__(self, *, machine, batch: int, dtype: str, partials: str, steps: list[dict],
                 records: list[SuperstepRecord], live: np.ndarray, weights: np.ndarray,
                 flops: int, label: str = "", training: bool = False,
                 max_batch_fn: Callable[[], int] | None = None, info: dict | None = None):
        self.machine = machine
        self.batch, self.dtype, self.partials = batch, dtype, partials
        self.label = label
        self.training = training
        self.supersteps = records
        self.flops = int(flops)
        self.info = dict(info or {})
        self.total_cycles = int(sum(s["cycles"] for s in steps))
        reserve = machine.reserved_bytes_per_tile
        live = live + reserve
        per_step = live.max(axis=1) if live.size else np.zeros(0, np.int64)
        self.step_peak_bytes = per_step
        i = int(np.argmax(per_step)) if per_step.size else 0
        t = int(np.argmax(live[i])) if live.size else 0
        peak = int(per_step[i]) if per_step.size else reserve
        self.layers = []
        tot = max(self.total_cycles, 1)
        for k, s in enumerate(steps):
            row = dict(s)
            row["share"] = s["cycles"] / tot
            row["memory"] = int(per_step[k]) if per_step.size else 0
            self.layers.append(row)
        self._memory = {
            "peak_bytes": peak, "budget_bytes": machine.tile_bytes, "reserve_bytes": reserve,
            "busiest_tile": t, "busiest_step": i,
            "busiest_layer": steps[i]["name"] if steps else "",
            "weights_bytes": int(weights[t]) if weights.size else 0,
            "weights_bytes_max": int(weights.max()) if weights.size else 0,
            "fits": peak <= machine.tile_bytes,
        }
        self._max_batch_fn = max_batch_fn

    # ------------------------------------------------------------------ totals
    @property
    def seconds(self) -> float:
        return self.total_cycles / self.machine.clock_hz

    @property
    def samples_per_second(self) -> float:
        return self.batch / self.seconds if self.seconds > 0 else 0.0

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12 if self.seconds > 0 else 0.0

    @property
    def peak_flops(self) -> float:
        return self.machine.peak_flops(self.dtype, self.partials)

    @property
    def utilisation(self) -> float:
        return self.tflops * 1e12 / self.peak_flops if self.peak_flops > 0 else 0.0

    @property
    def fits(self) -> bool:
        return bool(self._memory["fits"])

    @property
    def memory(self) -> dict[str, Any]:
        if "max_batch" not in self._memory:
            # the search re-plans the network at several batches (seconds to minutes): it
            # says so on stderr (the command's progress line, or its own; see _progress)
            with _progress.task("max batch search"):
                self._memory["max_batch"] = self._max_batch_fn() if self._max_batch_fn else None
        return self._memory

    def by_category(self) -> dict[str, int]:
        """Cycles per layer category (conv, matmul, elementwise, pool, norm, ...) plus the
        inserted rearrangements as their own category."""
        out: dict[str, int] = {}
        for r in self.layers:
            cat = CATEGORY.get(r["op"], r["op"])
            out[cat] = out.get(cat, 0) + r["cycles"] - r["rearrange"]
            if r["rearrange"]:
                out["rearrange"] = out.get("rearrange", 0) + r["rearrange"]
        return out

    # ------------------------------------------------------------------ views
    def summary(self, *, max_rows: int | None = None) -> str:
        m = self.machine
        mem = self._memory
        mb = mem.get("max_batch")
        fit = "fits" if mem["fits"] else "DOES NOT FIT"
        head = [
            (f"network {self.label} on {m.name}: batch {self.batch}, {self.dtype} (partials "
            f"{self.partials}){', training step' if self.training else ', inference'}"),
            (f"  {self.total_cycles:,} cycles = {self.seconds * 1e3:.3f} ms per batch -> "
            f"{self.samples_per_second:,.1f} samples/s"),
            (f"  {self.flops / 1e9:.2f} GFLOP -> {self.tflops:.2f} TFLOP/s, utilisation "
            f"{100 * self.utilisation:.1f}% of {self.peak_flops / 1e12:.1f} TFLOP/s"),
            f"  memory: peak {mem['peak_bytes']:,} B per tile of {mem['budget_bytes']:,} B (incl. "
            f"{mem['reserve_bytes']:,} B reserve; weights {mem['weights_bytes']:,} B) on tile "
            f"{mem['busiest_tile']} at {mem['busiest_layer']!r}: {fit}"
            + (f"; max batch {mb}" if mb is not None else "")
            + ("\n  busiest tile: " + ", ".join(f"{k} {v:,} B" for k, v in sorted(
                mem["tile_bytes_by_kind"].items(), key=lambda kv: -kv[1]) if v)
               if mem.get("tile_bytes_by_kind") else ""),
            *([f"  optimizer {self.info['optimizer']}: state "
               f"{'/'.join(self.info.get('optimizer_state_dtype') or ['none'])} "
               f"({self.info.get('state_location', 'chip')}); weights {self.info.get('weights', self.dtype)}"]
              if self.training and self.info.get("optimizer") else []),
            *([f"  recompute {self.info['recompute']!r}: checkpoints "
               + (", ".join(self.info["recompute_checkpoints"]) or "none")]
              if self.training and self.info.get("recompute") is not None else []),
        ]
        rows = self.layers if max_rows is None else self.layers[:max_rows]
        head += format_table(
            ["layer", "op", "out shape", "pass", "cycles", "share", "exch", "memory", "method"],
            [[r["name"][:40], r["op"], str(r["out_shape"]), r["pass"], fmt_num(r["cycles"]),
              fmt_num(100 * r["share"], 1, "%"), fmt_num(r["exchange"]), fmt_bytes(r["memory"]),
              Rest(r["method"])] for r in rows], align="llllrrrrl", indent="  ").split("\n")
        if max_rows is not None and len(self.layers) > max_rows:
            head.append(f"  ... {len(self.layers) - max_rows} more layers")
        cats = ", ".join(f"{k} {100 * v / max(self.total_cycles, 1):.1f}%"
                         for k, v in sorted(self.by_category().items(), key=lambda kv: -kv[1]))
        head.append(f"  time by category: {cats}")
        return "\n".join(head)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dictionary (totals, per-layer rows, memory); ``max_batch`` only
        once computed (reading ``memory`` searches it)."""
        return {**schema("network"), "label": self.label, "machine": self.machine.name,
                "clock_hz": self.machine.clock_hz, "n_tiles": self.machine.n_tiles, "batch": self.batch,
                "dtype": self.dtype, "partials": self.partials, "training": self.training,
                "total_cycles": self.total_cycles, "seconds": self.seconds,
                "samples_per_second": self.samples_per_second, "flops": self.flops,
                "tflops": self.tflops, "utilisation": self.utilisation, "fits": self.fits,
                "memory": dict(self._memory), "by_category": self.by_category(),
                "info": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.info.items()},
                "layers": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}
                           for r in self.layers],
                "step_peak_bytes": [int(v) for v in self.step_peak_bytes]}

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_pandas(self) -> Any:
        """One row per layer pass, in program order (:func:`ipukern.nn.views.network_to_pandas`).
        Needs pandas."""
        return network_to_pandas(self)

    def to_trace(self, path: Any = None) -> dict[str, Any]:
        """Chrome / Perfetto trace-event JSON: one row per pass, one span per layer (opens in
        ui.perfetto.dev); see :func:`ipukern.nn.views.network_trace`. Writes ``path`` when given."""
        return network_trace(self, path)

    def to_csv(self, path) -> None:
        """One row per layer pass."""
        cols = ["name", "op", "in_shapes", "out_shape", "pass", "method", "cycles", "share",
                "exchange", "rearrange", "memory"]
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            for r in self.layers:
                w.writerow([r[c] if not isinstance(r[c], float) else f"{r[c]:.6f}" for c in cols])
