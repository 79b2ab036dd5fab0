"""A network compiled for one batch size, dtype and machine: a program of op steps.

Each layer becomes one :class:`Step`: the rearrangement exchanges that bring its inputs
into the layouts its plan wants, then the plan's supersteps. Op plans are cached by layer
signature and shapes (layers of equal shape share one), rearrangements by layout pair.
:func:`ipukern.nn.compile.compile_network` caches whole programs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _memo, _progress
from ..core import SuperstepRecord
from .host.arenas import ARENAS
from .host import table_cache
from .host.buffers import POOL, pooled
from .layers import BatchNorm2d, Conv2d, PlanContext
from .layout import Layout, Rearrangement, Resident, linear_layout
from .network import Network
from .ops import OpPlan, fold_weight

__all__ = ["NetworkProgram", "Step", "bn_folds", "param_index"]

#: op plans by layer signature, context, shapes and (layout-sensitive layers) input layouts
_PLANS = _memo.register(_memo.LruCache("nn.op_plans", maxsize=8192, **_memo.HOST_BOUND), per_batch=True)
#: rearrangements by (source, destination) layout objects (entries hold both layouts)
_REARR = _memo.register(_memo.LruCache("nn.rearrangements", maxsize=8192, **_memo.HOST_BOUND),
                        per_batch=True)
_INPUT_LAYOUTS = _memo.register(_memo.LruCache("nn.input_layouts", maxsize=256), per_batch=True)
#: the residents' reusable host buffers
_memo.on_clear(POOL.clear, name="nn.host_buffers")
#: the conv programs' pooled arenas
_memo.on_clear(ARENAS.clear, name="nn.host_arenas", info=ARENAS.info)
#: ops whose output shares its input's buffer (their outputs never give a buffer away)
_VIEW_METHODS = ("view", "rearrange")


@dataclass
class Step:
    """One layer (or a conv with its folded batch norm) in program order."""

    name: str
    node: str
    layers: tuple[str, ...]
    op: str
    plan: OpPlan
    srcs: tuple[str, ...]
    rearrs: list[Rearrangement | None]
    in_shapes: tuple[tuple[int, ...], ...]
    out_shape: tuple[int, ...]
    folded_bn: Any = None
    layer: Any = None
    inplace: bool = False
    #: execute mode: the activation this conv's bias pass applies for the next step
    fused_act: str | None = None
    #: execute mode: this activation was applied by its producer (see fused_act)
    fused: bool = False
    #: execute mode: this conv leaves its output in its program's arena for the next conv
    #: (:mod:`ipukern.nn.arena_out`)
    keep: bool = False

    @property
    def rearrange_cycles(self) -> int:
        return sum(r.cycles + (r.machine.sync_cycles if not r.identity else 0)
                   for r in self.rearrs if r is not None)

    @property
    def cycles(self) -> int:
        return self.rearrange_cycles + self.plan.cycles

    def records(self) -> list[SuperstepRecord]:
        out = [r.record() for r in self.rearrs if r is not None and not r.identity]
        return out + list(self.plan.records)

    def params(self, net_params: dict[str, np.ndarray],
               index: dict[str, list[str]] | None = None, *,
               defer_fold: bool = False) -> dict[str, Any]:
        """This step's parameters by local name (a folded batch norm scales the conv).
        ``index``: :func:`param_index` of ``net_params`` (saves a scan of every name).
        ``defer_fold``: leave a folded batch norm's weight scaling to the conv (``"weight"``
        unscaled, ``"weight_scale"`` the float64 scale per output channel), for a plan whose
        ``info["scales_weight"]`` says it applies it as it places the weights."""
        conv = self.layers[0]
        p = _local(net_params, conv, index)
        if self.folded_bn is not None:
            bn_name, bn = self.folded_bn
            s, shift = bn.scale_shift(_local(net_params, bn_name, index))
            s = np.asarray(s, np.float64)
            b = (shift + (s * np.asarray(p["bias"], np.float64) if "bias" in p else 0.0)).astype(np.float32)
            if defer_fold:
                return {"weight": np.asarray(p["weight"]), "weight_scale": s, "bias": b}
            return {"weight": fold_weight(np.asarray(p["weight"]), s), "bias": b}
        return self.layer.op_params(p) if self.layer is not None else p


def param_index(net_params: dict[str, Any]) -> dict[str, list[str]]:
    """Parameter names by every dotted prefix ("a.b.weight" under "a" and "a.b"): a
    layer's parameters without scanning every name per layer."""
    index: dict[str, list[str]] = {}
    for k in net_params:
        i = k.find(".")
        while i >= 0:
            index.setdefault(k[:i], []).append(k)
            i = k.find(".", i + 1)
    return index


def _local(net_params: dict[str, Any], layer: str, index: dict[str, list[str]] | None) -> dict[str, Any]:
    """The parameters of ``layer`` by local name ("<layer>.<local>")."""
    n = len(layer) + 1
    if index is None:
        return {k[n:]: v for k, v in net_params.items() if k.startswith(layer + ".")}
    return {k[n:]: net_params[k] for k in index.get(layer, ())}


def _plan(layer, ctx: PlanContext, layouts, shapes, extra: tuple = ()) -> OpPlan:
    lkey = tuple(id(lay) for lay in layouts) if layer.layout_sensitive else ()
    key = (layer.key(), ctx, tuple(shapes), lkey, extra)
    # an entry holds the layouts its key names by id, so a hit is of the same objects
    held = tuple(layouts) if lkey else ()
    hit = _PLANS.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], held)):
        if extra:
            plan = layer.forward(ctx, layouts, shapes, bias=True)
        else:
            plan = layer.forward(ctx, layouts, shapes)
        hit = _PLANS.setdefault(key, (held, plan))
    return hit[1]


def _rearrangement(machine, src: Layout, dst: Layout, name: str) -> Rearrangement:
    key = (id(src), id(dst))
    hit = _REARR.get(key)
    if hit is None or hit[0] is not src or hit[1] is not dst:
        hit = _REARR.put(key, (src, dst, Rearrangement(machine, src, dst, name=name)))
    return hit[2]


def _input_layout(shape, dtype, machine) -> Layout:
    key = (tuple(shape), dtype, machine)
    lay = _INPUT_LAYOUTS.get(key)
    if lay is None:
        lay = _INPUT_LAYOUTS.setdefault(key, linear_layout(shape, dtype, machine.n_tiles))
    return lay


def bn_folds(net: Network) -> dict[str, str]:
    """Inference batch-norm folding: conv node -> the batch norm folded into it (the conv's
    only consumer, the conv not a network output)."""
    consumers = net.consumers()
    fold_into = {}
    for name, node in net.nodes.items():
        if isinstance(node.layer, BatchNorm2d):
            src = node.inputs[0]
            sn = net.nodes[src]
            if isinstance(sn.layer, Conv2d) and consumers[src] == [name] and src not in net.outputs:
                fold_into[src] = name
    return fold_into


class NetworkProgram:
    """A network compiled for one batch size, dtype, partials and machine."""

    def __init__(self, net: Network, batch: int, ctx: PlanContext, fold_bn: bool):
        self.net, self.batch, self.ctx, self.fold_bn = net, batch, ctx, fold_bn
        self.machine = ctx.machine
        shapes = net.shapes(batch)
        self.shapes = shapes
        layouts: dict[str, Layout | None] = {}
        self.input_layouts: dict[str, Layout | None] = {}
        for name in net.inputs:
            node = net.nodes[name]
            lay = _input_layout(shapes[name], ctx.dtype, ctx.machine) if node.kind == "float" else None
            layouts[name] = self.input_layouts[name] = lay
        fold_into = bn_folds(net) if fold_bn else {}
        skip = set(fold_into.values())
        self.steps: list[Step] = []
        layer_names = [name for name, node in net.nodes.items() if node.layer is not None]
        for name, node in net.nodes.items():
            if node.layer is None or name in skip:
                continue
            _progress.note(f"planning layer {layer_names.index(name) + 1}/{len(layer_names)}")
            ins = [layouts[i] for i in node.inputs]
            in_shapes = tuple(shapes[i] for i in node.inputs)
            try:
                if name in fold_into:
                    plan = _plan(node.layer, ctx, ins, in_shapes, ("bias",))
                else:
                    plan = _plan(node.layer, ctx, ins, in_shapes)
            except MemoryError as e:
                raise type(e)(f"layer {name!r}: {e}") from None
            out_node = fold_into.get(name, name)
            rearrs = []
            for k, (src_name, want) in enumerate(zip(node.inputs, plan.inputs)):
                src = layouts[src_name]
                if want is None or src is None:
                    rearrs.append(None)
                else:
                    rearrs.append(_rearrangement(ctx.machine, src, want, f"{name}: {src_name} -> input {k}"))
            bn = (fold_into[name], net.nodes[fold_into[name]].layer) if name in fold_into else None
            step_name = f"{name}+{fold_into[name]}" if name in fold_into else name
            layers = (name, fold_into[name]) if name in fold_into else (name,)
            op = node.layer.op + ("+bn" if bn else "")
            self.steps.append(Step(step_name, out_node, layers, op, plan, node.inputs, rearrs,
                                   in_shapes, shapes[out_node], bn, node.layer))
            layouts[out_node] = plan.output
        self.layouts = layouts
        self._mark_inplace()
        self._mark_fused()
        self._mark_kept()

    def _mark_inplace(self) -> None:
        """Let an element-wise step write its output over its first input's buffer when
        that input dies there: produced by an earlier step that owns its buffer (not a
        network input, not a view such as reshape/permute), read once in the whole program
        (so nothing else aliases it), not a network output, and read without a copy. The
        memory model (:meth:`liveness`) and execution (:meth:`execute`) both follow this flag.
        """
        producer = {s.node: s for s in self.steps}
        uses: dict[str, int] = {}
        for s in self.steps:
            for src in s.srcs:
                uses[src] = uses.get(src, 0) + 1
        outputs = set(self.net.outputs)
        for s in self.steps:
            if not s.plan.inplace or not s.rearrs or s.rearrs[0] is None:
                continue
            src = s.srcs[0]
            p = producer.get(src)
            r = s.rearrs[0]
            s.inplace = (p is not None and p.plan.method not in _VIEW_METHODS and uses[src] == 1
                         and src not in outputs and r.identity and r.dst.offsets is None
                         and r.src.offsets is None)

    def _mark_fused(self) -> None:
        """Execute mode: an in-place ReLU/ReLU6 (see :meth:`_mark_inplace`: its input read
        by it alone, without a copy) of a producer that can apply it (a conv's bias pass, a
        float32 residual add: ``info["fuses"]``) is done by that producer, saving a pass
        over the tensor on the host. Same bits (the kernel applies
        NumPy's semantics); the program, its cycles and its memory are untouched."""
        producer = {s.node: s for s in self.steps}
        for s in self.steps:
            p = producer.get(s.srcs[0]) if s.inplace else None
            if (p is not None and s.plan.method == "NonLinearity1D"
                    and s.plan.op in p.plan.info.get("fuses", ())):
                p.fused_act, s.fused = s.plan.op, True

    def _mark_kept(self) -> None:
        """Execute mode: a conv whose output (after a fused activation, if any) is read by
        one conv or matmul alone, with no run of the same program in between, leaves it in
        its arena for that reader's rearrangement (:mod:`ipukern.nn.arena_out`): one host
        copy fewer. Only a hint: whatever reads the output gets the same bytes either way."""
        uses: dict[str, list[int]] = {}
        for i, s in enumerate(self.steps):
            for src in s.srcs:
                uses.setdefault(src, []).append(i)
        outputs = set(self.net.outputs)
        for i, s in enumerate(self.steps):
            prog = s.plan.info.get("program")
            if not s.plan.info.get("keeps") or prog is None:
                continue
            node, j = s.node, i
            readers = uses.get(node, [])
            if len(readers) == 1 and self.steps[readers[0]].fused and node not in outputs:
                j = readers[0]
                node = self.steps[j].node
                readers = uses.get(node, [])
            if len(readers) != 1 or node in outputs:
                continue
            c = readers[0]
            reader = self.steps[c].plan.info.get("program")
            between = {id(t.plan.info.get("program")) for t in self.steps[i + 1:c]}
            s.keep = (reader is not None and reader is not prog and id(prog) not in between
                      and j < c)

    # ------------------------------------------------------------------ costs
    @property
    def total_cycles(self) -> int:
        return sum(s.cycles for s in self.steps)

    @property
    def flops(self) -> int:
        return sum(s.plan.flops for s in self.steps)

    def records(self) -> list[SuperstepRecord]:
        out = []
        for s in self.steps:
            out += s.records()
        return out

    def liveness(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-step, per-tile live bytes (reserve excluded) and per-tile resident weights.

        At step i a tile holds: every layer's resident weights; every activation produced
        before step i and used at or after it (network inputs from the start, outputs to
        the end); and step i's own buffers (wanted-input copies, working memory, its output,
        except for a step that writes its output in place over its dying input).

        A step runs in two phases, as Poplar's liveness sees its programs: the
        rearrangement copies (the inputs and their new copies live), then the op's compute
        sets, by which time an input read only through a copy and used by no later step is
        dead (:meth:`_phases`). The step's bytes are the larger of the two, per tile.
        """
        cached = self.__dict__.get("_liveness")
        if cached is not None:
            return cached
        nt = self.machine.n_tiles
        S = len(self.steps)
        index = {s.node: i for i, s in enumerate(self.steps)}
        last = self._last_use()
        diff = np.zeros((S + 1, nt), dtype=np.int64)
        for n, lay in self.layouts.items():
            if lay is None:
                continue
            p = index.get(n, -1)
            if last[n] > p:
                diff[p + 1] += lay.bytes_per_tile(nt)
                diff[last[n] + 1] -= lay.bytes_per_tile(nt)
        acts = np.cumsum(diff, axis=0)[:S]
        weights = np.zeros(nt, dtype=np.int64)
        for s in self.steps:
            weights += s.plan.weight_bytes
        copies, freed = self._phases(last)
        own = np.zeros((S, nt), dtype=np.int64)
        for i, s in enumerate(self.steps):
            own[i] = s.plan.total_bytes - s.plan.weight_bytes
            if s.inplace:
                own[i] -= s.plan.output.bytes_per_tile(nt)
        live = np.maximum(acts + copies, acts - freed + own)
        self._liveness = (live + weights[None, :], weights)
        return self._liveness

    def _last_use(self) -> dict[str, int]:
        """Index of the last step reading each tensor (outputs: the last step)."""
        last = {n: -1 for n in self.layouts}
        for i, s in enumerate(self.steps):
            for src in s.srcs:
                last[src] = max(last[src], i)
        for o in self.net.outputs:
            last[o] = len(self.steps) - 1
        return last

    def _phases(self, last: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """Per step and tile: the bytes of its rearrangement copies (live in the copy
        phase), and the bytes of its inputs that die after being copied (dead in the compute
        phase: read only through non-identity rearrangements, not read later, not an output).
        Poplar frees a variable after the last program that reads it."""
        nt = self.machine.n_tiles
        S = len(self.steps)
        copies = np.zeros((S, nt), dtype=np.int64)
        freed = np.zeros((S, nt), dtype=np.int64)
        outputs = set(self.net.outputs)
        for i, s in enumerate(self.steps):
            read_in_place = set()
            for src, r in zip(s.srcs, s.rearrs):
                if r is None or r.identity:
                    read_in_place.add(src)
                else:
                    copies[i] += r.dst.bytes_per_tile(nt)
            for src in set(s.srcs) - read_in_place:
                lay = self.layouts.get(src)
                if lay is not None and last[src] == i and src not in outputs:
                    freed[i] += lay.bytes_per_tile(nt)
        return copies, freed

    # ------------------------------------------------------------------ execution
    def execute(self, feeds: dict[str, np.ndarray], params: dict[str, np.ndarray], *,
                cache: bool = True) -> dict[str, np.ndarray]:
        """Run every step on real data; returns the network outputs as host arrays. The
        residents' host buffers come from :data:`ipukern.nn.host.buffers.POOL` (reused from the
        previous execution; same bits as fresh ones). ``cache``: the first execution in a
        process reads its host copy tables from the on-disk cache
        (:mod:`ipukern.nn.host.table_cache`) or writes them there after it runs."""
        first = cache and not self.__dict__.get("_tables_cached")
        if first:
            self.__dict__["_tables_cached"] = True
            hit = table_cache.load(self)
        with pooled():
            out = self._execute(feeds, params)
        if first and not hit:
            table_cache.store(self)
        return out

    def _programs(self) -> list[Any]:
        """The conv programs the steps run (each once)."""
        progs = {id(p): p for s in self.steps if (p := s.plan.info.get("program")) is not None}
        return list(progs.values())

    def _execute(self, feeds: dict[str, np.ndarray], params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        nt = self.machine.n_tiles
        live: dict[str, Any] = {}
        for name in self.net.inputs:
            lay = self.input_layouts[name]
            live[name] = np.asarray(feeds[name]) if lay is None else Resident.from_host(lay, nt, feeds[name])
        remaining: dict[str, int] = {}
        for s in self.steps:
            for src in s.srcs:
                remaining[src] = remaining.get(src, 0) + 1
        index = param_index(params)
        # the pooled arenas the convs lease are made as long as the largest one needs
        ARENAS.reserve(nt, max((p.device.memory.high_water for p in self._programs()), default=0))
        for i, s in enumerate(self.steps):
            _progress.note(f"running layer {i + 1}/{len(self.steps)} {s.name}")
            srcs = [live[n] for n in s.srcs]
            if s.fused:                 # applied by its producer: the same buffer, in place
                live[s.node] = srcs[0].relabel(s.plan.output)
            else:
                kw: dict[str, Any] = {}
                if s.keep:
                    kw["keep"] = True
                if s.fused_act is not None:
                    kw["act"] = s.fused_act
                if s.inplace:
                    kw["inplace"] = True
                prm = s.params(params, index, defer_fold=s.plan.info.get("scales_weight", False))
                live[s.node] = s.plan.run(srcs, s.rearrs, prm, **kw)
            for n in s.srcs:
                remaining[n] -= 1
                if remaining[n] == 0 and n not in self.net.outputs:
                    del live[n]
        return {o: (live[o].to_host() if isinstance(live[o], Resident) else live[o])
                for o in self.net.outputs}
