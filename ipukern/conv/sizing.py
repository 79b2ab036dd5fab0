"""The busiest tile's bytes for each candidate split vector of the conv planner's search.

:mod:`.search` holds its candidates in a :class:`Table` (one int64 column per quantity, one
row per split vector; the column names are :mod:`.search`'s legend). :func:`with_windows`
adds each row's input window and reduction stages, :func:`fewest_serial_slices` the fewest
serial out-chan slices whose buffers fit the tile (every per-tile buffer, aligned as
``TileMemory`` aligns it).
"""
from __future__ import annotations

import numpy as np

from .._kernels import loop_columns, plan_kernels
from ..core.cost import ceil_div
from ..dtypes import DTYPES
from ..machine import MachineSpec
from .params import ConvParams
from .reduce import MULTI_STAGE_DEPTHS, reduce_stages

__all__ = ["Table", "ALIGN", "aligned", "with_windows", "fewest_serial_slices", "SIZING_COLUMNS"]

#: byte alignment of every per-tile buffer (TileMemory aligns to 8; a power of two, see aligned)
ALIGN = 8


def aligned(nbytes):
    """``nbytes`` rounded up to a multiple of ``ALIGN`` (a power of two): an add and a
    mask, as ``ceil_div(n, ALIGN) * ALIGN`` on integers but in two passes over a
    candidate column instead of four (it runs nine times per serial count sized)."""
    return (nbytes + (ALIGN - 1)) & -ALIGN


def _window_extent(n_out_t: np.ndarray, k: int, stride: int, dil: int, size: int) -> np.ndarray:
    """Input rows a block of n_out_t output rows needs (clipped to the input)."""
    return np.minimum((n_out_t - 1) * stride + (k - 1) * dil + 1, size)


class Table(dict):
    """Candidate split vectors as equal-length int64 columns (one row per candidate);
    columns read as attributes, ``take`` keeps a subset of rows."""

    __getattr__ = dict.__getitem__

    def take(self, sel: np.ndarray) -> "Table":
        return Table({k: v[sel] for k, v in self.items()})


def with_windows(p: ConvParams, c: Table, direct_output: bool) -> Table:
    """Add the input window (WR x WC, bytes), the weight-sharing group size M, the
    reduction depth R and what finishes each slice (reduce or cast)."""
    isz = DTYPES[p.dtype].itemsize
    # every kernel block holds the whole kernel's window (see layout.geometry)
    WR = _window_extent(c.OR, p.kernel_h, p.stride[0], p.dilation[0], p.in_h)
    WC = _window_extent(c.OC, p.kernel_w, p.stride[1], p.dilation[1], p.in_w)
    # a window also holds its block's core, which is longer than the taps need when the
    # stride exceeds the kernel span
    c["WR"] = np.maximum(WR, np.minimum(ceil_div(p.in_h, c.hs) + p.stride[0], p.in_h))
    c["WC"] = np.maximum(WC, np.minimum(ceil_div(p.in_w, c.ws) + p.stride[1], p.in_w))
    c["win_b"] = c.B_t * c.WR * c.G_t * c.C_t * c.WC * isz
    # a later kernel block owns none of its window: it receives all of it
    c["later_b"] = np.where(c.kr > 1, c.win_b, 0)
    c["M"] = c.bs * c.hs * c.ws
    c["R"] = c.is_ * c.kr
    c["f1"], c["f2"], c["f3"] = _stage_depths(c.R)
    c["reduce_needed"] = c.R > 1
    c["cast_needed"] = (~c.reduce_needed) & (p.partials != p.dtype) & (not direct_output)
    return c


def _tile_bytes(p: ConvParams, og: int, c: Table, serial: np.ndarray,
                bias: bool) -> dict[str, np.ndarray]:
    """The busiest tile's bytes (``mem``) with ``serial`` out-chan slices, and the slice
    sizes: out-chans K_s, weight bytes w_b, outputs out_s and reduction chunk."""
    isz, psz = DTYPES[p.dtype].itemsize, DTYPES[p.partials].itemsize
    kk = c.KH_t * p.kernel_w
    K_s = np.minimum(ceil_div(ceil_div(c.K_t, og), serial) * og, c.K_t)  # out-chans per slice
    w_b = c.G_t * K_s * c.C_t * kk * isz                           # one slice of weights
    w_store = np.where(serial > 1, ceil_div(serial, c.M) * w_b, 0)   # owned slices
    out_s = c.B_t * c.G_t * K_s * c.OR * c.OC                      # outputs of one slice
    chunk, recv, mid_b = _reduction_sizes(c, out_s, psz)
    n_part_bufs = np.where(serial > 1, 2, 1)                       # double-buffered if serial
    part_b = np.where(c.reduce_needed | c.cast_needed, n_part_bufs * out_s * psz, 0)
    out_b = serial * np.where(c.reduce_needed, chunk, out_s) * isz
    recv_b = np.where(c.reduce_needed, recv * psz, 0)
    bias_b = c.G_t * c.K_t * isz if bias else 0
    mem = sum(aligned(x) for x in (c.win_b, w_b, w_store, part_b, out_b, recv_b, bias_b, mid_b))
    return {"mem": mem, "K_s": K_s, "w_b": w_b, "out_s": out_s, "chunk": chunk,
            "out_b": aligned(out_b)}


def _stage_depths(R: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per split vector, the depths of the (up to 3) reduction stages of :func:`~.reduce.
    reduce_stages` (absent stages 1). Depths below the first of ``MULTI_STAGE_DEPTHS`` are one stage;
    deeper ones are looked up once per value."""
    R = np.asarray(R, dtype=np.int64)
    f = [R, np.ones_like(R), np.ones_like(R)]
    deep = np.flatnonzero(R >= MULTI_STAGE_DEPTHS[0])
    if deep.size:
        uniq, inv = np.unique(R[deep], return_inverse=True)
        table = np.ones((uniq.size, 3), dtype=np.int64)
        for i, r in enumerate(uniq):
            st = reduce_stages(int(r))
            table[i, :len(st)] = st
        f[0] = R.copy()
        for k in range(3):
            f[k][deep] = table[inv.reshape(-1), k]
    return f[0], f[1], f[2]


def _reduction_sizes(c: Table, out_s: np.ndarray, psz: int) -> tuple[np.ndarray, ...]:
    """Per split vector, the busiest tile's reduction buffers for ``out_s`` outputs reduced
    in the stages ``c.f1, c.f2, c.f3``: the final chunk and the receive buffer (elements;
    shared by the stages, the largest one's), and the aligned bytes of the intermediate
    stages' sums."""
    size = ceil_div(out_s, c.f1)
    chunk, recv = size, (c.f1 - 1) * size
    mid_b = np.zeros_like(size)
    deep = np.flatnonzero(c.f2 > 1)
    if deep.size:
        s1 = size[deep]
        s2 = ceil_div(s1, c.f2[deep])
        s3 = ceil_div(s2, c.f3[deep])
        recv[deep] = np.maximum(recv[deep], np.maximum((c.f2[deep] - 1) * s2, (c.f3[deep] - 1) * s3))
        chunk = chunk.copy()
        chunk[deep] = s3
        mid_b[deep] = aligned(s1 * psz) + np.where(c.f3[deep] > 1, aligned(s2 * psz), 0)
    return chunk, recv, mid_b


def fewest_serial_slices(p: ConvParams, machine: MachineSpec, og: int, c: Table,
                          serials: np.ndarray, bias: bool, temp_bound: int | None = None
                          ) -> tuple[np.ndarray, tuple[int, int] | None, dict[str, np.ndarray]]:
    """Per split vector, the fewest serial slices whose busiest tile fits the budget and
    whose temporary bytes (all but the output) stay within ``temp_bound`` when given (0 if
    none does; each tile needs a grain per slice), the smallest (bytes, slices) seen, and
    the :func:`_tile_bytes` sizes of the slices chosen (0 where none fits).

    In compiled code when the kernels are built (:func:`ipukern._kernels.plan_kernels`: one
    pass over the rows, each stopping at its first count that fits), else in NumPy
    (:func:`_fewest_serial_slices_numpy`); the two agree exactly."""
    kernel = plan_kernels()
    if kernel is None or not len(c.K_t):
        return _fewest_serial_slices_numpy(p, machine, og, c, serials, bias, temp_bound)
    cols = loop_columns(c, _KERNEL_INT_COLUMNS, ("reduce_needed", "cast_needed"))
    consts = (int(og), int(p.kernel_w), DTYPES[p.dtype].itemsize, DTYPES[p.partials].itemsize,
              bool(bias), int(machine.tile_budget_bytes), -1 if temp_bound is None else int(temp_bound))
    serial, *sized, least, least_k = kernel.fewest_serial(
        cols, np.ascontiguousarray(serials, dtype=np.int64), consts)
    return serial, (None if least < 0 else (int(least), int(least_k))), dict(zip(_SIZES, sized))


#: the compiled loop's int64 columns, in its order; then reduce_needed, cast_needed (uint8)
_KERNEL_INT_COLUMNS = ("K_t", "G_t", "C_t", "M", "B_t", "OR", "OC", "win_b", "f1", "f2", "f3",
                       "KH_t")
#: the sizes :func:`fewest_serial_slices` returns, in the compiled loop's order
_SIZES = ("mem", "K_s", "w_b", "out_s", "chunk", "out_b")


def _fewest_serial_slices_numpy(p: ConvParams, machine: MachineSpec, og: int, c: Table,
                                serials: np.ndarray, bias: bool, temp_bound: int | None = None
                                ) -> tuple[np.ndarray, tuple[int, int] | None, dict[str, np.ndarray]]:
    """:func:`fewest_serial_slices` in NumPy: each serial count sizes only the vectors that
    no smaller count fitted."""
    k_grains = ceil_div(c.K_t, og)
    n = len(k_grains)
    serial = np.zeros_like(c.K_t)
    sizes: dict[str, np.ndarray] = {}
    smallest = None
    for k in serials:
        todo = np.flatnonzero((serial == 0) & (k_grains >= k))
        if not todo.size:
            continue
        sub = c if todo.size == n else Table({col: c[col][todo] for col in SIZING_COLUMNS})
        t = _tile_bytes(p, og, sub, k, bias)
        ok = t["mem"] <= machine.tile_budget_bytes
        if temp_bound is not None:
            ok &= t["mem"] - t["out_b"] <= temp_bound
        rows = todo[ok]
        serial[rows] = k
        for name, v in t.items():
            sizes.setdefault(name, np.zeros(n, dtype=np.int64))[rows] = v[ok]
        cand_min = int(t["mem"].min())
        if smallest is None or cand_min < smallest[0]:
            smallest = (cand_min, int(k))
        if (serial > 0).all():
            break
    return serial, smallest, sizes


#: the columns :func:`_tile_bytes` reads
SIZING_COLUMNS = ("K_t", "G_t", "C_t", "M", "B_t", "OR", "OC", "win_b", "reduce_needed",
                   "cast_needed", "f1", "f2", "f3", "KH_t")
