"""The backward passes of matmul on the simulated IPU.

For ``C = A @ B`` (NumPy semantics, A (..., M, K), B (..., K, N)) PopLibs plans the FC
passes separately (reference/poplibs-planner.md §1.6): backward data
``dA = dC @ Bᵀ`` (K and N swap roles) and weight update ``dB = Aᵀ @ dC`` (the M rows become
the reduction). Each is run as its own planned :func:`~ipukern.matmul`. Batch dimensions
along which an operand was broadcast are summed: they are folded into the pass's reduction
dimension (so the sum happens on the tiles, in the same accumulation), never on the host.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core import Profile
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec
from ._cache import as_array
from .matmul import MatmulRun, _layout, estimate_matmul, matmul

__all__ = [
    "matmul_pass_shapes",
    "estimate_matmul_backward_data",
    "estimate_matmul_backward_weight",
    "matmul_backward_data",
    "matmul_backward_weight",
]


def _grad_plan(shape_a, shape_b, which: str):
    """Shapes of the pass product and how to build its operands.

    Returns (kept batch shape, reduced batch axes, result operand shape). The pass for
    operand ``which`` ("a" or "b") computes, per kept batch index, a product whose
    contraction runs over the reduced batch axes and the other matrix axis.
    """
    lay = _layout(shape_a, shape_b)
    batch = lay.out_shape[:-2]
    target = tuple(shape_a if which == "a" else shape_b)
    tb = (1,) * (len(batch) - (len(target) - 2)) + target[:-2]
    reduced = tuple(i for i, (b, t) in enumerate(zip(batch, tb)) if t == 1 and b > 1)
    kept = tuple(i for i in range(len(batch)) if i not in reduced)
    return batch, kept, reduced, target


def _fold_shape(shape, batch, kept, reduced, contract_last: bool) -> tuple[int, ...]:
    """Shape :func:`_fold` returns for an operand of ``shape``."""
    r, c = shape[-2:]
    if not reduced and int(np.prod(shape[:-2], dtype=np.int64)) == 1:
        return (r, c)       # un-batched operand: matmul broadcasts it without copies
    red = int(np.prod([batch[i] for i in reduced], dtype=np.int64))
    kb = tuple(batch[i] for i in kept)
    return kb + ((r, red * c) if contract_last else (red * r, c))


def _fold(x: np.ndarray, batch, kept, reduced, contract_last: bool) -> np.ndarray:
    """Broadcast ``x`` (..., r, c) to ``batch`` and move the reduced batch axes into the
    contraction axis: the last axis if ``contract_last`` else the second-to-last."""
    shape = _fold_shape(x.shape, batch, kept, reduced, contract_last)
    if len(shape) == 2 and not reduced:
        return x.reshape(shape)
    x = np.broadcast_to(x, tuple(batch) + x.shape[-2:])
    nb = len(batch)
    if contract_last:   # (kept, r, reduced, c)
        x = x.transpose(kept + (nb,) + reduced + (nb + 1,))
    else:               # (kept, reduced, r, c)
        x = x.transpose(kept + reduced + (nb, nb + 1))
    return np.ascontiguousarray(x).reshape(shape)


def _finish(out: np.ndarray, target: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(out.reshape(target))


def _check(gy: np.ndarray, shape_a, shape_b) -> None:
    out = _layout(shape_a, shape_b).out_shape
    if gy.shape != out:
        raise ValueError(f"grad_output must have the product's shape {out}, got {gy.shape}")


def _relabel(prof: Profile, op: str, pass_: str) -> Profile:
    prof.info["op"] = op
    prof.info["pass"] = pass_
    return prof


def _operands(grad_output, other, name: str, shape):
    gy = as_array(grad_output, "grad_output")
    other = as_array(other, name)
    if canonical_dtype(gy.dtype) != canonical_dtype(other.dtype):
        raise TypeError(f"grad_output is {gy.dtype} but {name} is {other.dtype}: both must have "
                        "the same dtype")
    return gy, other, tuple(int(s) for s in shape)


def _run(lhs, rhs, target, op, pass_, machine, partials, method) -> MatmulRun:
    run = matmul(lhs, rhs, machine=machine, partials=partials, method=method)
    _relabel(run.profile, op, pass_)
    return MatmulRun(output=_finish(run.output, target), profile=run.profile, plan=run.plan)


def matmul_backward_data(grad_output: np.ndarray, a_shape: Sequence[int], b: np.ndarray, *,
                         machine: MachineSpec | str = GC200, partials: Any = "float",
                         method: str | None = None) -> MatmulRun:
    """dL/dA of ``A @ B``: ``grad_output @ Bᵀ``, summed over A's broadcast batch axes.

    Parameters
    ----------
    grad_output : ndarray (..., M, N)
    a_shape : shape of A (..., M, K)
    b : ndarray (..., K, N)
    machine, partials, method : as for :func:`~ipukern.matmul`

    Returns
    -------
    MatmulRun
        ``output`` of shape ``a_shape``; ``profile.info["pass"] == "bwd"``.
    """
    gy, b, a_shape = _operands(grad_output, b, "b", a_shape)
    _check(gy, a_shape, b.shape)
    batch, kept, reduced, target = _grad_plan(a_shape, b.shape, "a")
    lhs = _fold(gy, batch, kept, reduced, contract_last=True)                    # (kept, M, red*N)
    rhs = _fold(np.swapaxes(b, -1, -2), batch, kept, reduced, contract_last=False)  # (kept, red*N, K)
    return _run(lhs, rhs, target, "matmul_backward_data", "bwd", machine, partials, method)


def matmul_backward_weight(grad_output: np.ndarray, a: np.ndarray, b_shape: Sequence[int], *,
                           machine: MachineSpec | str = GC200, partials: Any = "float",
                           method: str | None = None) -> MatmulRun:
    """dL/dB of ``A @ B``: ``Aᵀ @ grad_output``, summed over B's broadcast batch axes
    (e.g. a linear layer's weight gradient sums over every leading axis of A).

    Returns
    -------
    MatmulRun
        ``output`` of shape ``b_shape``; ``profile.info["pass"] == "wu"``.
    """
    gy, a, b_shape = _operands(grad_output, a, "a", b_shape)
    _check(gy, a.shape, b_shape)
    batch, kept, reduced, target = _grad_plan(a.shape, b_shape, "b")
    lhs = _fold(np.swapaxes(a, -1, -2), batch, kept, reduced, contract_last=True)  # (kept, K, red*M)
    rhs = _fold(gy, batch, kept, reduced, contract_last=False)                     # (kept, red*M, N)
    return _run(lhs, rhs, target, "matmul_backward_weight", "wu", machine, partials, method)


def matmul_pass_shapes(shape_a, shape_b, which: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (lhs, rhs) shapes of the pass product, exactly as the execute path builds them."""
    batch, kept, reduced, _ = _grad_plan(shape_a, shape_b, which)
    sa, sb = tuple(shape_a), tuple(shape_b)
    lay = _layout(sa, sb)
    gy = lay.out_shape[:-2] + lay.out_shape[-2:]
    if which == "a":
        bt = sb[:-2] + (sb[-1], sb[-2])
        return (_fold_shape(gy, batch, kept, reduced, True),
                _fold_shape(bt, batch, kept, reduced, False))
    at = sa[:-2] + (sa[-1], sa[-2])
    return (_fold_shape(at, batch, kept, reduced, True),
            _fold_shape(gy, batch, kept, reduced, False))


def estimate_matmul_backward_data(shape_a: Sequence[int], shape_b: Sequence[int], *,
                                  dtype: Any = "float16", machine: MachineSpec | str = GC200,
                                  partials: Any = "float", method: str | None = None) -> Profile:
    """The cycles :func:`matmul_backward_data` reports for ``A @ B`` of these shapes."""
    la, lb = matmul_pass_shapes(shape_a, shape_b, "a")
    prof = estimate_matmul(la, lb, dtype=dtype, machine=machine, partials=partials, method=method)
    return _relabel(prof, "matmul_backward_data", "bwd")


def estimate_matmul_backward_weight(shape_a: Sequence[int], shape_b: Sequence[int], *,
                                    dtype: Any = "float16", machine: MachineSpec | str = GC200,
                                    partials: Any = "float", method: str | None = None) -> Profile:
    """The cycles :func:`matmul_backward_weight` reports for ``A @ B`` of these shapes."""
    la, lb = matmul_pass_shapes(shape_a, shape_b, "b")
    prof = estimate_matmul(la, lb, dtype=dtype, machine=machine, partials=partials, method=method)
    return _relabel(prof, "matmul_backward_weight", "wu")
