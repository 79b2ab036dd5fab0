"""Pareto fronts of a sweep (throughput against a cost such as total SRAM or exchange rate)
and their plots.

A point is on a network's front when no other point of that network has a cost at most
its own and a throughput at least its own, one of them strictly. Only points that ran and
fit count. Plots need matplotlib (``pip install "ipukern[plot]"``); it is imported only when
one is drawn.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["pareto_front", "plot_pareto", "DEFAULT_COSTS"]

#: the costs plotted by default, where they vary in the sweep
DEFAULT_COSTS = ("total_sram_bytes", "exchange_bandwidth", "clock_hz", "n_tiles", "peak_flops_fp16",
                 "n_ipus", "link_bytes_per_second_total")
_UNITS = {"total_sram_bytes": "B", "exchange_bandwidth": "B/s", "clock_hz": "Hz", "peak_flops_fp16": "FLOP/s",
          "link_bytes_per_second_total": "B/s"}


def _ok(rows: list[dict], cost: str, measure: str) -> list[dict]:
    return [r for r in rows if r.get("status") == "ok" and isinstance(r.get(cost), (int, float))
            and isinstance(r.get(measure), (int, float))]


def pareto_front(rows: list[dict], cost: str, measure: str = "samples_per_second",
                 network: str | None = None) -> list[dict]:
    """The rows on the front of ``measure`` (higher is better) against ``cost`` (lower is
    better), cheapest first; of one ``network`` when given."""
    pts = _ok(rows, cost, measure)
    if network is not None:
        pts = [r for r in pts if r["network"] == network]
    # cheapest first, the best of equal costs first: a row is on the front when it beats
    # every cheaper-or-equal row seen before it
    pts.sort(key=lambda r: (r[cost], -r[measure]))
    front: list[dict] = []
    for r in pts:
        if not front or r[measure] > front[-1][measure]:
            front.append(r)
    return front


def varied_costs(rows: list[dict], costs: tuple[str, ...] = DEFAULT_COSTS) -> list[str]:
    """The costs of ``costs`` that take more than one value among the rows that ran."""
    ok = [r for r in rows if r.get("status") == "ok"]
    return [c for c in costs if len({r.get(c) for r in ok if r.get(c) is not None}) > 1]


def plot_pareto(rows: list[dict], path: str | Path, costs: list[str] | None = None,
                measure: str = "samples_per_second") -> Path:
    """One panel per cost: every network's points and its front (log axes); saved to ``path``.

    Raises
    ------
    ImportError
        Without matplotlib.
    ValueError
        No cost varies (nothing to plot), or a cost is not a column of the rows.
    """
    try:
        from matplotlib.figure import Figure     # no pyplot: the caller's backend is left alone
    except ImportError:
        raise ImportError('Pareto plots need matplotlib: pip install "ipukern[plot]"') from None
    costs = varied_costs(rows) if costs is None else list(costs)
    if not costs:
        raise ValueError("plot_pareto: no cost varies among the points that ran; nothing to plot")
    for c in costs:
        if not any(c in r for r in rows):
            raise ValueError(f"plot_pareto: cost {c!r} is not a column of the results")
    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig = Figure(figsize=(4.6 * len(costs), 3.8), layout="constrained")
    axes = fig.subplots(1, len(costs), squeeze=False)
    for ax, cost in zip(axes[0], costs):
        for i, net in enumerate(networks):
            pts = [r for r in _ok(rows, cost, measure) if r["network"] == net]
            colour = f"C{i % 10}"
            ax.scatter([r[cost] for r in pts], [r[measure] for r in pts], s=12, alpha=0.45, color=colour)
            front = pareto_front(pts, cost, measure)
            ax.plot([r[cost] for r in front], [r[measure] for r in front], "-o", ms=3, color=colour,
                    label=net)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"{cost} ({_UNITS[cost]})" if cost in _UNITS else cost)
        ax.set_ylabel(measure.replace("_", " "))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("throughput vs cost: points and Pareto fronts per network")
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path
