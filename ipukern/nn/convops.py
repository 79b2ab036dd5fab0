"""Convolutions and matmuls of a network: the conv planner's programs as network ops.

Each conv or matmul of a network is planned by :func:`ipukern.conv.plan_conv` and
built by :func:`ipukern.conv.build_conv_program` exactly as :func:`ipukern.conv2d`
does; the op's wanted input layout is the planner's own (the conv input tensor inside the
tiles' windows, NHCW order), so the producer's output is rearranged straight into it and
the conv's first exchange adds the halos. Programs are cached per shape: layers of equal
shape share one plan and one program.

Execute mode: the input arrives by a tile-to-tile rearrangement into the program's
memory, the layer's weights are placed into their home tiles (the model keeps them
resident; the simulator re-places them because layers of equal shape share one built
program), the program runs, and the output is kept as a :class:`Resident` in its mapping.
The program's memory is an arena leased for the run from a pool its network's other convs
share (:mod:`ipukern.nn.host.arenas`): nothing in it outlives the run.
"""
from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from .. import _memo
from ..conv import (AVAILABLE_MEMORY_PROPORTION, MAX_INPUT_OWNERS, ConvParams, ConvProgram, bias_codelets,
                    build_conv_program, plan_conv, temp_bytes_bound)
from ..conv.host import BuiltPass, take, take_built
from ..ops import matmul_conv_params
from ..core import run_program
from ..core.tensor import LazyTileMapping
from ..dtypes import DTYPES
from ..machine import MachineSpec
from ..core import CopyTable
from .arena_out import ArenaOutput, leased, rearrange_into
from .layout import Layout, Resident, lazy_layout
from .ops import OpPlan, affine_plan, fold_weight

__all__ = ["built_keys", "conv_plan", "conv_program", "matmul_params", "matmul_plan",
           "pass_program", "reuse_across_proportions"]

#: conv programs kept, by (params, machine, bias, resident input, amp): layers of equal
#: shape share one. A compiled network's steps hold their own programs, so a bound here only
#: limits the sharing (an estimate of ResNet-50 training builds about 150).
PROGRAM_CACHE_SIZE = 1024
_PROGRAMS = _memo.register(_memo.LruCache("nn.conv_programs", maxsize=PROGRAM_CACHE_SIZE, **_memo.HOST_BOUND),
                           per_batch=True)
#: activations a conv's bias pass can apply in execute mode (add_bias's ``act`` codes)
_FUSED_ACTS = {"relu": 1, "relu6": 2}
#: passes only costed (never executed from here), as a planning worker built them
_PASSES = _memo.register(_memo.LruCache("nn.conv_passes", maxsize=PROGRAM_CACHE_SIZE),
                         per_batch=True)


#: inside :func:`reuse_across_proportions`: (kind, params, machine, bias, resident input) ->
#: {amp: the program ("program") or costed pass ("pass") used at that proportion}
_SEEN: ContextVar[dict | None] = ContextVar("ipukern_nn_reuse_across_proportions", default=None)


@contextmanager
def reuse_across_proportions() -> Iterator[None]:
    """A scope in which a conv pass planned at one availableMemoryProportion is reused at a
    smaller one when its temporary bytes meet the smaller bound (:func:`ipukern.tune`'s
    shortcut; its results are dropped with the scope's caches, see there).

    Why it is nearly always the plan the planner would choose: the planner keeps the fastest
    plan whose temporary bytes meet the bound, so a plan that won among more candidates and
    meets the smaller bound also wins among fewer. Not always: within 0.5% of the fastest it
    prefers simpler plans, and a split that needed more serial slices under the smaller bound
    is a new candidate (:mod:`ipukern.conv.search`). So it is a scoped shortcut, not the
    planner: only the plan of the nearest larger proportion used in the scope is considered,
    only when that plan met its own bound, and the plan keeps the bound it was chosen under."""
    token = _SEEN.set({})
    try:
        yield
    finally:
        _SEEN.reset(token)


def _amp_value(amp: float | None) -> float:
    return AVAILABLE_MEMORY_PROPORTION if amp is None else amp


def _reused(kind: str, key: tuple) -> Any:
    """Inside :func:`reuse_across_proportions`: the ``kind`` of the nearest larger
    proportion if its plan met that bound and meets this one, else None."""
    seen = _SEEN.get()
    if seen is None:
        return None
    mine = _amp_value(key[4])
    used = seen.get((kind, *key[:4]), {})
    larger = [a for a in used if _amp_value(a) > mine]
    if not larger:
        return None
    got = used[min(larger, key=_amp_value)]
    plan = got.plan
    if plan.temp_bytes_bound and plan.temp_bytes <= temp_bytes_bound(key[1], key[4]):
        return got
    return None


def _note(kind: str, key: tuple, got: Any) -> Any:
    """Record what ``key`` used (inside :func:`reuse_across_proportions`)."""
    seen = _SEEN.get()
    if seen is not None:
        seen.setdefault((kind, *key[:4]), {})[key[4]] = got
    return got


def built_keys() -> set[tuple]:
    """The (params, machine, bias, amp) of every conv pass whose program or costed pass is
    cached (a planning worker need not plan them)."""
    return {(k[0], k[1], k[2], k[4]) for k in _PROGRAMS.keys() + _PASSES.keys()}


def conv_program(params: ConvParams, machine: MachineSpec, bias: bool, *,
                 resident_input: bool = False, amp: float | None = None) -> ConvProgram:
    """The planned and built program for these conv parameters (cached); ``amp``: the
    planner's ``available_memory_proportion`` (None: PopLibs' default).

    ``resident_input``: the conv's *input* operand is a parameter that stays in tile memory
    (a Linear layer's weight, which its matmul plans as the conv input). Its home is then
    spread over every tile sharing a window, as PopLibs lays out a matmul operand over all
    the tiles of its plan (``createMatMulInputRHS`` -> ``createInput``), instead of over at
    most :data:`~ipukern.conv.layout.MAX_INPUT_OWNERS` of them: an activation's home lives
    for one layer, a weight's for the whole program, and every layer of the same shape
    shares one plan, so the few owners of each block would hold all those layers' weights.
    """
    key = (params, machine, bias, resident_input, amp)
    prog = _reused("program", key)    # first: what a scope reuses must not depend on the cache
    if prog is None:
        prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _PROGRAMS.setdefault(key, _build(params, machine, bias, resident_input, amp))
    return _note("program", key, prog)


def _build(params: ConvParams, machine: MachineSpec, bias: bool, resident_input: bool,
           amp: float | None) -> ConvProgram:
    plan = take(params, machine, bias, amp)     # planned ahead by a worker, if any
    if plan is None:
        plan = plan_conv(params, machine, bias=bias, available_memory_proportion=amp)
    owners = plan.split.out_chans if resident_input else MAX_INPUT_OWNERS
    return build_conv_program(plan, input_owners=owners)


def pass_program(params: ConvParams, machine: MachineSpec, amp: float | None = None) -> BuiltPass:
    """The plan, superstep records and per-tile memory of a conv pass (no bias) that is
    only costed, such as a network's backward-data or weight-update conv: from this
    module's program cache, from a planning worker that built it
    (:mod:`ipukern.conv.host.prefetch`), or planned and built now. The records and bytes are the
    same whichever built it.

    A pass built here is kept as its :class:`BuiltPass` only, as a worker's is, not as a
    program: nothing executes it, and its copy tables (0.8 M copies over a ResNet-50
    training estimate at batch 16) would otherwise stay alive in the program cache, so
    later builds grew the heap into fresh pages (page faults) instead of reusing them."""
    key = (params, machine, False, False, amp)
    got = _reused("pass", key)        # first: what a scope reuses must not depend on the cache
    if got is not None:
        return _note("pass", key, got)
    prog = _PROGRAMS.get(key)
    built = _PASSES.get(key) if prog is None else None
    if prog is None and built is None:
        built = take_built(params, machine, amp)
        if built is None:
            p = _build(params, machine, False, False, amp)
            built = BuiltPass(p.plan, tuple(p.program.records), p.device.memory.used)
        built = _PASSES.setdefault(key, built)
    if built is None:
        built = BuiltPass(prog.plan, tuple(prog.program.records), prog.device.memory.used)
    return _note("pass", key, built)


def _read_output(prog: ConvProgram, out: Layout, nt: int, arena: np.ndarray) -> Resident:
    """The program's output, copied out of the ``arena`` its run used."""
    tab = out.__dict__.get("_read_table")
    if tab is None or tab[0] is not prog:
        y = prog.y
        tab = (prog, CopyTable(y.mapping.tile, y.offset, y.mapping.tile, out.packed_offsets,
                               y.mapping.count * y.itemsize))
        out.__dict__["_read_table"] = tab
    res = Resident(out, nt)
    tab[1].run(res.data, arena)
    return res


def _write_weight(dev, w_tensor, prm: dict[str, Any], wdt: np.dtype) -> None:
    """Place a conv's weights; ``prm["weight_scale"]`` (a folded batch norm, see
    ``Step.params(defer_fold=True)``) scales them per output channel as they are placed
    (float32: :meth:`~ipukern.Device.write_scaled`, no host copy of the scaled weights),
    the bits of :func:`~ipukern.nn.ops.fold_weight` then the write."""
    w = np.asarray(prm["weight"])
    s = prm.get("weight_scale")
    if s is not None and wdt == np.float32 and w.dtype == np.float32:
        dev.write_scaled(w_tensor, w, s)
        return
    if s is not None:
        w = fold_weight(w, np.asarray(s, np.float64))
    dev.write(w_tensor, np.asarray(w, dtype=wdt))


def _home_bytes(t, nt: int) -> np.ndarray:
    return t.mapping.elems_per_tile(nt) * t.itemsize


def conv_plan(machine: MachineSpec, in_shape: Sequence[int], weight_shape: Sequence[int], *,
              stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
              dtype: str = "float16", partials: str = "float32", bias: bool = False,
              amp: float | None = None) -> OpPlan:
    """A conv2d layer pass (PyTorch semantics) as a network op; ``amp`` as for
    :func:`conv_program`."""
    params = ConvParams.from_shapes(in_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    prog = conv_program(params, machine, bias, amp=amp)
    nt = machine.n_tiles
    xm = prog.input_mapping()
    if isinstance(xm, LazyTileMapping):       # built only if execution reads it
        want = lazy_layout(tuple(in_shape), dtype, xm, (0, 2, 1, 3), lambda: prog.x.offset)
    else:
        want = Layout(tuple(in_shape), dtype, xm, perm=(0, 2, 1, 3), offsets=prog.x.offset)
    out = Layout(params.output_shape, dtype, prog.output_mapping())
    wbytes = _home_bytes(prog.w, nt) + (_home_bytes(prog.b, nt) if bias else 0)
    dev = prog.device
    wdt = DTYPES[dtype]
    fusable = bias and dtype == "float32"

    def run(srcs, rearrs, prm, act=None, keep=False):
        """``act`` ("relu"/"relu6", when ``info["fuses"]`` lists it): the network's next
        activation applied by the bias pass (host fusion: same bits, same program).
        ``keep``: return the output as an :class:`~ipukern.nn.arena_out.ArenaOutput` left
        in the program's arena for the next conv to read (see :mod:`ipukern.nn.arena_out`)."""
        if act is not None and not (fusable and act in _FUSED_ACTS):
            raise ValueError(f"conv2d: cannot fuse activation {act!r} (float32 with bias: "
                             f"{sorted(_FUSED_ACTS)})")
        with leased(prog, srcs[:1]) as slot:
            rearrange_into(rearrs[0], srcs[0], slot.arena.data)
            _write_weight(dev, prog.w, prm, wdt)
            if bias:
                dev.write(prog.b, np.asarray(prm["bias"], dtype=wdt))
            codelets = bias_codelets(prog.program) if act is not None else ()
            try:
                for c in codelets:
                    c.act = _FUSED_ACTS[act]
                run_program(prog.program, "execute", device=dev)
            finally:
                for c in codelets:
                    c.act = 0
            if keep:
                return ArenaOutput.keep(slot, prog, out, nt, _read_output)
            return _read_output(prog, out, nt, slot.arena.data)

    plan = prog.plan
    return OpPlan("conv2d", "fwd", plan.method.label(), [want], out, list(prog.program.records),
                  params.flops, dev.memory.used.copy(), wbytes, run, (False,),
                  info={"plan": plan.describe(), "layer": params.describe(),
                        "fuses": tuple(_FUSED_ACTS) if fusable else (),
                        "scales_weight": True,
                        "program": prog, "keeps": True})


def _transposed(w: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(w.T)`` of a 2-D array, bit for bit; 4-byte elements by the
    threaded blocked kernel (ResNet-50's 1000x2048 Linear weight: 2.0 ms on one thread of
    the Zen 5 host against NumPy's 6.8 ms strided copy)."""
    if w.ndim != 2 or w.dtype.itemsize != 4:
        return np.ascontiguousarray(w.T)
    from .._kernels import _vertices
    from ..core import get_num_threads
    out = np.empty(w.shape[::-1], w.dtype)
    _vertices.transpose32(np.ascontiguousarray(w).view(np.uint32), out.view(np.uint32),
                          get_num_threads())
    return out


def matmul_params(a_shape: Sequence[int], b_shape: Sequence[int], dtype: str,
                  partials: str) -> ConvParams:
    """The 1x1 grouped conv :func:`matmul_plan` plans for ``a @ b``: the direct orientation
    (``a`` as the weights) of the one matmul-as-conv rule, :func:`~ipukern.ops.matmul.matmul_conv`."""
    return matmul_conv_params(a_shape, b_shape, dtype, partials)


def matmul_plan(machine: MachineSpec, a_shape: Sequence[int], b_shape: Sequence[int], *,
                dtype: str = "float16", partials: str = "float32", b_param: bool = False,
                bias: bool = False, out_shape: Sequence[int] | None = None,
                amp: float | None = None) -> OpPlan:
    """``a @ b`` for a (G, M, K) and b (G, K, N) (2-D shapes mean G = 1), planned as a 1x1
    grouped conv like :func:`ipukern.matmul`: ``a`` is the conv's weights (rows of K
    contiguous, the natural layout of activations (tokens, features)), ``b`` its input.

    ``b_param``: ``b`` is a parameter (a Linear layer's transposed weight, param
    ``"weight"`` of shape (N, K) as in PyTorch); ``bias`` adds param ``"bias"`` (N,).
    ``amp`` as for :func:`conv_program`.
    """
    params = matmul_params(a_shape, b_shape, dtype, partials)
    G, M, N, K = params.groups, params.out_per_group, params.in_w, params.in_per_group
    prog = conv_program(params, machine, False, resident_input=b_param, amp=amp)
    nt = machine.n_tiles
    w, x = prog.w, prog.x
    a_want = Layout(tuple(a_shape), dtype, w.mapping, offsets=w.offset)
    b_want = Layout(tuple(b_shape), dtype, x.mapping, offsets=x.offset)
    if out_shape is None:
        out_shape = (M, N) if len(a_shape) == 2 else (G, M, N)
    out = Layout(tuple(out_shape), dtype, prog.y.mapping)
    dev = prog.device
    wdt = DTYPES[dtype]
    bias_plan = affine_plan(machine, out, N, 1, scale=False, shift=True, name="bias") if bias else None
    wbytes = _home_bytes(x, nt) if b_param else np.zeros(nt, np.int64)
    records = list(prog.program.records)
    total = dev.memory.used.copy()
    if bias_plan is not None:
        records += bias_plan.records
        wbytes = wbytes + bias_plan.weight_bytes
        total = np.maximum(total, bias_plan.total_bytes + out.bytes_per_tile(nt))

    def run(srcs, rearrs, prm):
        with leased(prog, srcs) as slot:
            rearrange_into(rearrs[0], srcs[0], slot.arena.data)
            if b_param:
                dev.write(x, _transposed(np.asarray(prm["weight"], dtype=wdt)).reshape(x.shape))
            else:
                rearrange_into(rearrs[1], srcs[1], slot.arena.data)
            run_program(prog.program, "execute", device=dev)
            y = _read_output(prog, out, nt, slot.arena.data)
        if bias_plan is not None:
            from .layout import Rearrangement
            ident = Rearrangement(machine, out, out)
            y = bias_plan.run([y], [ident], {"shift": prm["bias"]})
        return y

    inputs = [a_want] if b_param else [a_want, b_want]
    return OpPlan("matmul", "fwd", prog.plan.method.label(), inputs, out, records,
                  params.flops + (N * M * G if bias else 0), total, wbytes, run,
                  tuple(False for _ in inputs),
                  info={"plan": prog.plan.describe(), "layer": f"G{G} ({M}x{K}) @ ({K}x{N})",
                        "program": prog})
