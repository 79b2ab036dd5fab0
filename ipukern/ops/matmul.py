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

Like PopLibs' planner (``ConvPlan.cpp``, swapOperands), the other orientation is planned
too: ``C^T = B^T A^T`` with B^T as the weights (N out-channels) and A's rows as the
streamed field (M columns). The one with the lower planned cycles runs (ties keep the
first); the profile's ``info["orientation"]`` says which. The transposed operands and
result are rearranged on the host, outside the simulated program.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..conv import ConvParams, ConvPlan
from ..core import Profile
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from .._checks import as_shape
from ._cache import as_array, cached_plan, cached_program, execute, profile_kw
from ._torch import like_input, shape_and_dtype, to_numpy

__all__ = ["MatmulRun", "matmul", "estimate_matmul", "matmul_conv", "matmul_convs", "matmul_conv_params"]


@dataclass
class MatmulRun:
    """Result of :func:`matmul`: ``output`` (NumPy matmul shape, input dtype), ``profile``
    and ``plan`` (a conv plan over groups=G, in-chans=K, out-chans=M, cols=N)."""

    output: Any
    profile: Profile
    plan: ConvPlan

    def __repr__(self) -> str:
        return (f"MatmulRun(output={type(self.output).__name__}{tuple(self.output.shape)} "
                f"{self.output.dtype}, plan={self.plan.method.label()!r}, profile={self.profile!r})")

    def _repr_html_(self) -> str:
        from html import escape
        return (f"<div><b>{escape(repr(self))}</b><br>plan: {escape(self.plan.describe())}"
                f"{self.profile._repr_html_()}</div>")


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


def _promote(shape_a: Any, shape_b: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """NumPy's 1-D rule: a 1-D a is (1, K), a 1-D b is (K, 1), and the added dimension is
    removed from the result. Returns the promoted shapes and the axes to drop from the output."""
    sa, sb = as_shape(shape_a, "shape of a", minimum=0), as_shape(shape_b, "shape of b", minimum=0)
    if not sa or not sb:
        raise ValueError(f"matmul operands must be at least 1-D (as in numpy.matmul), got "
                         f"shapes {sa} and {sb}")
    drop: tuple[int, ...] = ()
    if len(sb) == 1:
        sb, drop = sb + (1,), (-1,)
    if len(sa) == 1:
        sa, drop = (1,) + sa, (-2,) + drop
    return sa, sb, drop


def _layout(shape_a: Sequence[int], shape_b: Sequence[int]) -> _Layout:
    sa, sb = as_shape(shape_a, "shape of a", minimum=0), as_shape(shape_b, "shape of b", minimum=0)
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
    """The 1x1 grouped conv that computes ``a @ b`` for these shapes (direct orientation)."""
    return _conv_params(_layout(shape_a, shape_b), dtype, partials, False)


def matmul_convs(shape_a: Sequence[int], shape_b: Sequence[int], dtype: Any,
                 partials: Any = "float") -> list[ConvParams]:
    """The orientations :func:`matmul_conv` chooses between: ``C = A B`` (A as weights)
    and, when M != N, ``C^T = B^T A^T`` (B^T as weights)."""
    lay = _layout(shape_a, shape_b)
    out = [_conv_params(lay, dtype, partials, False)]
    if lay.M != lay.N:
        out.append(_conv_params(lay, dtype, partials, True))
    return out


def matmul_conv(shape_a: Sequence[int], shape_b: Sequence[int], dtype: Any, partials: Any = "float",
                *, machine: MachineSpec, method: str | None = None,
                amp: float | None = None) -> tuple[ConvParams, bool]:
    """The one matmul-as-conv rule: the 1x1 grouped conv that runs ``a @ b`` on ``machine``
    and whether it is the transposed orientation (the planner's cheaper of
    :func:`matmul_convs`; the same choice whatever the vertex). :func:`matmul`, the
    gradient passes and a network's backward all use it."""
    return _orient(_layout(shape_a, shape_b), dtype, partials, machine, method, amp)


#: the two ways to map C = A @ B onto a conv: A as the weights (field = N), or, transposed,
#: C^T = B^T A^T with B^T as the weights (field = M)
ORIENTATIONS = {"A@B": "1x1 conv: groups=G, in-chans=K, out-chans=M, cols=N (A as weights)",
                "(B^T A^T)^T": "1x1 conv: groups=G, in-chans=K, out-chans=N, cols=M "
                               "(B^T as weights)"}


def _conv_params(lay: _Layout, dtype: str, partials: Any, transposed: bool) -> ConvParams:
    out, cols = (lay.N, lay.M) if transposed else (lay.M, lay.N)
    return ConvParams(batch=1, in_channels=lay.G * lay.K, out_channels=lay.G * out, in_h=1,
                      in_w=cols, kernel_h=1, kernel_w=1, groups=lay.G, dtype=dtype,
                      partials=partials)


def _transposed_is_cheaper(direct: ConvParams, transposed: ConvParams, machine: MachineSpec,
                           method: str | None, amp: float | None = None) -> bool:
    """Whether the planner's estimate of the transposed orientation beats the direct one."""
    def cycles(p: ConvParams) -> float:
        try:
            return cached_plan(p, machine, False, method, amp).estimated_cycles
        except (ValueError, MemoryError):
            return float("inf")
    a, b = cycles(direct), cycles(transposed)
    if a == b == float("inf"):
        return False            # let the direct orientation raise its own error
    return b < a


def _orient(lay: _Layout, dtype: str, partials: Any, machine: MachineSpec,
            method: str | None, amp: float | None = None) -> tuple[ConvParams, bool]:
    """The conv to run and whether it is the transposed orientation (the same choice with or
    without a user vertex, so swapping the vertex never changes the plan)."""
    direct = _conv_params(lay, dtype, partials, False)
    if lay.M == lay.N:
        return direct, False
    transposed = _conv_params(lay, dtype, partials, True)
    if _transposed_is_cheaper(direct, transposed, machine, method, amp):
        return transposed, True
    return direct, False


def _named(profile: Profile, lay: _Layout, dtype: Any) -> Profile:
    """``profile`` called by the product, not by the 1x1 conv it is planned as."""
    profile.label = f"{f'{lay.G} x ' if lay.G > 1 else ''}({lay.M}x{lay.K}) @ ({lay.K}x{lay.N}) {dtype}"
    return profile


def _profile(prog, lay: _Layout, transposed: bool) -> dict[str, Any]:
    kw = profile_kw(prog, "matmul")
    kw["info"]["layer"] = f"G{lay.G} ({lay.M}x{lay.K}) @ ({lay.K}x{lay.N}) {prog.plan.params.dtype}"
    orientation = "(B^T A^T)^T" if transposed else "A@B"
    kw["info"]["orientation"] = orientation
    kw["info"]["mapping"] = ORIENTATIONS[orientation]
    return kw


def matmul(a: np.ndarray, b: np.ndarray, *, machine: MachineSpec | str = GC200,
           partials: Any = "float", method: str | None = None, vertex: Any = None,
           available_memory_proportion: float | None = None) -> MatmulRun:
    """``a @ b`` (NumPy semantics) computed tile by tile on a simulated IPU.

    Parameters
    ----------
    a : ndarray or torch.Tensor of shape (..., M, K) or (K,), float32 or float16
    b : ndarray or torch.Tensor of shape (..., K, N) or (K,), same dtype
        Leading batch dimensions broadcast as in ``numpy.matmul``; each batch element is an
        independent matmul (a conv group on the IPU). A 1-D operand is promoted as NumPy
        does (a vector times a matrix, a matrix times a vector, or a dot product) and the
        added dimension is removed from the result. torch tensors are detached; the output
        is then a torch tensor.
    machine : MachineSpec or preset name
    partials : {"float", "half"}
        Accumulation dtype (fp16 inputs only may use "half").
    method : str, optional
        Force a vertex method ("AMP", "HMAC", ...).
    vertex : TileFunction, optional
        A user tile function ``f(a, b, c)`` (see :mod:`ipukern.graph.tilefn`) that replaces the
        built-in per-tile matmul vertex: on every tile it gets the tile's block of the
        weights operand ``a`` (m, k), of the streamed operand ``b`` (k, n) and its fp32
        partials ``c`` (m, n) to overwrite with ``a @ b``. The weights operand is A, or B^T
        when the transposed orientation runs (``profile.info["orientation"]``; then b is
        A^T and c is C^T). The plan, exchanges and reductions stay the library's; the
        profile marks the compute as a user estimate. float32 only, and only plans with
        one batch element per tile.
    available_memory_proportion : float in (0, 1], optional
        PopLibs' ``availableMemoryProportion`` (the share of each tile's bytes the
        matmul's temporary buffers may use when planning; None: PopLibs' default 0.6; see
        :func:`ipukern.conv.plan_conv`).

    Returns
    -------
    MatmulRun
        ``output`` of shape (..., M, N) in the input dtype, ``profile``, ``plan``.
    """
    torch_in = (a, b)
    a = as_array(to_numpy(a, "a"), "a")
    b = as_array(to_numpy(b, "b"), "b")
    sa, sb, drop = _promote(a.shape, b.shape)
    a, b = a.reshape(sa), b.reshape(sb)
    dtype = canonical_dtype(a.dtype)
    if canonical_dtype(b.dtype) != dtype:
        raise TypeError(f"a is {a.dtype} but b is {b.dtype}: both must have the same dtype")
    lay = _layout(a.shape, b.shape)
    machine = get_machine(machine)
    amp = available_memory_proportion
    params, transposed = _orient(lay, dtype, partials, machine, method, amp)
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
    if transposed:
        # C^T = B^T A^T per group: B^T (G*N, K) are the weights, A^T (G*K, M) the input
        a3, b3 = w.reshape(lay.G, lay.M, lay.K), x.reshape(lay.G, lay.K, lay.N)
        w = np.ascontiguousarray(b3.transpose(0, 2, 1)).reshape(lay.G * lay.N, lay.K, 1, 1)
        x = np.ascontiguousarray(a3.transpose(0, 2, 1)).reshape(1, lay.G * lay.K, 1, lay.M)
    prog = cached_program(params, machine, False, method, vertex, amp)
    out, profile = execute(prog, x, w, None, _profile(prog, lay, transposed))
    if transposed:
        out = out.reshape(lay.G, lay.N, lay.M).transpose(0, 2, 1)
    if lay.mode == "fold_b":
        g = lay.N // b.shape[-1]
        out = out.reshape(lay.M, g, -1).transpose(1, 0, 2)
    shape = [n for i, n in enumerate(lay.out_shape) if i - len(lay.out_shape) not in drop]
    out = np.ascontiguousarray(out.reshape(lay.out_shape)).reshape(shape)
    return MatmulRun(like_input(out, *torch_in), _named(profile, lay, params.dtype), prog.plan)


def estimate_matmul(shape_a: Any, shape_b: Any, *, dtype: Any = None,
                    machine: MachineSpec | str = GC200, partials: Any = "float",
                    method: str | None = None,
                    available_memory_proportion: float | None = None) -> Profile:
    """The cycles :func:`matmul` would report, without touching data (any size the tiles
    can hold, e.g. BERT-Large's (8192 x 1024) @ (1024 x 4096) feed-forward in fp16).

    Shapes may be tuples, ``torch.Size`` or tensors (NumPy, torch, meta); 1-D shapes are
    promoted as in :func:`matmul`. ``dtype`` defaults to ``shape_a``'s dtype when it is a
    tensor, else float16. ``available_memory_proportion`` as in :func:`matmul`."""
    shape_a, a_dtype = shape_and_dtype(shape_a)
    shape_b, _ = shape_and_dtype(shape_b)
    if dtype is None:
        dtype = a_dtype if a_dtype is not None else "float16"
    shape_a, shape_b, _ = _promote(shape_a, shape_b)
    lay = _layout(shape_a, shape_b)
    machine = get_machine(machine)
    amp = available_memory_proportion
    params, transposed = _orient(lay, canonical_dtype(dtype), partials, machine, method, amp)
    prog = cached_program(params, machine, False, method, amp=amp)
    return _named(prog.device.run(prog.program, "estimate", **_profile(prog, lay, transposed)), lay,
                  prog.plan.params.dtype)
