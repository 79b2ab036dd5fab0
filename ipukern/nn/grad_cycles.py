"""Cycle models of the backward (gradient) vertices of the network's vector ops.

Source: graphcore/poplibs ``lib/popnn/popnnCycleEstimators.cpp`` (public on GitHub):

- ``NonLinearityGrad``: 5 cycles per vertex, then per region 5 (sigmoid, tanh) or 2 + 7
  (ReLU: run instruction + vertex overhead) plus 3 cycles per 64-bit vector;
- ``MaxPoolingGrad``: 10 per vertex, per region ``5 + vectors * (5 + 3 * window)``;
- ``SumPoolingGrad``: 10 per vertex, per region ``2 + vectors * (4 + window)``.

Stated extensions (not in that estimator): ReLU6's derivative is ReLU's (one more compare
folds into the same 3-cycle vector loop); SiLU and GELU derivatives need the function
itself, so each vector also pays the forward non-linearity's per-vector op cycles
(``getNonLinearityOpCycles``, :mod:`ipukern.nn.cycles`). Work is split over the worker
contexts, one vertex per worker, one region per worker's share; tile cycles are
``n_workers x`` the busiest worker's (the convention of :mod:`ipukern.nn.cycles`).
"""
from __future__ import annotations

import numpy as np

from ..machine import MachineSpec
from .cycles import _NL_OP

__all__ = ["nonlinearity_grad_cycles", "pool_grad_cycles"]


def nonlinearity_grad_cycles(machine: MachineSpec, n, kind: str, dtype: str) -> np.ndarray:
    """popnn NonLinearityGrad over ``n`` elements per tile (see module doc)."""
    n = np.asarray(n, dtype=np.int64)
    vw = machine.vector_elems(dtype)
    vectors = -(-n // vw)
    vec_pw = -(-vectors // machine.n_workers)
    region = 9 if kind in ("relu", "relu6") else 5
    per_vec = 3 + (_NL_OP[kind][1 if dtype == "float32" else 3] if kind in ("silu", "gelu") else 0)
    worker = 5 + region + vec_pw * per_vec
    return np.where(n > 0, machine.n_workers * worker, 0).astype(np.int64)


def pool_grad_cycles(machine: MachineSpec, planes, h: int, w: int, kh: int, kw: int, sh: int, sw: int,
                     max_pool: bool, dtype: str) -> np.ndarray:
    """popnn Max/SumPoolingGrad writing ``planes`` input-gradient planes of h x w per tile:
    one region per input row; ``window`` = outputs whose window covers an input element."""
    planes = np.asarray(planes, dtype=np.int64)
    vecs = -(-int(w) // machine.vector_elems(dtype))
    window = -(-kh // sh) * -(-kw // sw)
    rows_pw = -(-(planes * h) // machine.n_workers)
    per_row = 5 + vecs * (5 + 3 * window) if max_pool else 2 + vecs * (4 + window)
    return np.where(planes > 0, machine.n_workers * (10 + rows_pw * per_row), 0).astype(np.int64)
