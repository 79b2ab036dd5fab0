"""Cycle models of the non-conv network vertices, from the PopLibs estimators.

Sources (graphcore/poplibs, public on GitHub):

- [NL] ``lib/popnn/popnnCycleEstimators.cpp`` (NonLinearity1D estimator) with the per-vector
  op cycles of ``lib/popnn/PerformanceEstimation.hpp`` (``getNonLinearityOpCycles``);
- [POOL] ``lib/popnn/PerformanceEstimation.hpp`` ``getPoolingCycles`` (row loop 13, work
  loop 20, inner rpt loop ``4 + 3n`` max / ``5 + 3n`` sum per channel group, supervisor 7+6);
- [UN] ``lib/popops/popopsCycleEstimators.cpp`` ``UnaryOp1D`` (worker 17 cycles, 33 for exp,
  then the inner loop of ``unaryOpPerfInfo`` in ``popopsCycleEstimators.hpp``: cycles per
  loop and elements per loop, e.g. EXPONENT float 6 cycles / 2 elements, LOGARITHM float 12 /
  2, half 4 / 4; LOGARITHM_ONE_PLUS 18 per natural vector, plus the 4-cycle loop overhead
  ``unaryOpInnerLoopCycles`` adds to such entries);
- [CMP] ``popopsCycleEstimators.cpp`` ``BinaryOp1D`` (worker 29 cycles float, 26 half) with
  ``binaryOpPerfInfo`` LESS_THAN (float 14 cycles / 4 elements, half 9 / 4), and ``Select``
  (5 per vertex, ``selectCycles``: 6 + 5 per element, one element per loop: "ld in1, ld in2,
  ld in3, movnz, st"; one vertex per worker);
- [LOSS] ``lib/popnn/PerformanceEstimation.hpp`` ``getLossTransformCycles`` (softmax
  cross-entropy transform, 9 cycles per float element);
- [RED] ``lib/popops/reduction/CycleEstimationFunctions.cpp``
  ``getCycleEstimateReduceAllRegionsContinuous`` (the ContinuousReduce worker vertex: 1
  cycle per inner loop of min(accumulator, 64-bit data path) elements, +2 for an odd
  partial count, 12 per output, 10 + 7 call/return) and ``ReductionConnection.cpp``
  (``splitTwoStageReductionsBetweenWorkers``: a reduction is split over idle workers, each
  piece at least 2 rows, then a second on-tile stage sums the pieces);
- element-wise binary ops and the partial-sum reductions reuse :mod:`ipukern.core.cost`
  (popops BinaryOp1D and the reduce vertices).

Every function returns integer tile cycles for one tile doing ``n`` elements (0 for
n = 0) and accepts NumPy arrays of sizes (vectorised over tiles).
"""
from __future__ import annotations

import numpy as np

from ..core import cost
from ..dtypes import DTYPES, canonical_dtype
from ..machine import MachineSpec

__all__ = [
    "ACTIVATIONS",
    "NONLINEARITIES",
    "activation_cycles",
    "binary_cycles",
    "continuous_reduce_cycles",
    "copy_cycles",
    "less_than_cycles",
    "loss_cycles",
    "nonlinearity_cycles",
    "pool_cycles",
    "reduce_rows_cycles",
    "select_cycles",
    "tile_reduce_cycles",
    "unary_cycles",
]

#: getNonLinearityOpCycles [NL]: (scalar float, vector float, scalar half, vector half).
#: ReLU6 is a clamp (two min/max instructions: ReLU's cost twice, stated, not in PopLibs).
_NL_OP = {"relu": (1, 1, 1, 1), "relu6": (2, 2, 2, 2), "sigmoid": (5, 10, 2, 4),
          "tanh": (5, 10, 1, 2), "gelu": (10, 10, 5, 5), "silu": (6, 11, 3, 5)}
NONLINEARITIES = tuple(_NL_OP)
#: activations popnn has no NonLinearity for, priced as the popops element-wise ops that
#: compute them (:func:`activation_cycles`)
ACTIVATIONS = NONLINEARITIES + ("selu",)
#: NonLinearity1D worker overhead [NL]: 3 load + 5 divide + 2 id + 2 align + 5 setup + 3
_NL_WORKER_OVERHEAD = 20
_NL_SUPERVISOR = 9
#: unaryOpPerfInfo [UN]: (cycles per loop, elements per loop) per (op, dtype)
_UNARY = {("exp", "float32"): (6, 2), ("exp", "float16"): (4, 4),
          ("rsqrt", "float32"): (8, 2), ("rsqrt", "float16"): (19, 4),
          ("inverse", "float32"): (6, 2), ("inverse", "float16"): (15, 4),
          ("log", "float32"): (12, 2), ("log", "float16"): (4, 4),
          ("log1p", "float32"): (18 + 4, 2), ("log1p", "float16"): (18 + 4, 4)}
#: BinaryOp1D LESS_THAN [CMP]: worker overhead and (cycles per loop, elements per loop)
_LESS_THAN = {"float32": (29, 14, 4), "float16": (26, 9, 4)}


def _arr(n) -> np.ndarray:
    return np.asarray(n, dtype=np.int64)


def nonlinearity_cycles(machine: MachineSpec, n, kind: str, dtype: str) -> np.ndarray:
    """popnn NonLinearity1D over ``n`` elements of one tile [NL]."""
    if kind not in _NL_OP:
        raise ValueError(f"unknown non-linearity {kind!r}; choose from {NONLINEARITIES}")
    n = _arr(n)
    f = dtype == "float32"
    op_s, op_v = _NL_OP[kind][0:2] if f else _NL_OP[kind][2:4]
    vw = machine.vector_elems(dtype)
    vectors = n // vw
    rem = n % vw
    vpw = -(-vectors // machine.n_workers)
    work = _NL_WORKER_OVERHEAD + np.where(vpw > 0, 2 + op_s + (vpw - 1) * op_v + 1 + op_s, 0)
    work = work + 3 + np.where(rem > 0, 2 + op_s, 0)
    return np.where(n > 0, _NL_SUPERVISOR + machine.n_workers * work, 0).astype(np.int64)


def activation_cycles(machine: MachineSpec, n, kind: str, dtype: str) -> np.ndarray:
    """An activation over ``n`` elements of one tile: popnn NonLinearity1D for its kinds;
    SELU (Klambauer et al. 2017; popnn has none) as the popops element-wise ops computing
    ``lambda * (x if x > 0 else alpha * (exp(x) - 1))``: one UnaryOp1D exp [UN] and four
    BinaryOp1D-priced passes (x > 0, lambda * x, lambda * alpha * (e - 1) as one scaled op,
    then the select of the two branches, three operands)."""
    if kind == "selu":
        return (unary_cycles(machine, n, "exp", dtype) + 3 * binary_cycles(machine, n, dtype, 1)
                + binary_cycles(machine, n, dtype, 3)).astype(np.int64)
    return nonlinearity_cycles(machine, n, kind, dtype)


def unary_cycles(machine: MachineSpec, n, op: str, dtype: str) -> np.ndarray:
    """popops UnaryOp1D (exp, rsqrt, inverse, log, log1p) over ``n`` elements of one tile [UN]."""
    n = _arr(n)
    per_loop, elems = _UNARY[op, dtype]
    per_worker = -(-n // machine.n_workers)
    worker = (33 if op == "exp" else 17) + (-(-per_worker // elems)) * per_loop
    return np.where(n > 0, worker * machine.n_workers + 9 + cost.SUPERVISOR_OVERHEAD, 0).astype(np.int64)


def less_than_cycles(machine: MachineSpec, n, dtype: str) -> np.ndarray:
    """popops BinaryOp1D LESS_THAN over ``n`` elements of one tile [CMP]."""
    n = _arr(n)
    overhead, per_loop, elems = _LESS_THAN[dtype]
    per_worker = -(-n // machine.n_workers)
    worker = overhead + (-(-per_worker // elems)) * per_loop
    return np.where(n > 0, worker * machine.n_workers + cost.SUPERVISOR_OVERHEAD, 0).astype(np.int64)


def select_cycles(machine: MachineSpec, n) -> np.ndarray:
    """popops Select (``out = in3 ? in1 : in2``) over ``n`` elements of one tile, one vertex
    per worker [CMP]: ``5 + 6 + 5 x elements`` per worker, the same for every dtype."""
    n = _arr(n)
    per_worker = -(-n // machine.n_workers)
    return np.where(n > 0, machine.n_workers * (5 + 6 + 5 * per_worker), 0).astype(np.int64)


def binary_cycles(machine: MachineSpec, n, dtype: str, n_inputs: int = 2) -> np.ndarray:
    """popops BinaryOp1D (add, mul, ...) over ``n`` elements (ipukern.core.cost)."""
    return cost.elementwise_cycles_array(machine, _arr(n), dtype, n_inputs)


def copy_cycles(machine: MachineSpec, n, dtype: str) -> np.ndarray:
    """An on-tile copy streams like a one-input element-wise op."""
    return cost.elementwise_cycles_array(machine, _arr(n), dtype, 1)


def reduce_rows_cycles(machine: MachineSpec, rows, row_len: int, dtype: str,
                       out_dtype: str = "float32") -> np.ndarray:
    """Reduce ``rows`` rows of ``row_len`` elements each to one value per row on one tile:
    the popops reduce vertex with the row as the partials (``reduce_cycles``, depth =
    row length, one output per row), one vertex per row batch."""
    rows = _arr(rows)
    if row_len <= 1:
        return cost.cast_cycles_array(machine, rows, dtype, out_dtype)
    one = cost.reduce_cycles(machine, 1, int(row_len), dtype, out_dtype)
    return np.where(rows > 0, rows * one, 0).astype(np.int64)


def continuous_reduce_cycles(machine: MachineSpec, outputs, partials, dtype: str) -> np.ndarray:
    """One popops ContinuousReduce worker vertex [RED]: ``outputs`` outputs, each the sum
    of ``partials`` contiguous elements of ``dtype`` (ADD; the avg pool's scale is folded
    into the vertex at no cost, as the estimator says of every scaled reduce).

    The estimator's caller passes ``numOutputsM1`` as the output count, which would make
    a one-output vertex cost 17 cycles whatever its length; ipukern charges the count the
    code structure loops over (``numOutputsM1 + 1``), stated here as a deviation."""
    outputs, partials = np.broadcast_arrays(_arr(outputs), _arr(partials))
    acc = cost.REDUCE_ACCUMULATOR_BITS // (8 * DTYPES[canonical_dtype(dtype)].itemsize)
    per_loop = min(acc, machine.vector_elems(dtype))      # 64-bit data path [RED]
    cyc = outputs * (partials // per_loop) + np.where(partials & 1, 2, 0) + 12 * outputs + 10 + 7
    return np.where((outputs > 0) & (partials > 0), cyc, 0).astype(np.int64)


def tile_reduce_cycles(machine: MachineSpec, outputs, partials, dtype: str) -> np.ndarray:
    """Tile cycles of popops' first reduce stage on a tile holding ``outputs`` contiguous
    runs of ``partials`` elements (one run per output) [RED].

    The outputs are shared over the worker contexts; with fewer outputs than workers each
    run is split into ``min(workers // outputs, partials // 2)`` pieces (PopLibs splits a
    reduction while every piece keeps at least 2 rows), reduced in parallel, then a second
    ContinuousReduce sums each output's pieces (float32 partials). Tile cycles are
    ``n_workers x`` the busiest worker's (the convention of this module).
    """
    outputs, partials = np.broadcast_arrays(_arr(outputs), _arr(partials))
    nw = machine.n_workers
    split = np.where(outputs >= nw, 1,
                     np.maximum(1, np.minimum(nw // np.maximum(outputs, 1), partials // 2)))
    per_worker = -(-(outputs * split) // nw)          # pieces (one output each) per worker
    piece = -(-partials // split)
    first = nw * continuous_reduce_cycles(machine, per_worker, piece, dtype)
    second = np.where(split > 1, nw * continuous_reduce_cycles(machine, -(-outputs // nw), split,
                                                               "float32"), 0)
    return np.where((outputs > 0) & (partials > 0), first + second, 0).astype(np.int64)


def pool_cycles(machine: MachineSpec, planes, out_h: int, out_w: int, kh: int, kw: int,
                max_pool: bool) -> np.ndarray:
    """popnn pooling vertex for ``planes`` channel planes on one tile [POOL].

    Work is split over the workers by output rows; each output row runs one work-list
    entry per kernel tap (``kh * kw``), each an rpt loop over the ``out_w`` outputs with
    one channel per group (the planes layout has no channel grouping).
    """
    planes = _arr(planes)
    rows = planes * out_h
    rows_pw = -(-rows // machine.n_workers)
    inner = (4 if max_pool else 5) + 3 * out_w
    per_row = 13 + kh * kw * (20 + 1 + 2 + inner + 1 + 1 + 3) + 2
    setup = 4 + 2 + 2 + 7 + 2 + 2 + 5 + 1 + 2 + 2 + (1 if max_pool else 2) + 3 + 6 + 1
    worker = setup + rows_pw * per_row + 1
    return np.where(planes > 0, 7 + worker * machine.n_workers + 6, 0).astype(np.int64)


def loss_cycles(machine: MachineSpec, rows, classes: int, dtype: str) -> np.ndarray:
    """Softmax cross-entropy transform over ``rows`` rows of ``classes`` logits [LOSS]:
    one LossTransform vertex per row, on the worker contexts in turn."""
    rows = _arr(rows)
    f = dtype == "float32"
    size = int(classes)
    one = (5 + 6 + 5 + (0 if f else 1) + 2 + 1 + 9 * (size if f else size // 2)
           + (0 if f else (2 + (11 if size & 1 else 0))) + 1)
    return np.where(rows > 0, -(-rows // machine.n_workers) * one * machine.n_workers, 0).astype(np.int64)
