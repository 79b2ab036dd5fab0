"""Figures: the scaling plot, a per-tile memory heat map and a superstep timeline.

matplotlib is an optional extra (``pip install "ipukern[plot]"``) and is imported only when
a plot is drawn. Figures are built on matplotlib's Agg canvas directly (``Figure`` +
``FigureCanvasAgg``), never through ``pyplot``: no window opens, no global backend is
switched, and plotting from a notebook or a thread leaves the user's pyplot state alone.

- :func:`plot_scaling` -- achieved TFLOP/s vs channels per group (log-log), IPU machines and
  GPUs, one row of panels per batch size, plus the IPU/GPU ratio.
- :func:`plot_memory_heatmap` -- total bytes per tile laid out as a grid (GC200: 46 x 32),
  like the tile map of Graphcore's PopVision memory report, with a per-category breakdown.
- :func:`plot_timeline` -- compute / sync / exchange cycles of each BSP superstep as a Gantt
  strip, like PopVision's BSP trace.
- :func:`plot_activity` -- tiles busy / idle per superstep and the compute imbalance.

Every function writes the format its path's suffix names (PNG, PDF or SVG).
"""
from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["plot_scaling", "plot_memory_heatmap", "plot_timeline", "plot_activity", "pipeline_schedule_png",
           "tile_grid_shape", "PLOT_INSTALL_HINT", "have_matplotlib", "plot_network_layers",
           "plot_network_memory", "figure_classes", "save_figure", "wrap_title", "short_name"]

PLOT_INSTALL_HINT = 'plots need matplotlib: pip install "ipukern[plot]" (or pip install matplotlib)'

#: colours for compute / sync / exchange, shared by every view
PHASE_COLOURS = {"compute": "#4C72B0", "sync": "#C44E52", "exchange": "#DD8452"}


def have_matplotlib() -> bool:
    """True when matplotlib can be imported."""
    try:
        figure_classes()
    except ImportError:
        return False
    return True


def figure_classes() -> tuple[Any, Any]:
    """(Figure class, FigureCanvasAgg class), or ImportError with the install hint."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - exercised by monkeypatching in tests
        raise ImportError(PLOT_INSTALL_HINT) from e
    return Figure, FigureCanvasAgg


def wrap_title(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points
    (constrained layout makes room for a tall title, never for a title wider than the
    figure: that one is cut)."""
    import textwrap
    chars = max(20, int(width_in * 72 / (0.56 * fontsize)))   # ~0.56 em per character (DejaVu Sans)
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def short_name(name: str, n: int = 26) -> str:
    """A layer name for a tick label: at most ``n`` characters, the end kept (it says which)."""
    return name if len(name) <= n else "…" + name[-(n - 1):]


def save_figure(fig: Any, path: str | Path, dpi: int) -> Path:
    """Render ``fig`` with the Agg canvas and write it to ``path`` (format from its suffix)."""
    _, Canvas = figure_classes()
    Canvas(fig)
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    return path


# =========================================================================== scaling
_IPU_STYLES = [("-", "o"), ("-.", "D"), (":", "v"), ((0, (5, 1)), "P")]
_GPU_STYLES = [("--", "s"), ((0, (1, 1)), "^"), ((0, (3, 1, 1, 1)), "X")]
#: one marker per layer (colour alone does not survive greyscale printing or colour blindness)
_LAYER_MARKERS = ["o", "s", "D", "^", "v", "P", "X", "h", "<", ">"]
#: Okabe & Ito (2008) colour-blind-safe palette, black last
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
             "#000000"]
#: figure sizes (inches): "page" for screens, "column" / "double" for a two-column paper
#: (IEEE / ACM: 3.5 in and 7.16 in wide)
FIGURE_WIDTHS = {"page": None, "column": 3.5, "double": 7.16}
#: ratio lines when there is more than one (machine, GPU) pair: one style per pair
_PAIR_STYLES = [("-", "o"), ("--", "s"), ("-.", "D"), (":", "^"), ((0, (5, 1)), "v"),
                ((0, (3, 1, 1, 1)), "P"), ((0, (1, 1)), "X"), ((0, (5, 2, 1, 2)), "h")]


def plot_scaling(rows: Sequence[Any], path: str | Path, *, title: str | None = None,
                 dpi: int = 120, size: str = "page") -> Path:
    """Throughput vs channels per group, IPU and GPU, plus the IPU/GPU ratio.

    One row of two panels per batch size: left, achieved TFLOP/s vs channels per group on
    log-log axes (colour and marker = layer, solid = IPU machine, dashed = GPU; the dense
    point of each layer is drawn as a star; thin grey lines mark each device's peak); right,
    IPU TFLOP/s / GPU TFLOP/s for each (machine, GPU) pair with parity (1x) marked. Colours
    are the Okabe-Ito colour-blind-safe palette and every layer also has its own marker, so
    the figure reads in greyscale; the first layer is drawn on top.

    Parameters
    ----------
    rows : sequence of SweepRow (e.g. a :class:`~ipukern.scaling.SweepResult`)
    path : str or Path
        File to write; the suffix picks the format (``.png``, ``.pdf``, ``.svg``).
    size : {"page", "column", "double"}
        ``"page"`` for screens; ``"column"`` (3.5 in wide, panels stacked) and ``"double"``
        (7.16 in) fit a two-column paper at 100% with fonts of 7-8 pt.

    Returns
    -------
    Path

    Raises
    ------
    ImportError
        matplotlib is not installed (the message says how to get it).
    ValueError
        No rows.
    """
    Figure, _ = figure_classes()
    rows = list(rows)
    if not rows:
        raise ValueError("plot_scaling: no rows to plot")
    if size not in FIGURE_WIDTHS:
        raise ValueError(f"size must be one of {', '.join(FIGURE_WIDTHS)}, got {size!r}")
    st = _ScalingStyle.of(rows, size)
    fig, axes = _scaling_grid(Figure, size, len(st.batches), 2 if st.pairs else 1)
    for bi, b in enumerate(st.batches):
        _throughput_panel(axes[bi][0], st, rows, b)
        if st.pairs:
            _ratio_panel(axes[bi][1], st, rows, b)
    _scaling_legends(fig, axes, st)
    if title is None:
        title = _scaling_title(rows, bool(st.ipus))
    if st.small:
        import textwrap
        title = "\n".join(textwrap.wrap(title, 60 if size == "column" else 110))
    fig.suptitle(title, fontsize=st.fs + 1 if st.small else 12)
    return save_figure(fig, path, dpi)


@dataclass(frozen=True)
class _ScalingStyle:
    """What every panel of :func:`plot_scaling` shares: the layers, devices and pairs in the
    rows, and each one's colour, marker, line style, size and drawing order."""

    layers: list
    batches: list
    ipus: list
    gpus: list
    pairs: list
    colours: list
    marker: dict
    zorder: dict
    style: dict
    peaks: dict
    cpg_ticks: list
    small: bool
    fs: int
    msize: dict
    lwidth: dict
    xlabel: str

    @classmethod
    def of(cls, rows: list, size: str) -> "_ScalingStyle":
        layers = list(dict.fromkeys(r.layer for r in rows))
        ipus = list(dict.fromkeys(r.device for r in rows if r.kind == "ipu"))
        gpus = list(dict.fromkeys(r.device for r in rows if r.kind == "gpu"))
        style = {d: _IPU_STYLES[i % len(_IPU_STYLES)] for i, d in enumerate(ipus)}
        style.update({d: _GPU_STYLES[i % len(_GPU_STYLES)] for i, d in enumerate(gpus)})
        peaks: dict = {}
        for r in rows:
            peaks.setdefault(r.device, r.peak_tflops)
        # ticks at powers of two only: the dense points (e.g. 144, 240) would collide with them
        top = max(r.channels_per_group for r in rows)
        small = FIGURE_WIDTHS[size] is not None
        return cls(
            layers=layers, batches=sorted({r.batch for r in rows}), ipus=ipus, gpus=gpus,
            pairs=[(m, g) for m in ipus for g in gpus], colours=_layer_colours(len(layers)),
            marker={lay: _LAYER_MARKERS[i % len(_LAYER_MARKERS)] for i, lay in enumerate(layers)},
            # the first (headline) layer on top, so no other layer hides it
            zorder={lay: 3 + len(layers) - i for i, lay in enumerate(layers)},
            style=style, peaks=peaks,
            cpg_ticks=[2 ** k for k in range(0, max(top, 1).bit_length() + 1) if 2 ** k < 2 * top],
            small=small, fs=7 if small else 9,
            # layers drawn later sit below with larger markers and wider lines, so a layer whose
            # points coincide with another's still shows as a ring / halo around them
            msize={lay: (3.0 if small else 4.0) + 1.1 * i for i, lay in enumerate(layers)},
            lwidth={lay: (1.0 if small else 1.3) + 0.5 * i for i, lay in enumerate(layers)},
            xlabel=("input channels per group (star = dense)" if small
                    else "input channels per group (log scale; star = dense, groups = 1)"))


def _scaling_grid(Figure: Any, size: str, n: int, ncols: int) -> tuple[Any, Any]:
    """The figure and its ``n`` rows of ``ncols`` panels for this size."""
    width = FIGURE_WIDTHS[size]
    if size == "column":                               # one panel per row, legends below
        # 1.75 in a panel: four panels and the legend stay within a page's text block (9 in)
        fig = Figure(figsize=(width, 1.75 * n * ncols + 1.6), layout="constrained")
        flat = fig.subplots(n * ncols, 1, squeeze=False)
        return fig, [[flat[bi * ncols + k][0] for k in range(ncols)] for bi in range(n)]
    if size == "double":
        fig = Figure(figsize=(width, 2.6 * n + 1.2), layout="constrained")
    else:
        fig = Figure(figsize=(6.2 * ncols + 2.6, 4.3 * n + 0.9), layout="constrained")
    return fig, fig.subplots(n, ncols, squeeze=False)


def _series(ax: Any, st: _ScalingStyle, li: int, lay: str, ls: Any, pts: list) -> None:
    """One layer's line on a panel over its grouped points; its dense point a star on its
    own (not joined: the channels per group between the last group size and dense, e.g.
    32-64 of a 144-channel layer, were not run)."""
    line = [p for p in pts if not p[2]] or pts
    xs, ys, _ = zip(*line)
    ax.plot(xs, ys, linestyle=ls, marker=st.marker[lay], ms=st.msize[lay],
            lw=st.lwidth[lay], color=st.colours[li], zorder=st.zorder[lay],
            markeredgecolor="white", markeredgewidth=0.4)
    for x, y, d in pts:
        if d:
            ax.plot([x], [y], marker="*", ms=11, color=st.colours[li],
                    markeredgecolor="black", markeredgewidth=0.5, linestyle="none")


def _cpg_axes(ax: Any, st: _ScalingStyle) -> None:
    """Log-log axes over channels per group."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(st.xlabel)


def _cpg_ticks(ax: Any, st: _ScalingStyle) -> None:
    """Channels-per-group ticks at powers of two, plainly labelled."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(st.cpg_ticks)
    ax.xaxis.set_minor_formatter(NullFormatter())


def _throughput_panel(ax: Any, st: _ScalingStyle, rows: list, b: int) -> None:
    """Achieved TFLOP/s vs channels per group at batch ``b``, every device, with peaks."""
    from matplotlib.ticker import FuncFormatter
    for li, lay in enumerate(st.layers):
        for dev in st.ipus + st.gpus:
            pts = sorted((r.channels_per_group, r.tflops, r.dense) for r in rows
                         if r.layer == lay and r.batch == b and r.device == dev)
            if pts:
                _series(ax, st, li, lay, st.style[dev][0], pts)
    for dev in st.ipus + st.gpus:
        ax.axhline(st.peaks[dev], color="0.6", lw=0.8, linestyle=st.style[dev][0])
        ax.annotate(f"{dev} peak {st.peaks[dev]:.0f}", (0.0, st.peaks[dev]),
                    xycoords=("axes fraction", "data"), xytext=(3, 2),
                    textcoords="offset points", ha="left", va="bottom", fontsize=7,
                    color="0.4")
    _cpg_axes(ax, st)
    ax.set_ylabel("achieved TFLOP/s (log)" if st.small else "achieved throughput (TFLOP/s, log scale)")
    ax.set_title(f"batch {b}: throughput", fontsize=11)
    _cpg_ticks(ax, st)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(axis="x", labelsize=8)


def _ratio_panel(ax: Any, st: _ScalingStyle, rows: list, b: int) -> None:
    """IPU TFLOP/s / GPU TFLOP/s per (machine, GPU) pair at batch ``b``, parity marked."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    pairs = st.pairs
    for li, lay in enumerate(st.layers):
        for pi, (m, g) in enumerate(pairs):
            pts = sorted((r.channels_per_group, r.ratios.get(g), r.dense) for r in rows
                         if r.layer == lay and r.batch == b and r.device == m
                         and r.ratios.get(g) is not None)
            if pts:
                ls = (_PAIR_STYLES[pi % len(_PAIR_STYLES)] if len(pairs) > 1 else st.style[m])[0]
                _series(ax, st, li, lay, ls, pts)
    ax.axhline(1.0, color="black", lw=1.0)
    ax.annotate("parity (1x)", (0.01, 1.0), xycoords=("axes fraction", "data"),
                xytext=(2, 3), textcoords="offset points", fontsize=8)
    _cpg_axes(ax, st)
    ylabel = "IPU / GPU throughput ratio (x, log scale)"
    if len(pairs) == 1:
        ylabel = f"{pairs[0][0]} / {pairs[0][1]} throughput (x, log scale)"
    if st.small:
        ylabel = "IPU / GPU throughput (x, log)"
    ax.set_ylabel(ylabel)
    ax.set_title(f"batch {b}: IPU / GPU ratio (above 1: IPU faster)", fontsize=11)
    _cpg_ticks(ax, st)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(axis="x", labelsize=8)


def _scaling_legends(fig: Any, axes: Any, st: _ScalingStyle) -> None:
    """Legends outside the panels: layers by colour, devices by line style."""
    from matplotlib.lines import Line2D
    fs = st.fs
    layer_handles = [Line2D([], [], color=st.colours[i], lw=2, marker=st.marker[lay], label=lay)
                     for i, lay in enumerate(st.layers)]
    dev_handles = [Line2D([], [], color="0.2", linestyle=st.style[d][0],
                          label=f"{d} ({'IPU' if d in st.ipus else 'GPU'})") for d in st.ipus + st.gpus]
    if len(st.pairs) > 1:
        for pi, (m, g) in enumerate(st.pairs):
            ls, _ = _PAIR_STYLES[pi % len(_PAIR_STYLES)]
            dev_handles.append(Line2D([], [], color="0.5", linestyle=ls, label=f"ratio {m}/{g}"))
    dev_handles.append(Line2D([], [], marker="*", ms=11, color="0.5", markeredgecolor="black",
                              linestyle="none", label="dense (groups = 1)"))
    if st.small:
        for row in axes:
            for ax in row:
                ax.xaxis.label.set_fontsize(fs)
                ax.yaxis.label.set_fontsize(fs)
                ax.title.set_fontsize(fs + 1)
                ax.tick_params(labelsize=fs - 1)
        fig.legend(handles=layer_handles + dev_handles, loc="outside lower center",
                   ncol=2, fontsize=fs - 1, frameon=False)
    else:
        fig.legend(handles=layer_handles, title="layer", loc="outside right upper",
                   fontsize=8, title_fontsize=9)
        fig.legend(handles=dev_handles, title="device", loc="outside right lower", fontsize=8,
                   title_fontsize=9)


def _scaling_title(rows: list, has_ipu: bool) -> str:
    r0 = rows[0]
    curve = next((r.gpu_curve for r in rows if r.gpu_curve), None)
    return (f"Grouped conv2d throughput vs channels per group ({r0.dtype}"
            + (f", IPU partials {r0.partials}" if has_ipu else "")
            # the GPU side is the kernel-level model; only grouped convs read the curve
            + (f"; GPU: kernel model, grouped convs on the {curve} curve" if curve else "") + ")")


def _layer_colours(n: int) -> list:
    return [OKABE_ITO[i % len(OKABE_ITO)] for i in range(n)]


# =========================================================================== memory heat map
def tile_grid_shape(n_tiles: int) -> tuple[int, int]:
    """(rows, columns) for drawing ``n_tiles`` tiles as a grid.

    The columns are the smallest divisor of ``n_tiles`` at or above its square root, so
    the grid is exact and a little wider than tall (GC200 1472 -> 32 x 46, GC2 1216 ->
    32 x 38). When that divisor would make a strip more than twice as wide as tall, the
    grid is ``ceil(sqrt(n))`` columns with the last row partly empty.
    """
    if n_tiles < 1:
        raise ValueError(f"n_tiles must be >= 1, got {n_tiles}")
    root = math.isqrt(n_tiles)
    if root * root < n_tiles:
        root += 1
    for c in range(root, 2 * root + 1):
        if n_tiles % c == 0:
            return n_tiles // c, c
    return -(-n_tiles // root), root


def _memory_report(obj: Any):
    rep = getattr(obj, "memory", obj)
    if rep is None or not hasattr(rep, "per_tile"):
        raise ValueError("plot_memory_heatmap needs a Profile with a memory report "
                         "(profile.memory) or a MemoryReport")
    return rep


def plot_memory_heatmap(profile: Any, path: str | Path, *, title: str | None = None,
                        columns: int | None = None, scale: str = "tile",
                        dpi: int = 120) -> Path:
    """Per-tile memory as a heat map (tiles laid out row-major in a grid), with the
    per-category breakdown of the busiest and the mean tile beside it.

    By default the colour scale spans 0 to the tile's SRAM (GC200: 624 KiB), as PopVision's
    tile map does, so a chip whose busiest tile is 11% full looks 11% full; ``scale="data"``
    spans the least to the most used tile, which magnifies imbalance. The title states the
    busiest tile's share of the SRAM. Tiles over their SRAM are crossed out.

    Parameters
    ----------
    profile : Profile or MemoryReport
    path : str or Path
        File to write; the suffix picks the format (``.png``, ``.pdf``, ``.svg``).
    columns : int, optional
        Tiles per grid row; default from :func:`tile_grid_shape`.
    scale : {"tile", "data"}
        Colour range: 0..tile SRAM (default), or the data's min..max.

    Raises
    ------
    ImportError
        matplotlib is not installed.
    ValueError
        The profile has no memory report.
    """
    Figure, _ = figure_classes()
    rep = _memory_report(profile)
    per_tile = np.asarray(rep.per_tile, dtype=np.float64)
    n = per_tile.size
    if columns is None:
        n_rows, n_cols = tile_grid_shape(n)
    else:
        n_cols = int(columns)
        n_rows = -(-n // n_cols)
    grid = np.full(n_rows * n_cols, np.nan)
    grid[:n] = per_tile / 1024
    grid = np.ma.masked_invalid(grid.reshape(n_rows, n_cols))
    tile_kib = rep.tile_bytes / 1024
    if scale == "tile":
        vmin, vmax = 0.0, max(tile_kib, float(per_tile.max()) / 1024)
    elif scale == "data":
        vmin, vmax = float(per_tile.min()) / 1024, float(per_tile.max()) / 1024
        if vmax - vmin < 1e-3:
            vmin, vmax = vmin - 0.5, vmax + 0.5
    else:
        raise ValueError(f"scale must be 'data' or 'tile', got {scale!r}")

    fig = Figure(figsize=(12, 5.4), layout="constrained")
    gs = fig.add_gridspec(1, 2, width_ratios=[2.3, 1])
    ax = fig.add_subplot(gs[0])
    im = ax.imshow(grid, cmap="viridis", vmin=vmin, vmax=vmax,
                   interpolation="nearest", aspect="equal", origin="upper")
    over = rep.overflow_tiles
    if len(over):
        ax.plot(over % n_cols, over // n_cols, "x", color="red", ms=4, label="over SRAM")
        ax.legend(loc="upper right", fontsize=8)
    cb = fig.colorbar(im, ax=ax, shrink=0.85)
    span = "0 .. tile SRAM" if scale == "tile" else "min .. max tile"
    cb.set_label(f"bytes per tile (KiB; colour scale {span}, SRAM = {tile_kib:.0f} KiB)")
    ax.set_xlabel(f"tile id % {n_cols}")
    ax.set_ylabel(f"tile id // {n_cols}")
    label = getattr(profile, "label", "") or ""
    if title is None:
        title = (f"Per-tile memory{': ' + label if label else ''} on {rep.machine}\n"
                 f"max {rep.max_bytes / 1024:.1f} KiB (tile {rep.busiest_tile}, "
                 f"{100 * rep.max_bytes / rep.tile_bytes:.0f}% of {tile_kib:.0f} KiB SRAM), "
                 f"mean {rep.mean_bytes / 1024:.1f} KiB, min {rep.min_bytes / 1024:.1f} KiB")
    ax.set_title(wrap_title(title, 7.5, 10), fontsize=10)

    # per-category breakdown: busiest tile and mean tile
    bx = fig.add_subplot(gs[1])
    cats = list(rep.by_category)
    busiest = rep.busiest_tile
    max_vals = [float(rep.by_category[c][busiest]) / 1024 for c in cats]
    mean_vals = [float(np.mean(rep.by_category[c])) / 1024 for c in cats]
    y = np.arange(len(cats))
    bx.barh(y - 0.2, max_vals, height=0.4, color="#4C72B0", label=f"busiest tile ({busiest})")
    bx.barh(y + 0.2, mean_vals, height=0.4, color="#55A868", label="mean over tiles")
    bx.set_yticks(y, cats)
    bx.invert_yaxis()
    bx.set_xlabel("KiB per tile")
    bx.set_title("by category", fontsize=10)
    bx.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1)
    bx.grid(True, axis="x", alpha=0.3)
    return save_figure(fig, path, dpi)


# =========================================================================== timeline
def plot_timeline(profile: Any, path: str | Path, *, title: str | None = None,
                  max_supersteps: int = 60, dpi: int = 120) -> Path:
    """Superstep timeline: one Gantt row per BSP superstep, compute then sync then
    exchange, on a common cycle axis (microseconds on the top axis).

    Each row is labelled with the superstep's index, name and category, and annotated with
    its total cycles; the legend gives each phase's share of the program. Programs longer
    than ``max_supersteps`` show the first ones and say how many were left out.

    Raises
    ------
    ImportError
        matplotlib is not installed.
    ValueError
        The profile has no supersteps.
    """
    Figure, _ = figure_classes()
    steps = list(profile.supersteps)
    if not steps:
        raise ValueError("plot_timeline: the profile has no supersteps")
    total = profile.total_cycles
    shown = steps[:max_supersteps]
    clock = profile.machine.clock_hz

    fig = Figure(figsize=(11, 2.2 + 0.42 * len(shown)), layout="constrained")
    ax = fig.add_subplot()
    t = 0
    for i, s in enumerate(shown):
        for phase, cyc in (("compute", s.compute_cycles), ("sync", s.sync_cycles),
                           ("exchange", s.exchange_cycles)):
            if cyc:
                ax.barh(i, cyc, left=t, height=0.6, color=PHASE_COLOURS[phase],
                        edgecolor="none")
                t += cyc
        ax.annotate(f"{s.total_cycles:,}", (t, i), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    labels = [f"#{s.index} {short_name(s.name, 48)} [{s.category}]" for s in shown]
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(total, 1) * 1.12)
    ax.set_xlabel("simulated time (tile clock cycles)")
    ax.grid(True, axis="x", alpha=0.3)
    sec = ax.secondary_xaxis("top", functions=(lambda c: c / clock * 1e6,
                                               lambda us: us * clock / 1e6))
    sec.set_xlabel(f"microseconds at {clock / 1e9:.4g} GHz")
    from matplotlib.patches import Patch
    parts = {"compute": profile.compute_cycles, "sync": profile.sync_cycles,
             "exchange": profile.exchange_cycles}
    handles = [Patch(color=PHASE_COLOURS[k],
                     label=f"{k} {v:,} cycles ({100 * v / total if total else 0:.1f}%)")
               for k, v in parts.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    if title is None:
        label = getattr(profile, "label", "") or ""
        head = f"Superstep timeline{': ' + label if label else ''} on {profile.machine.name}"
        title = (f"{head}\n{total:,} cycles = {profile.seconds * 1e6:.2f} us"
                 + (f", {profile.tflops:.1f} TFLOP/s" if getattr(profile, "flops", 0) else ""))
        if len(steps) > len(shown):
            title += f" (first {len(shown)} of {len(steps)} supersteps shown)"
    ax.set_title(wrap_title(title, 8.5, 10), fontsize=10)
    return save_figure(fig, path, dpi)


def pipeline_schedule_png(est: Any, path: str | Path, *, dpi: int = 120) -> Path:
    """The pipeline schedule of a :class:`~ipukern.TrainingEstimate` (replica 0), IPU x time:
    each pipeline cycle a stage is busy with one micro-batch's forward and backward (it idles
    for the rest of the cycle, the slowest stage's time), links + syncs close the cycle;
    fill and drain show as the empty cycles at the ends; then all-reduce and optimizer."""
    from matplotlib.patches import Patch
    Figure, Canvas = figure_classes()
    s_count, m = est.ipus_per_replica, est.gradient_accumulation
    cycle = est.info["pipeline_cycle_s"]
    rows = [r for r in est.breakdown if r["replica"] == 0]
    # at least 2.6 in tall: one stage drew 10 x 1.5 in (1200 x 180 px), its x label cut
    fig = Figure(figsize=(10, 2.6 + 0.45 * s_count), layout="constrained")
    Canvas(fig)
    ax = fig.add_subplot(1, 1, 1)
    end = (m + s_count - 1) * cycle
    for r in rows:
        s = r["stage"]
        busy = r["compute_s"] / m
        for t in range(s, s + m):
            ax.broken_barh([(t * cycle * 1e3, busy * 1e3)], (s - 0.4, 0.8), color=PHASE_COLOURS["compute"])
            ax.broken_barh([((t * cycle + busy) * 1e3, (cycle - busy) * 1e3)], (s - 0.4, 0.8),
                           color=PHASE_COLOURS["exchange"], alpha=0.35)
        upd = r["all_reduce_s"] + r["optimizer_s"] + r["streaming_s"]
        ax.broken_barh([(end * 1e3, upd * 1e3)], (s - 0.4, 0.8), color=PHASE_COLOURS["sync"])
    ax.set_yticks(range(s_count))
    ax.set_yticklabels([f"IPU {r['ipu']}: {short_name(str(r['layers']), 40)}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    handles = [Patch(color=PHASE_COLOURS["compute"], label="compute (one micro-batch, fwd + bwd)"),
               Patch(color=PHASE_COLOURS["exchange"], alpha=0.35, label="links, syncs, idle"),
               Patch(color=PHASE_COLOURS["sync"], label="all-reduce + optimizer")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    ax.set_title(wrap_title(f"{est.system}: {s_count}-stage pipeline, {m} micro-batches, "
                            f"{est.replicas} replicas (replica 0 shown)", 9.5, 9), fontsize=9)
    return save_figure(fig, path, dpi)


# =========================================================================== networks
#: at most this many layer names on a network plot's x axis (every k-th beyond it)
MAX_LAYER_TICKS = 160


def _layer_axis(ax: Any, profile: Any) -> None:
    """Layer names (and pass, for training) as the x tick labels of a network plot."""
    rows = profile.layers
    step = max(1, math.ceil(len(rows) / MAX_LAYER_TICKS))
    idx = list(range(0, len(rows), step))
    training = any(r.get("pass") not in (None, "fwd") for r in rows)
    names = [short_name(rows[i]["name"]) + (f" ({rows[i]['pass']})" if training else "") for i in idx]
    ax.set_xticks(idx, names, rotation=90, fontsize=5 if len(idx) > 60 else 6)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("layer (program order" + (f"; every {step}th named)" if step > 1 else ")"))


def _network_figure(profile: Any) -> Any:
    Figure, _ = figure_classes()
    n = min(len(profile.layers), MAX_LAYER_TICKS)
    return Figure(figsize=(max(8.0, 0.085 * n + 3), 5.6), layout="constrained")


def plot_network_layers(profile: Any, path: str | Path, *, title: str | None = None,
                        dpi: int = 120) -> Path:
    """Time per layer of a :class:`~ipukern.nn.NetworkProfile`, one bar per layer pass,
    coloured by category (conv, matmul, elementwise, pool, norm, ...), with the inserted
    rearrangement exchanges stacked on top; the layers are named on the x axis."""
    from matplotlib.patches import Patch

    from .nn.profile import CATEGORY
    rows = profile.layers
    cats = sorted({CATEGORY.get(r["op"], r["op"]) for r in rows})
    colours = dict(zip(cats, _layer_colours(len(cats)), strict=True))
    fig = _network_figure(profile)
    ax = fig.add_subplot(1, 1, 1)
    us = 1e6 / profile.machine.clock_hz
    x = list(range(len(rows)))
    own = [(r["cycles"] - r["rearrange"]) * us for r in rows]
    rea = [r["rearrange"] * us for r in rows]
    ax.bar(x, own, width=0.9, color=[colours[CATEGORY.get(r["op"], r["op"])] for r in rows])
    ax.bar(x, rea, width=0.9, bottom=own, color="0.6", hatch="//", label="rearrange")
    handles = [Patch(color=colours[c], label=c) for c in cats]
    handles.append(Patch(color="0.6", hatch="//", label="rearrange"))
    fig.legend(handles=handles, fontsize=8, loc="outside right upper")
    _layer_axis(ax, profile)
    ax.set_ylabel("time (us)")
    text = title or (f"{profile.label}: time per layer, batch {profile.batch} "
                     f"({profile.seconds * 1e3:.2f} ms total)")
    ax.set_title(wrap_title(text, fig.get_figwidth() - 2, 11), fontsize=11)
    return save_figure(fig, path, dpi)


def plot_network_memory(profile: Any, path: str | Path, *, title: str | None = None,
                        dpi: int = 120) -> Path:
    """Peak per-tile memory at each layer step of a network program, with the tile's
    memory and the reserve as lines; the layers are named on the x axis."""
    fig = _network_figure(profile)
    ax = fig.add_subplot(1, 1, 1)
    mem = profile._memory
    kib = [v / 1024 for v in profile.step_peak_bytes]
    ax.plot(range(len(kib)), kib, "-", lw=1.5, label="peak live bytes per tile (busiest tile)")
    ax.axhline(mem["budget_bytes"] / 1024, color="C3", ls="--", label="tile memory (budget)")
    ax.axhline(mem["reserve_bytes"] / 1024, color="0.5", ls=":", label="reserve (code, stacks)")
    _layer_axis(ax, profile)
    ax.set_ylabel("KiB per tile")
    text = title or f"{profile.label}: memory over the program, batch {profile.batch}"
    ax.set_title(wrap_title(text, fig.get_figwidth() - 0.5, 11), fontsize=11)
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi)


# =========================================================================== tile activity
def plot_activity(profile: Any, path: str | Path, *, title: str | None = None,
                  max_supersteps: int = 60, dpi: int = 120) -> Path:
    """Tiles computing and tiles exchanging in each superstep, and the compute imbalance.

    Bars, side by side: tiles that compute and tiles that send or receive in the exchange,
    out of all tiles (a tile may do both; one doing neither is idle); line
    (right axis): slowest / mean compute cycles over the busy tiles (1 = balanced), the
    timeline's compute time divided by what a perfectly balanced split would take.

    Parameters
    ----------
    profile : Profile
    path : str or Path
        File to write; the suffix picks the format (``.png``, ``.pdf``, ``.svg``).

    Raises
    ------
    ImportError
        matplotlib is not installed.
    ValueError
        The profile has no supersteps.
    """
    Figure, _ = figure_classes()
    steps = list(profile.supersteps)[:max_supersteps]
    if not steps:
        raise ValueError("plot_activity: the profile has no supersteps")
    n_tiles = profile.machine.n_tiles
    x = np.arange(len(steps))
    busy = np.array([s.tiles_computing for s in steps])
    exch = np.array([s.tiles_exchanging for s in steps])
    imb = np.array([s.compute_imbalance if s.compute_cycles else np.nan for s in steps])
    fig = Figure(figsize=(max(7.0, 0.45 * len(steps) + 3), 4.8), layout="constrained")
    ax = fig.add_subplot()
    # exchanging tiles were drawn as idle: they are busy with the exchange
    ax.bar(x - 0.2, busy, width=0.4, color=PHASE_COLOURS["compute"], label="tiles computing")
    ax.bar(x + 0.2, exch, width=0.4, color=PHASE_COLOURS["exchange"], label="tiles exchanging")
    ax.axhline(n_tiles, color="0.6", lw=0.8)
    ax.set_ylim(0, n_tiles * 1.05)
    ax.set_ylabel(f"tiles (of {n_tiles})")
    ax.set_xticks(x, [f"#{s.index} {s.name}" for s in steps], rotation=45, ha="right",
                  fontsize=7)
    bx = ax.twinx()
    bx.plot(x, imb, "D-", color=PHASE_COLOURS["sync"], ms=4, label="imbalance (slowest / mean)")
    bx.axhline(1.0, color="0.5", lw=0.8, ls=":")
    top = np.nanmax(imb) if np.isfinite(imb).any() else 1.0
    bx.set_ylim(0, max(2.0, top * 1.15))
    bx.set_ylabel("compute imbalance\n(slowest / mean busy tile)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = bx.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower right")
    if title is None:
        label = getattr(profile, "label", "") or ""
        title = f"Tile activity per superstep{': ' + label if label else ''} on {profile.machine.name}"
    ax.set_title(wrap_title(title, fig.get_figwidth() - 1.5, 10), fontsize=10)
    return save_figure(fig, path, dpi)
