"""The validation figure: model vs measured on log-log axes, one panel per machine variant."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plots import figure_classes, save_figure, wrap_title

__all__ = ["plot_validation"]

_MARKERS = ["o", "s", "D", "^", "v", "P", "X", "h"]
_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def plot_validation(result: Any, path: str | Path, *, band: float = 0.25, dpi: int = 130) -> Path:
    """Draw ``result`` (a :class:`~ipukern.validation.ValidationResult`) to ``path``.

    Each modelled point is (measured, model) in its group's unit; the y = x line and the
    +-``band`` region mark agreement. Groups without a modelled point are listed in the
    legend as "not modelled". Raises ImportError (with the install hint) without matplotlib.
    """
    from . import VARIANTS
    Figure, _ = figure_classes()
    variants = list(VARIANTS)
    fig = Figure(figsize=(5.2 * len(variants), 5.0), layout="constrained")
    axes = [fig.add_subplot(1, len(variants), i + 1) for i in range(len(variants))]
    values = [v for r in result.rows for v in [r.measurement.measured, *r.model.values()] if r.model]
    lo = min(values) / 2 if values else 1.0
    hi = max(values) * 2 if values else 10.0
    for ax, var in zip(axes, variants):
        xs = [lo, hi]
        ax.fill_between(xs, [x * (1 - band) for x in xs], [x * (1 + band) for x in xs],
                        color="#dddddd", label=f"±{band:.0%}")
        ax.plot(xs, xs, "k--", lw=1, label="y = x")
        for i, g in enumerate(result.groups):
            pts = [(r.measurement.measured, r.model[var]) for r in result.rows
                   if r.measurement.group == g and var in r.model]
            s = result.summary[g][var]
            if not pts:
                ax.plot([], [], " ", label=f"{g}: not modelled ({s['points']})")
                continue
            unit = next(r.measurement.unit for r in result.rows if r.measurement.group == g)
            hollow = "not hardware" in g
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=22, marker=_MARKERS[i % 8],
                       facecolors="none" if hollow else _COLOURS[i % 8],
                       edgecolors=_COLOURS[i % 8], linewidths=1.0,
                       label=f"{g} [{unit}]: MAPE {s['mape_pct']:.1f}% (n={s['modelled']})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (each group's unit)")
        ax.set_ylabel("ipukern model")
        ax.set_title(wrap_title(f"{var}: {VARIANTS[var]}", 4.6, 8), fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper left")
    fig.suptitle("ipukern vs published IPU measurements", fontsize=11)
    return save_figure(fig, path, dpi)
