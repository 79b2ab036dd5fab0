"""Matmul and batched/grouped matmul on the simulated IPU, as a 1x1 grouped convolution.

PopLibs expresses every matmul as a convolution (reference/poplibs-planner.md §1.6); so does
ipukern, reusing the conv planner, layout and kernels. For ``C[g] = A[g] @ B[g]`` with
A of shape (G, M, K) and B of shape (G, K, N):

- the conv *input* is B viewed as (1, G*K, 1, N): K input channels per group, N positions;
- the conv *weights* are A viewed as (G*M, K, 1, 1): M output channels per group;
- the conv *output* (1, G*M, 1, N) is C viewed as (G, M, N).

No data is copied to make these views. In the plan, the conv axes therefore read:
groups = G, in-chans = K (a split here is a K-split with a partial-sum reduction),
out-chans = M, cols = N.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..conv.params import ConvParams
from ..conv.planner import ConvPlan
from ..core.profile import Profile
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from ._cache import as_array, cached_program, execute, profile_kw

__all__ = ["MatmulRun", "matmul", "estimate_matmul", "matmul_conv_params"]


@dataclass
class MatmulRun:
    """Result of :func:`matmul`: ``output`` (NumPy matmul shape, input dtype), ``profile``
    and ``plan`` (a conv plan over groups=G, in-chans=K, out-chans=M, cols=N)."""

    output: np.ndarray
    profile: Profile
    plan: ConvPlan


@dataclass(frozen=True)
class _Layout:
    """How NumPy matmul shapes map onto one grouped matmul (G, M, K) @ (G, K, N)."""

    G: int
    M: int
    K: int
    N: int
    out_shape: tuple[int, ...]
    #: "groups": batch dims broadcast to G groups; "fold_a": a's batch folded into M;
    #: "fold_b": b's batch folded into N (b is transposed on the host)
    mode: str


def _layout(shape_a: Sequence[int], shape_b: Sequence[int]) -> _Layout:
    sa, sb = tuple(int(s) for s in shape_a), tuple(int(s) for s in shape_b)
    if len(sa) < 2 or len(sb) < 2:
        raise ValueError(f"matmul needs operands of rank >= 2 ((..., M, K) @ (..., K, N)), "
                         f"got shapes {sa} and {sb}")
    if any(s < 1 for s in sa + sb):
        raise ValueError(f"matmul operands must have non-empty dimensions, got {sa} and {sb}")
    (M, K), (K2, N) = sa[-2:], sb[-2:]
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {sa} (K={K}) but b is {sb} (K={K2})")
    ba, bb = sa[:-2], sb[:-2]
    try:
        batch = np.broadcast_shapes(ba, bb)
    except ValueError:
        raise ValueError(f"batch dimensions {ba} and {bb} do not broadcast") from None
    G = int(np.prod(batch, dtype=np.int64)) if batch else 1
    out_shape = tuple(batch) + (M, N)
    if not bb or int(np.prod(bb)) == 1 and G > 1 and ba == batch:
        return _Layout(1, G * M, K, N, out_shape, "fold_a")
    if not ba or int(np.prod(ba)) == 1 and G > 1 and bb == batch:
        return _Layout(1, M, K, G * N, out_shape, "fold_b")
    return _Layout(G, M, K, N, out_shape, "groups")


def matmul_conv_params(shape_a: Sequence[int], shape_b: Sequence[int], dtype: Any,
                       partials: Any = "float") -> ConvParams:
    """The 1x1 grouped conv that computes ``a @ b`` for these shapes."""
    lay = _layout(shape_a, shape_b)
    return ConvParams(batch=1, in_channels=lay.G * lay.K, out_channels=lay.G * lay.M, in_h=1,
                      in_w=lay.N, kernel_h=1, kernel_w=1, groups=lay.G, dtype=dtype,
                      partials=partials)


def _profile(prog, lay: _Layout) -> dict[str, Any]:
    kw = profile_kw(prog, "matmul")
    kw["info"]["layer"] = f"G{lay.G} ({lay.M}x{lay.K}) @ ({lay.K}x{lay.N}) {prog.plan.params.dtype}"
    kw["info"]["mapping"] = "1x1 conv: groups=G, in-chans=K, out-chans=M, cols=N"
    return kw


def matmul(a: np.ndarray, b: np.ndarray, *, machine: MachineSpec | str = GC200,
           partials: Any = "float", method: str | None = None, vertex: Any = None) -> MatmulRun:
    """``a @ b`` (NumPy semantics) computed tile by tile on a simulated IPU.

    Parameters
    ----------
    a : ndarray of shape (..., M, K), float32 or float16
    b : ndarray of shape (..., K, N), same dtype
        Leading batch dimensions broadcast as in ``numpy.matmul``; each batch element is an
        independent matmul (a conv group on the IPU).
    machine : MachineSpec or preset name
    partials : {"float", "half"}
        Accumulation dtype (fp16 inputs only may use "half").
    method : str, optional
        Force a vertex method ("AMP", "HMAC", ...).
    vertex : TileFunction, optional
        A user tile function ``f(a, b, c)`` (see :mod:`ipukern.graph.tilefn`) that replaces the
        built-in per-tile matmul vertex: on every tile it gets the tile's A block (m, k),
        B block (k, n) and its fp32 partials (m, n) to overwrite. The plan, exchanges and
        reductions stay the library's; the profile marks the compute as a user estimate.
        float32 only, and only plans with one batch element per tile.

    Returns
    -------
    MatmulRun
        ``output`` of shape (..., M, N) in the input dtype, ``profile``, ``plan``.
    """
    a = as_array(a, "a")
    b = as_array(b, "b")
    dtype = canonical_dtype(a.dtype)
    if canonical_dtype(b.dtype) != dtype:
        raise TypeError(f"a is {a.dtype} but b is {b.dtype}: both must have the same dtype")
    lay = _layout(a.shape, b.shape)
    params = matmul_conv_params(a.shape, b.shape, dtype, partials)
    if lay.mode == "fold_a":
        w = np.ascontiguousarray(a).reshape(lay.M, lay.K, 1, 1)
        x = np.ascontiguousarray(b).reshape(1, lay.K, 1, lay.N)
    elif lay.mode == "fold_b":
        w = np.ascontiguousarray(a).reshape(lay.M, lay.K, 1, 1)
        # (G, K, N) -> (K, G*N): the groups become extra columns
        g = lay.N // b.shape[-1]
        bt = np.ascontiguousarray(b.reshape(g, lay.K, -1).transpose(1, 0, 2))
        x = bt.reshape(1, lay.K, 1, lay.N)
    else:
        batch = lay.out_shape[:-2]
        ab = np.broadcast_to(a, batch + a.shape[-2:])
        bb = np.broadcast_to(b, batch + b.shape[-2:])
        w = np.ascontiguousarray(ab).reshape(lay.G * lay.M, lay.K, 1, 1)
        x = np.ascontiguousarray(bb).reshape(1, lay.G * lay.K, 1, lay.N)
    prog = cached_program(params, get_machine(machine), False, method, vertex)
    out, profile = execute(prog, x, w, None, _profile(prog, lay))
    if lay.mode == "fold_b":
        g = lay.N // b.shape[-1]
        out = out.reshape(lay.M, g, -1).transpose(1, 0, 2)
    return MatmulRun(output=np.ascontiguousarray(out.reshape(lay.out_shape)), profile=profile,
                     plan=prog.plan)


def estimate_matmul(shape_a: Sequence[int], shape_b: Sequence[int], *, dtype: Any = "float16",
                    machine: MachineSpec | str = GC200, partials: Any = "float",
                    method: str | None = None) -> Profile:
    """The cycles :func:`matmul` would report, without touching data (any size the tiles
    can hold, e.g. BERT-Large's (8192 x 1024) @ (1024 x 4096) feed-forward in fp16)."""
    lay = _layout(shape_a, shape_b)
    params = matmul_conv_params(shape_a, shape_b, canonical_dtype(dtype), partials)
    prog = cached_program(params, get_machine(machine), False, method)
    return prog.device.run(prog.program, "estimate", **_profile(prog, lay))
