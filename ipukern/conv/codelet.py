"""Validating wrapper around the compiled per-tile convolution kernel.

The kernel (``ipukern._kernels._conv.conv_tiles``) computes, for every vertex v on tile
``tiles[v]``, with ``dims[v] = (B, G, C, K, WR, WC, OR, OC, row_org, col_org)``::

    out[b, g, k, y, x] = sum_{c, i, j} win[b, g, c, y*sh + i*dh + row_org, x*sw + j*dw + col_org]
                                       * wts[g, k, c, i, j]

where ``win`` (stored [B][WR][G*C][WC]: rows outermost, input dtype) starts at byte
``win_off[v]`` of the tile's memory, ``wts`` ([G][K][C][kh][kw], input dtype) at ``w_off[v]``
and ``out`` ([B][G][K][OR][OC], output dtype) at ``out_off[v]``. Taps outside the window read
+0.0 (zero padding, so an infinite weight against padding gives NaN, as with a zero-padded
input in PyTorch). fp16 inputs are widened to fp32, products and sums are fp32 and the sum
is rounded once to the output dtype. Every output element is written.

:func:`conv_tiles_checked` checks everything the planner could get wrong (dtypes, shapes,
tiles, byte ranges, alignment, overlapping regions, scratch) with messages naming the
vertex, then runs the kernel. Planned programs call the kernel directly with arrays that
were checked once when the plan was built.
"""
from __future__ import annotations

import numpy as np

from ..core.host.fused import FusedVertices
from ..core.vertices import bias_epilogue
from ..dtypes import DTYPE_CODE, DTYPES
from .params import MAX_KERNEL_PARAM

__all__ = ["ConvKernelError", "DIMS_FIELDS", "ConvCodelet", "conv_tiles_checked",
           "conv_scratch_floats", "operand_nbytes", "available_isas", "best_isa"]

DIMS_FIELDS = ("B", "G", "C", "K", "WR", "WC", "OR", "OC", "row_org", "col_org")
_DT = {**DTYPE_CODE, **{c: c for c in DTYPE_CODE.values()}}   # names and codes accepted
NP_DTYPES = {code: DTYPES[name].type for name, code in DTYPE_CODE.items()}


class ConvKernelError(ValueError):
    """A conv vertex batch the kernel cannot run (bad dims, ranges, overlaps, scratch)."""


def _kernel():
    from .._kernels import _conv
    return _conv


def available_isas() -> list[str]:
    """Compiled ISA variants this CPU can run ("baseline", "avx2", "avx512"), best last."""
    return _kernel().available_isas()


def best_isa() -> str:
    """The variant the kernel picks by default on this CPU."""
    return _kernel().best_isa()


def _dt_code(dt, name: str) -> int:
    key = dt if isinstance(dt, (int, np.integer)) else np.dtype(dt).name
    if key not in _DT:
        raise ConvKernelError(f"{name} must be float32 or float16 (or code 0/1), got {dt!r}")
    return _DT[int(key) if isinstance(key, (int, np.integer)) else key]


def _params(kh, kw, sh, sw, dh, dw) -> tuple[int, ...]:
    out = []
    for name, val in zip(("kh", "kw", "sh", "sw", "dh", "dw"), (kh, kw, sh, sw, dh, dw)):
        if not isinstance(val, (int, np.integer)) or not 1 <= int(val) <= MAX_KERNEL_PARAM:
            raise ConvKernelError(f"{name} must be an int in 1..{MAX_KERNEL_PARAM}, got {val!r}")
        out.append(int(val))
    return tuple(out)


def _dims(dims) -> np.ndarray:
    d = np.asarray(dims)
    if d.ndim != 2 or d.shape[1] != 10:
        raise ConvKernelError(f"dims must have shape (n_vertices, 10) = {DIMS_FIELDS}, got {d.shape}")
    if d.size and not np.issubdtype(d.dtype, np.integer):
        raise ConvKernelError(f"dims must hold integers, got dtype {d.dtype}")
    d = np.ascontiguousarray(d, dtype=np.int64)
    neg = d[:, :8] < 0
    if neg.any():
        v, f = np.argwhere(neg)[0]
        raise ConvKernelError(f"vertex {v}: {DIMS_FIELDS[f]} = {d[v, f]} is negative")
    return d


def operand_nbytes(dims, kh: int, kw: int, in_dt, out_dt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-vertex byte sizes of (window, weights, output)."""
    d = _dims(dims).astype(np.int64)
    isz = 2 if _dt_code(in_dt, "in_dt") else 4
    osz = 2 if _dt_code(out_dt, "out_dt") else 4
    B, G, C, K, WR, WC, OR, OC = (d[:, i] for i in range(8))
    sizes = ((B, G, C, WR, WC, isz), (G, K, C, kh * kw, isz), (B, G, K, OR, OC, osz))
    out = []
    for factors in sizes:
        # in float first: int64 products of caller-given dims could wrap past a range check
        approx = np.ones(d.shape[0])
        for f in factors:
            approx = approx * np.asarray(f, dtype=np.float64)
        if (approx > 2.0 ** 62).any():
            v = int(np.argmax(approx > 2.0 ** 62))
            raise ConvKernelError(f"vertex {v}: dims {d[v].tolist()} give an operand of "
                                  f"{approx[v]:.3g} bytes")
        prod = np.ones(d.shape[0], dtype=np.int64)
        for f in factors:
            prod = prod * f
        out.append(prod)
    return tuple(out)


def conv_scratch_floats(dims, kh, kw, sh, sw, dh, dw) -> int:
    """Scratch floats per thread for these vertices (the kernel's own count, validated)."""
    kh, kw, sh, sw, dh, dw = _params(kh, kw, sh, sw, dh, dw)
    s = _kernel().conv_scratch_floats(_dims(dims), kh, kw, sh, sw, dh, dw)
    if s < 0:
        raise ConvKernelError(f"dims too large for the kernel's 32-bit tap offsets (status {-s})")
    return int(s)


def _check_overlaps(tiles, row_bytes, reads, writes) -> None:
    """No output may overlap another output or any input on the same tile: the result
    would depend on the order the vertices run in."""
    key = tiles.astype(np.int64) * (row_bytes + 1)   # one line of addresses for all tiles

    def table(regions):
        rows = [(key + off, key + off + nb, np.arange(off.size), np.full(off.size, i))
                for i, (off, nb) in enumerate(regions.values())]
        s, e, v, w = (np.concatenate(c) for c in zip(*rows))
        keep = e > s
        return s[keep], e[keep], v[keep], w[keep]

    def where(start, v):
        return f"tile {int(start // (row_bytes + 1))}: vertex {int(v)}"

    wnames, rnames = list(writes), list(reads)
    ws, we, wv, wk = table(writes)
    if ws.size == 0:
        return
    o = np.argsort(ws, kind="stable")
    ws, we, wv, wk = ws[o], we[o], wv[o], wk[o]
    clash = ws[1:] < np.maximum.accumulate(we)[:-1]
    if clash.any():
        i = int(np.argmax(clash)) + 1
        j = int(np.argmax(we[:i] > ws[i]))
        raise ConvKernelError(f"{where(ws[i], wv[i])}'s {wnames[wk[i]]} overlaps vertex {int(wv[j])}'s "
                              f"{wnames[wk[j]]}; outputs must not overlap")
    # writes are now disjoint and sorted, so their ends are sorted too: the last write
    # starting before a read ends is the only candidate to overlap it
    rs, re_, rv, rk = table(reads)
    j = np.searchsorted(ws, re_, side="left") - 1
    hit = (j >= 0) & (we[np.maximum(j, 0)] > rs)
    if hit.any():
        i = int(np.argmax(hit))
        raise ConvKernelError(f"{where(rs[i], rv[i])}'s {rnames[rk[i]]} overlaps vertex "
                              f"{int(wv[j[i]])}'s {wnames[wk[j[i]]]}; outputs must not overlap inputs")


def conv_tiles_checked(data, tiles, win_off, w_off, out_off, dims, kh, kw, sh=1, sw=1, dh=1,
                       dw=1, in_dt="float32", out_dt="float32", scratch=None, n_threads=None,
                       *, isa=None, direct=True):
    """Validate a batch of conv vertices, then run them all in one kernel call.

    Parameters
    ----------
    data : ndarray of uint8, shape (n_rows, row_bytes), C-contiguous
        The arena; row t is tile t's memory. Outputs are written in place.
    tiles : array of int, shape (V,)
    win_off, w_off, out_off : array of int, shape (V,)
        Byte offsets within the vertex's tile of the window, weights and output.
    dims : array of int, shape (V, 10)
        B, G, C, K, WR, WC, OR, OC, row_org, col_org per vertex.
    kh, kw, sh, sw, dh, dw : int
        Kernel size, stride, dilation (same for all vertices).
    in_dt, out_dt : "float32" / "float16" (or 0 / 1)
    scratch : float32 ndarray of shape (n_threads, S), optional
        S >= :func:`conv_scratch_floats`; allocated here when omitted.
    n_threads : int, optional
        Defaults to the engine's thread count.
    isa : str, optional
        Force "baseline", "avx2" or "avx512" (tests); default: the best this CPU runs.
    direct : bool
        False keeps every vertex on the packing path (tests: the direct path for fp32
        windows without padding must give the same bits).

    Raises
    ------
    ConvKernelError
        Naming the vertex and what is wrong. Nothing is written then.
    """
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise ConvKernelError("data must be a 2-D uint8 ndarray (n_rows, row_bytes), got "
                              f"{getattr(data, 'dtype', type(data))} {getattr(data, 'shape', '')}")
    if not data.flags.c_contiguous or not data.flags.writeable:
        raise ConvKernelError("data must be C-contiguous and writeable")
    kh, kw, sh, sw, dh, dw = _params(kh, kw, sh, sw, dh, dw)
    idt, odt = _dt_code(in_dt, "in_dt"), _dt_code(out_dt, "out_dt")
    d = _dims(dims)
    V = d.shape[0]
    arrs = {}
    for name, val in (("tiles", tiles), ("win_off", win_off), ("w_off", w_off), ("out_off", out_off)):
        a = np.asarray(val)
        if a.shape != (V,):
            raise ConvKernelError(f"{name} must have shape ({V},) like dims, got {a.shape}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ConvKernelError(f"{name} must hold integers, got dtype {a.dtype}")
        arrs[name] = np.ascontiguousarray(a, dtype=np.int32 if name == "tiles" else np.int64)
    t = arrs["tiles"]
    n_rows, row_bytes = data.shape
    bad = (t < 0) | (t >= n_rows)
    if bad.any():
        v = int(np.argmax(bad))
        raise ConvKernelError(f"vertex {v}: tile {int(t[v])} outside 0..{n_rows - 1}")
    wb, kb, ob = operand_nbytes(d, kh, kw, idt, odt)
    isz, osz = (2 if idt else 4), (2 if odt else 4)
    base = data.ctypes.data
    for name, what, nb, sz in (("win_off", "window", wb, isz), ("w_off", "weights", kb, isz),
                               ("out_off", "output", ob, osz)):
        off = arrs[name]
        bad = (off < 0) | (off + nb > row_bytes)
        if bad.any():
            v = int(np.argmax(bad))
            raise ConvKernelError(f"vertex {v} on tile {int(t[v])}: {what} bytes "
                                  f"[{int(off[v])}, {int(off[v] + nb[v])}) fall outside the tile's "
                                  f"{row_bytes} B")
        bad = (base + t.astype(np.int64) * row_bytes + off) % sz != 0
        if bad.any():
            v = int(np.argmax(bad))
            raise ConvKernelError(f"vertex {v} on tile {int(t[v])}: {name} {int(off[v])} is not "
                                  f"aligned to the {sz}-byte element size")
    _check_overlaps(t, row_bytes,
                    {"window": (arrs["win_off"], wb), "weights": (arrs["w_off"], kb)},
                    {"output": (arrs["out_off"], ob)})
    if n_threads is None:
        from ..core import get_num_threads
        n_threads = get_num_threads()
    n_threads = int(n_threads)
    if n_threads < 1:
        raise ConvKernelError(f"n_threads must be >= 1, got {n_threads}")
    need = conv_scratch_floats(d, kh, kw, sh, sw, dh, dw) if V else 16
    if scratch is None:
        scratch = np.empty((n_threads, need), dtype=np.float32)
    elif (not isinstance(scratch, np.ndarray) or scratch.dtype != np.float32 or scratch.ndim != 2
          or not scratch.flags.c_contiguous or not scratch.flags.writeable):
        raise ConvKernelError("scratch must be a writeable C-contiguous float32 array (n_threads, S)")
    elif scratch.shape[0] < n_threads or scratch.shape[1] < need:
        raise ConvKernelError(f"scratch {scratch.shape} is too small: need ({n_threads}, {need}); "
                              "size it with conv_scratch_floats")
    isa_code = -1
    if isa is not None:
        names = ("baseline", "avx2", "avx512")
        if isa not in names or isa not in available_isas():
            raise ConvKernelError(f"isa {isa!r} is not available here; choose from {available_isas()}")
        isa_code = names.index(isa)
    st = _kernel().conv_tiles(data, t, arrs["win_off"], arrs["w_off"], arrs["out_off"], d,
                              kh, kw, sh, sw, dh, dw, idt, odt, scratch, n_threads, isa_code,
                              bool(direct))
    if st != 0:  # pragma: no cover - everything the kernel checks was checked above
        raise ConvKernelError(f"conv kernel refused the batch (status {st})")


#: planned programs take the kernel's direct path where it applies (fp32 windows without
#: padding); False keeps every vertex on the packing path. Both give the same bits: the
#: switch exists so that tests can show it on whole networks.
DIRECT_PATH = True


class ConvCodelet:
    """A codelet (see :class:`ipukern.core.program.Codelet`) running conv vertices through the
    compiled kernel.

    The batch's ``args`` hold ``"win"``, ``"w"``, ``"out"`` (int64 byte offsets, shape (V,))
    and ``"dims"`` (int64, shape (V, 10)), checked once with :func:`conv_tiles_checked` when
    the plan is built (or laid out by the program builder, whose layout the tests check).
    Scratch is sized from the dims and allocated on the first run for a given thread count,
    then reused by every later run of the plan (one codelet may serve several batches).

    Parameters
    ----------
    kernel, stride, dilation : (int, int)
    in_dtype, out_dtype : "float32" or "float16"
    scratch_floats : int, optional
        :func:`conv_scratch_floats` of the batches' dims; computed from the first batch run
        (and grown for larger ones) when omitted.
    """

    def __init__(self, kernel, stride=(1, 1), dilation=(1, 1), in_dtype="float32",
                 out_dtype="float32", scratch_floats=None, name=None):
        self.params = _params(*kernel, *stride, *dilation)
        self.in_dt, self.out_dt = _dt_code(in_dtype, "in_dtype"), _dt_code(out_dtype, "out_dtype")
        self.scratch_floats = 0 if scratch_floats is None else int(scratch_floats)
        self.name = name or (f"conv{kernel[0]}x{kernel[1]}<{np.dtype(NP_DTYPES[self.in_dt]).name}"
                             f"->{np.dtype(NP_DTYPES[self.out_dt]).name}>")
        self._scratch = {}
        self._need: dict[int, int] = {}

    def scratch(self, n_threads: int) -> np.ndarray:
        s = self._scratch.get(n_threads)
        if s is None or s.shape[1] < self.scratch_floats:
            s = self._scratch[n_threads] = np.zeros((n_threads, max(self.scratch_floats, 16)),
                                                    np.float32)
        return s

    def fused_vertices(self, batch) -> FusedVertices:
        """The :class:`~ipukern.core.host.fused.FusableCodelet` hook: what
        :mod:`ipukern.core.host.fused` needs to run ``batch`` right after an exchange, in the
        same compiled call (:class:`~ipukern.core.host.fused.FusedVertices`). ``others``: the
        batch's regions past its window and weights (the conv builder lists those two
        first: output, then the bias its epilogue reads); all of them if it does not."""
        a = batch.args
        need = conv_scratch_floats(a["dims"], *self.params)
        win_nb, w_nb, out_nb = operand_nbytes(a["dims"], *self.params[:2], self.in_dt, self.out_dt)
        regions = list(batch.regions)
        first = [np.asarray(r[0], np.int64).ravel() for r in regions[:2]]
        lead = len(first) == 2 and all(f.shape == np.shape(a[k]) and np.array_equal(f, a[k])
                                       for f, k in zip(first, ("win", "w")))
        return FusedVertices(batch.tiles, a["win"], a["w"], a["out"], a["dims"],
                             self.params + (self.in_dt, self.out_dt), need, out_nb,
                             bias_epilogue(batch), win_nb, w_nb, regions[2:] if lead else regions)

    @staticmethod
    def direct_path() -> bool:
        """:data:`DIRECT_PATH`, read at every run (the tests switch it)."""
        return DIRECT_PATH

    def run(self, data, batch, n_threads):
        a = batch.args
        need = self._need.get(id(batch))
        if need is None:
            need = self._need[id(batch)] = conv_scratch_floats(a["dims"], *self.params)
        self.scratch_floats = max(self.scratch_floats, need)
        epi = bias_epilogue(batch)
        st = _kernel().conv_tiles(data, batch.tiles, a["win"], a["w"], a["out"], a["dims"],
                                  *self.params, self.in_dt, self.out_dt, self.scratch(n_threads),
                                  n_threads, -1, DIRECT_PATH,
                                  *((epi[0], epi[1], epi[2].act) if epi else ()))
        if st != 0:
            raise ConvKernelError(f"{self.name}: the conv kernel refused the batch (status {st}); "
                                  "check it with conv_tiles_checked")
