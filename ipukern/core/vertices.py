"""Built-in vertex set: element-wise ops, fill, scale, on-tile copy, partial sums.

Each builder returns a :class:`~ipukern.core.program.VertexBatch` (one vertex per tile that holds
data) with cycle estimates from :mod:`ipukern.core.cost`; the compiled kernels live in
``ipukern/_kernels/_vertices.pyx``. They exercise the engine end to end and serve the
reductions of the conv/matmul programs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import cost
from ..dtypes import DTYPE_CODE
from ..machine import MachineSpec
from .program import VertexBatch
from .tensor import TileTensor

__all__ = ["KernelCodelet", "DTYPE_CODE", "BINARY_OPS", "binary_op", "scale", "fill", "sum_rows", "sum_elems",
           "same_layout"]

BINARY_OPS = {"add": 0, "sub": 1, "mul": 2, "max": 3, "min": 4}


def _kernels():
    from .._kernels import _vertices
    return _vertices


def same_layout(*tensors: TileTensor) -> None:
    """Raise unless the tensors have identical shapes, dtypes and tile mappings."""
    a = tensors[0]
    for b in tensors[1:]:
        if b.shape != a.shape or b.dtype != a.dtype:
            raise ValueError(f"{b.name!r} is {b.dtype}{list(b.shape)} but {a.name!r} is "
                             f"{a.dtype}{list(a.shape)}")
        ma, mb = a.mapping, b.mapping
        if not (np.array_equal(ma.tile, mb.tile) and np.array_equal(ma.start, mb.start)
                and np.array_equal(ma.count, mb.count)):
            raise ValueError(f"{a.name!r} and {b.name!r} are mapped differently over the tiles; "
                             "element-wise vertices need the same mapping")


def per_size(fn, sizes: np.ndarray) -> np.ndarray:
    """Apply a scalar cycle estimator once per distinct size (vertices of a batch mostly
    share a few sizes), returning int64 cycles per vertex."""
    sizes = np.asarray(sizes, dtype=np.int64)
    uniq, inv = np.unique(sizes, return_inverse=True)
    vals = np.array([fn(int(k)) if k > 0 else 0 for k in uniq], dtype=np.int64)
    return vals[inv.ravel()].reshape(sizes.shape)


def _blocks(t: TileTensor, n_tiles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    off, n = t.tile_block(n_tiles)
    tiles = np.flatnonzero(n > 0).astype(np.int32)
    return tiles, off[tiles], n[tiles]


# --------------------------------------------------------------------------- codelets
@dataclass(frozen=True)
class KernelCodelet:
    """A codelet backed by one function of ``ipukern._kernels._vertices``: the function is
    called as ``fn(data, tiles, *per-vertex arrays in arg_keys order, *consts, n_threads)``."""

    name: str
    fn: str
    arg_keys: tuple[str, ...]
    consts: tuple = ()

    def run(self, data, batch, n_threads):
        args = [batch.args[k] for k in self.arg_keys]
        getattr(_kernels(), self.fn)(data, batch.tiles, *args, *self.consts, n_threads,
                                     **bias_epilogue_kwargs(batch))


def bias_epilogue(batch) -> tuple | None:
    """``(bias_off, bias_prm, bias_pass)`` when a batch's vertices also do the bias pass of
    the outputs they write, or None: set by :func:`ipukern.conv.build.fuse_bias` (a conv
    batch: ``bias_prm`` is ``(Kb, ks0)`` per vertex) or its finishing step (a sum batch:
    add_bias's params per vertex) -- execute mode's host fusion of a conv's bias pass
    (``args["bias_pass"]``, run as a no-op while its ``fused`` is set; switched off, the
    codelet runs its own pass again, as the tests do)."""
    a = batch.args
    bp = a.get("bias_pass")
    if bp is None or not bp.fused:
        return None
    return a["bias_off"], a["bias_prm"], bp


def bias_epilogue_kwargs(batch) -> dict:
    """:func:`bias_epilogue` of a sum batch as ``sum_rows`` / ``sum_rows_from`` keywords
    ({} without one)."""
    epi = bias_epilogue(batch)
    return {} if epi is None else {"bias_off": epi[0], "bias_prm": epi[1], "act": epi[2].act}


# --------------------------------------------------------------------------- builders
def binary_op(machine: MachineSpec, op: str, out: TileTensor, a: TileTensor, b: TileTensor) -> VertexBatch:
    """``out = a (op) b`` on every tile holding the tensors (same mapping required)."""
    if op not in BINARY_OPS:
        raise ValueError(f"unknown op {op!r}; choose from {sorted(BINARY_OPS)}")
    same_layout(out, a, b)
    n_tiles = machine.n_tiles
    tiles, o_off, n = _blocks(out, n_tiles)
    a_off = a.tile_block(n_tiles)[0][tiles]
    b_off = b.tile_block(n_tiles)[0][tiles]
    cyc = per_size(lambda k: cost.elementwise_cycles(machine, k, out.dtype, 2), n)
    nb = n * out.itemsize
    codelet = KernelCodelet(f"{op}<{out.dtype}>", "binary", ("out", "a", "b", "n"),
                            (BINARY_OPS[op], DTYPE_CODE[out.dtype]))
    return VertexBatch(codelet, tiles,
                       {"out": o_off, "a": a_off, "b": b_off, "n": n}, cyc,
                       regions=[(o_off, nb), (a_off, nb), (b_off, nb)],
                       why=f"{op}<{out.dtype}>: {int(n.max()) if n.size else 0} elements on the busiest tile")


def scale(machine: MachineSpec, out: TileTensor, a: TileTensor, alpha: float) -> VertexBatch:
    """``out = alpha * a`` element-wise."""
    same_layout(out, a)
    tiles, o_off, n = _blocks(out, machine.n_tiles)
    a_off = a.tile_block(machine.n_tiles)[0][tiles]
    cyc = per_size(lambda k: cost.elementwise_cycles(machine, k, out.dtype, 1), n)
    nb = n * out.itemsize
    codelet = KernelCodelet(f"scale<{out.dtype}>", "scale", ("out", "a", "n"),
                            (float(alpha), DTYPE_CODE[out.dtype]))
    return VertexBatch(codelet, tiles,
                       {"out": o_off, "a": a_off, "n": n}, cyc,
                       regions=[(o_off, nb), (a_off, nb)], why=f"scale<{out.dtype}>")


def fill(machine: MachineSpec, t: TileTensor, value: float) -> VertexBatch:
    """Set every element of ``t`` to ``value``."""
    tiles, off, n = _blocks(t, machine.n_tiles)
    cyc = per_size(lambda k: cost.zero_cycles(machine, k, t.dtype), n)
    codelet = KernelCodelet(f"fill<{t.dtype}>", "fill", ("off", "n"), (float(value), DTYPE_CODE[t.dtype]))
    return VertexBatch(codelet, tiles, {"off": off, "n": n}, cyc,
                       regions=[(off, n * t.itemsize)], why=f"fill<{t.dtype}>")


def sum_rows(machine: MachineSpec, tiles: np.ndarray, out_off: np.ndarray, src_off: list[np.ndarray],
             n: np.ndarray, in_dtype: str, out_dtype: str, why: str = "") -> VertexBatch:
    """Per vertex v: ``out = sum_k src_k`` over ``len(src_off)`` same-length vectors on tile v,
    added in the order given (fixed order: deterministic). ``src_off[k][v]`` is the byte
    offset of vertex v's k-th vector; ``out`` may alias ``src_off[0]``."""
    tiles = np.asarray(tiles, dtype=np.int32)
    depth = len(src_off)
    if depth < 1:
        raise ValueError("sum_rows needs at least one source vector")
    n = np.asarray(n, dtype=np.int64)
    src = np.stack([np.asarray(s, dtype=np.int64) for s in src_off], axis=1)  # (V, depth)
    ptr = np.arange(tiles.size + 1, dtype=np.int64) * depth
    in_size = 4 if in_dtype == "float32" else 2
    out_size = 4 if out_dtype == "float32" else 2
    cyc = per_size(lambda k: cost.reduce_cycles(machine, k, depth, in_dtype, out_dtype), n)
    regions = [(np.asarray(out_off, dtype=np.int64), n * out_size)]
    regions += [(src[:, k], n * in_size) for k in range(depth)]
    codelet = KernelCodelet(f"sum_rows<{in_dtype}->{out_dtype}>", "sum_rows",
                            ("out", "src_ptr", "src_off", "n"), (DTYPE_CODE[in_dtype], DTYPE_CODE[out_dtype]))
    return VertexBatch(codelet, tiles,
                       {"out": np.asarray(out_off, dtype=np.int64), "src_ptr": ptr,
                        "src_off": np.ascontiguousarray(src.ravel()), "n": n},
                       cyc, regions=regions,
                       why=why or f"reduce {depth} partials of {int(n.max()) if n.size else 0} "
                                  f"{in_dtype} -> {out_dtype}")


def sum_elems(machine: MachineSpec, tiles: np.ndarray, out_off: np.ndarray, in_off: np.ndarray,
              n: np.ndarray, in_dtype: str, out_dtype: str) -> VertexBatch:
    """Per vertex: one output element = the sum of ``n`` contiguous input elements."""
    tiles = np.asarray(tiles, dtype=np.int32)
    n = np.asarray(n, dtype=np.int64)
    in_size = 4 if in_dtype == "float32" else 2
    out_size = 4 if out_dtype == "float32" else 2
    # a horizontal sum streams the vector like a 1-input element-wise op
    cyc = per_size(lambda k: cost.elementwise_cycles(machine, k, in_dtype, 1), n)
    codelet = KernelCodelet(f"sum_elems<{in_dtype}->{out_dtype}>", "sum_elems", ("out", "in", "n"),
                            (DTYPE_CODE[in_dtype], DTYPE_CODE[out_dtype]))
    return VertexBatch(codelet, tiles,
                       {"out": np.asarray(out_off, np.int64), "in": np.asarray(in_off, np.int64), "n": n},
                       cyc, regions=[(np.asarray(in_off), n * in_size),
                                     (np.asarray(out_off), np.full(n.size, out_size))],
                       why=f"sum {int(n.max()) if n.size else 0} {in_dtype} elements per tile")
