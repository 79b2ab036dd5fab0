"""What :func:`ipukern.tune` returns: each configuration it considered (:class:`TuneCandidate`)
and the search's answer (:class:`TuneResult`). Its own module so that :mod:`.tune` stays the
search."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .._format import Rest, fmt_num, format_table
from .config import TrainingConfig
from .training import TrainingEstimate

__all__ = ["TuneCandidate", "TuneResult"]

@dataclass(frozen=True)
class TuneCandidate:
    """One configuration :func:`tune` considered.

    Attributes
    ----------
    config : TrainingConfig
        The configuration (for a pruned family: at the micro-batch the bound was taken at).
    samples_per_second : float or None
        The estimate's throughput (None when it does not fit or was not estimated).
    fits : bool or None
        Every stage fits (None: not estimated, pruned or beyond a bound).
    why : str
        ``"best"``, or why it lost: ``"slower: 0.93x of best"``, ``"does not fit: stage 0
        688.5 kB > 639.0 kB per tile"``, ``"pruned: ..."``, ``"global batch ... above
        max_global_batch ..."``.
    upper_bound : float or None
        The bound on its throughput the search used, when it used one.
    """

    config: TrainingConfig
    samples_per_second: float | None
    fits: bool | None
    why: str
    upper_bound: float | None = None

    def label(self) -> str:
        """The configuration in one short line."""
        c = self.config
        rc = {False: "none", None: "none", True: "stage", "auto": "auto"}.get(c.recompute, None) \
            if not isinstance(c.recompute, tuple) else f"{len(c.recompute)} checkpoints"
        amp = c.available_memory_proportion
        return (f"{c.replicas} x {c.ipus_per_replica} IPU, mb {c.micro_batch} x acc "
                f"{c.gradient_accumulation}, recompute {rc}, amp {0.6 if amp is None else amp:g}")

    def to_dict(self) -> dict:
        c = self.config
        return {"replicas": c.replicas, "ipus_per_replica": c.ipus_per_replica, "micro_batch": c.micro_batch,
                "gradient_accumulation": c.gradient_accumulation,
                "global_batch": c.replicas * c.micro_batch * c.gradient_accumulation,
                "recompute": list(c.recompute) if isinstance(c.recompute, tuple) else c.recompute,
                "available_memory_proportion": c.available_memory_proportion,
                "pipeline": c.pipeline if not isinstance(c.pipeline, tuple) else list(c.pipeline),
                "samples_per_second": self.samples_per_second, "fits": self.fits, "why": self.why,
                "upper_bound": self.upper_bound}


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` returns.

    Attributes
    ----------
    best : TrainingEstimate
        The winner's estimate (``best.info["fits"]`` is True).
    best_config : TrainingConfig
        The winner's configuration: ``estimate_training(net, system, best_config)`` gives ``best``.
    candidates : tuple of TuneCandidate
        The winner first, then the fitting runners-up fastest first, then those that do not
        fit, then those pruned or beyond a bound; each with ``why`` it lost.
    system : str
    max_global_batch : int
    evaluations : int
        Estimates made (each a full :func:`~ipukern.estimate_training`, most of them warm).
    """

    best: TrainingEstimate
    best_config: TrainingConfig
    candidates: tuple[TuneCandidate, ...]
    system: str
    max_global_batch: int
    evaluations: int

    @property
    def samples_per_second(self) -> float:
        return self.best.samples_per_second

    def summary(self, max_rows: int = 12) -> str:
        """The winner and up to ``max_rows`` runners-up with why each lost."""
        b = self.best
        lines = [f"best of {len(self.candidates)} configurations ({self.evaluations} estimates) on "
                 f"{self.system}, global batch <= {self.max_global_batch:,}:",
                 f"  {self.candidates[0].label()}: {b.samples_per_second:,.0f} samples/s, "
                 f"step {b.step_seconds * 1e3:.2f} ms, global batch {b.global_batch:,}"]
        if b.info.get("recompute_checkpoints"):
            lines.append("  checkpoints " + ",".join(b.info["recompute_checkpoints"]))
        if b.ipus_per_replica > 1:
            lines.append("  stages start at " + ", ".join(s[0] for s in b.stages))
        rest = self.candidates[1:]
        if rest:
            lines.append("runners-up:")
            lines += format_table(["configuration", "samples/s", "why not"],
                                  [[c.label(), fmt_num(c.samples_per_second), Rest(c.why)]
                                   for c in rest[:max_rows]], align="lrl", indent="  ").split("\n")[1:]
            if len(rest) > max_rows:
                lines.append(f"  ... and {len(rest) - max_rows} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        b = self.best
        return {"system": self.system, "max_global_batch": self.max_global_batch,
                "evaluations": self.evaluations,
                "best": {**self.candidates[0].to_dict(), "step_seconds": b.step_seconds,
                         "stages": b.stages, "bottleneck": b.bottleneck,
                         "recompute_checkpoints": b.info.get("recompute_checkpoints", [])},
                "candidates": [c.to_dict() for c in self.candidates]}


def _short_reason(msg: str) -> str:
    """A StageMemoryError message in a few words: "stage 1 874.8 kB > 639.0 kB per tile"."""
    m = re.search(r"stage (\d+) .*?needs ([\d,]+) B > budget ([\d,]+) B( on tile)?", msg)
    if m:
        need, have = (int(x.replace(",", "")) / 1e3 for x in m.group(2, 3))
        unit = "per tile" if m.group(4) else "per IPU"
        return f"does not fit: stage {m.group(1)} {need:,.1f} kB > {have:,.1f} kB {unit}"
    return "does not fit: " + msg.split(";")[0]
