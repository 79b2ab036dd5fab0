"""Optimizer steps on the simulated IPU: SGD, SGD with momentum, Adam, LAMB and LARS.

Each step is an element-wise tile program over the parameters, their gradients and the
optimizer state, run for real (float32 arithmetic in ``torch.optim``'s order, so one step
equals PyTorch's to rounding) and costed with the popops element-wise estimators.

Cycle model
-----------
The update of one parameter block on one tile is one vertex: a fused element-wise map
(PopLibs' ``popops::map`` fuses an expression into one generated codelet). Per worker it
costs the popops setup (``ELEMENTWISE_WORKER_OVERHEAD``) plus, per 64-bit vector of
float32 elements, one cycle per input load and per output store and the inner-loop cycles
of every operation from PopLibs' ``lib/popops/popopsCycleEstimators.hpp``
(``binaryOpPerfInfo`` / ``unaryOpPerfInfo``): ADD/SUBTRACT/MULTIPLY 1 cycle per natural
vector (2 floats or 4 halves), float SQUARE 2 per 2 elements, SQRT 10 per 2, DIVIDE 10 per 2;
half SQUARE 2 per 4, SQRT 23 per 4, DIVIDE 21 per 4. Six workers and the supervisor overhead as
for every popops vertex (``ipukern.core.cost``).

The update's arithmetic type: float16 when the parameters and every state tensor are float16
(a map over half tensors runs the half vertex: 4 elements per 64-bit vector), float32 otherwise
(a half operand is cast; loads and stores stay one cycle per operand and vector). SGD has no
state and is costed in float32, as before.

LAMB and LARS need each tensor's norms: each tile's partial sums of p² and r² (LAMB) or p² and
g² (LARS) are exchanged to the tensor's first tile, summed into the trust ratio there and the
ratio is broadcast back (two more supersteps, costed as exchanges; :func:`_norm_steps`).

LARS (You, Gitman, Ginsburg 2017, arXiv:1708.03888) as TensorFlow's ``LARSOptimizer`` in the
copy Graphcore's MLPerf Training v1.1 ResNet-50 ran (mlcommons/training_results_v1.1,
``Graphcore/benchmarks/resnet/implementations/tensorflow/lars_optimizer.py``): per tensor,
``trust = eta ||w|| / (||g|| + wd ||w|| + eps)`` (1 when ``||w||`` or ``||g||`` is 0), local
lr ``lr * trust``, ``g' = g + wd w``, then ``apply_momentum`` with learning rate 1:
``v = m v + lr_local g'``, ``w -= v`` (the momentum slot starts at zero and holds the
lr-scaled velocity, not torch's buffer). Tensors on the skip list keep ``lr`` and get no
weight decay: ``v = m v + lr g``. The skip list of that code is ``['beta', 'gamma', 'bias']``
(``train.py``'s ``--lars-skip-list`` default, unchanged by the v1.1 configs), and NVIDIA's
MXNet LARS of MLPerf v1.0 and v1.1 (``SGDwFASTLARS``,
``NVIDIA/benchmarks/resnet/implementations/mxnet/common/fit.py``) skips names ending in gamma,
beta or bias: batch-norm scales and shifts and biases. Here the parameters are shapes, so the
rule is by rank (:func:`lars_adapted`): **tensors of one dimension (biases, batch/layer-norm
scales and shifts) are not adapted**, tensors of two or more (conv and linear weights,
embeddings) are; for ResNet-50 both rules pick the same tensors (107 of 161 tensors, 54,120 of
25,557,032 parameters skipped).

Optimizer state (momentum, Adam/LAMB moments) is float32 by default; ``state_dtype`` (one
type, or one per state slot: e.g. ``("float16", "float32")`` for LAMB's first moment in half and
its second in float, as Graphcore's MLPerf v1.1 BERT POD16 configuration) sets its storage.
Estimates only: :func:`optimizer_step` executes float32 state. ``state_location="chip"`` keeps
it in tile memory; ``"host"`` keeps it in host/streaming memory: it is streamed in before
the update and out after it, each costed at the host-link rate
(``MachineSpec.host_bytes_per_second``: PCIe Gen4 x16, 64 GB/s, reference/ipu-hardware.md
[S6]); on chip it then occupies tile memory only during the step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..core.cost import ELEMENTWISE_WORKER_OVERHEAD, SUPERVISOR_OVERHEAD, ceil_div
from ..core import Device
from ..core import Profile
from ..core import Superstep, VertexBatch
from ..core import TileMapping
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec, get_machine

__all__ = [
    "OPTIMIZERS",
    "OPTIMIZER_WORDS",
    "OPTIMIZER_STATE_WORDS",
    "lars_adapted",
    "STATE_DTYPES",
    "Optimizer",
    "OptimizerRun",
    "estimate_optimizer_step",
    "get_optimizer",
    "optimizer_step",
    "optimizer_vertex_cycles",
    "state_bytes_per_param",
    "state_dtypes",
    "update_dtype",
]

#: state slots (float32 tensors shaped like the parameter) and their torch.optim names
#: (LARS: TensorFlow's slot name; it holds the lr-scaled velocity)
OPTIMIZERS = {"sgd": (), "sgd_momentum": ("momentum_buffer",),
              "adam": ("exp_avg", "exp_avg_sq"), "lamb": ("exp_avg", "exp_avg_sq"),
              "lars": ("momentum",)}
#: a parameter is spread over tiles in blocks of at least this many elements (small
#: tensors use few tiles, as poputil::mapTensorLinearly's minimum elements per tile)
MIN_ELEMS_PER_TILE = 64

#: inner-loop cycles per 64-bit vector (2 floats, 4 halves) by arithmetic type,
#: popopsCycleEstimators.hpp: binaryOpPerfInfo ADD/MULTIPLY {1, true} (float and half),
#: DIVIDE float {10, false, 2} / half {21, false, 4}; unaryOpPerfInfo SQUARE {2, false, 2} /
#: {2, false, 4}, SQRT {10, false, 2} / {23, false, 4}
_OP_CYCLES = {"float32": {"add": 1, "mul": 1, "square": 2, "sqrt": 10, "divide": 10},
              "float16": {"add": 1, "mul": 1, "square": 2, "sqrt": 23, "divide": 21}}
STATE_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Optimizer:
    """An optimizer and its hyper-parameters (``torch.optim`` names and defaults;
    LAMB as in You et al. 2020, Algorithm 2, with Adam bias correction; LARS as TensorFlow's
    ``LARSOptimizer``: ``eta`` its ``eeta`` coefficient, default 0.001, ``eps`` default 0,
    no dampening)."""

    name: str = "sgd"
    lr: float = 1e-3
    momentum: float = 0.9
    dampening: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float | None = None
    weight_decay: float = 0.0
    eta: float = 0.001

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.name!r}; choose from {sorted(OPTIMIZERS)}")
        for k in ("lr", "momentum", "dampening", "weight_decay", "eta"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
                raise ValueError(f"optimizer {k} must be a finite number >= 0, got {v!r}")
        b = tuple(self.betas)
        if len(b) != 2 or not all(0 <= x < 1 for x in b):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        object.__setattr__(self, "betas", (float(b[0]), float(b[1])))
        if self.eps is None:
            object.__setattr__(self, "eps", {"lamb": 1e-6, "lars": 0.0}.get(self.name, 1e-8))
        e = self.eps
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not np.isfinite(e) or e < 0:
            raise ValueError(f"optimizer eps must be a finite number >= 0, got {e!r}")
        if self.name == "lars" and self.dampening:
            raise ValueError(f"lars has no dampening (TensorFlow's apply_momentum), got "
                             f"dampening={self.dampening!r}")

    @property
    def state_names(self) -> tuple[str, ...]:
        return OPTIMIZERS[self.name]

    @property
    def n_state(self) -> int:
        """float32 state tensors per parameter."""
        return len(self.state_names)


def get_optimizer(spec: Any) -> Optimizer:
    """An :class:`Optimizer` from itself or a name ("sgd", "sgd_momentum", "adam", "lamb",
    "lars")."""
    if isinstance(spec, Optimizer):
        return spec
    if isinstance(spec, str):
        return Optimizer(spec)
    raise TypeError(f"optimizer must be a name or an ipukern.Optimizer, got {spec!r}")


def _vector_cycles(opt: Optimizer, phase: str, dtype: str = "float32") -> tuple[int, int, int]:
    """(loads, stores, op cycles) per 64-bit vector of one fused update vertex computing in
    ``dtype``."""
    c = _OP_CYCLES[dtype]
    add, mul, sq = c["add"], c["mul"], c["square"]
    wd = 2 * add if opt.weight_decay else 0          # d = g + wd * p
    if phase == "lamb_apply":
        return 2, 1, 2 * mul
    if phase == "lars_norms":                        # p², g² and their running sums
        return 2, 0, 2 * sq + 2 * add
    if phase == "lars_plain":                        # a skipped tensor: v = m v + lr g, p -= v
        return 3, 2, 2 * mul + 2 * add
    return {
        "sgd": (2, 1, wd + 2 * mul),
        "sgd_momentum": (3, 2, wd + 3 * mul + 2 * mul),
        "adam": (4, 3, wd + 3 * add + 4 * mul + c["sqrt"] + c["divide"] + add + c["divide"] + 2 * mul),
        "lamb": (4, 3, 3 * add + 4 * mul + 2 * mul + c["sqrt"] + add + c["divide"] + wd
                 + 2 * sq + 2 * add),
        # d = g + wd p; v = m v + lr_local d; p -= v
        "lars": (3, 2, wd + 2 * mul + 2 * add),
    }[opt.name]


#: the phases of each optimizer's update that stream every element of the parameter (the
#: fused vertices of :func:`optimizer_step`; LAMB's norms ride in its direction vertex, LARS'
#: norms are a pass of their own; LARS' skipped 1-D tensors are counted as adapted ones)
_STREAMING_PHASES = {"sgd": ("sgd",), "sgd_momentum": ("sgd_momentum",), "adam": ("adam",),
                     "lamb": ("lamb", "lamb_apply"), "lars": ("lars", "lars_norms")}
#: words per parameter one optimizer step moves through the load/store path (reads +
#: writes), summed over those phases' vertices: the one traffic rule, which the multi-IPU
#: and GPU system models use too (sgd 3, sgd_momentum 5, adam 7, lamb 10, lars 7)
OPTIMIZER_WORDS = {name: sum(sum(_vector_cycles(Optimizer(name), ph)[:2]) for ph in phases)
                   for name, phases in _STREAMING_PHASES.items()}
#: optimizer state words per parameter (the state slots of :data:`OPTIMIZERS`)
OPTIMIZER_STATE_WORDS = {name: len(slots) for name, slots in OPTIMIZERS.items()}


def optimizer_vertex_cycles(machine: MachineSpec, opt: Optimizer, n_elems: np.ndarray,
                            phase: str | None = None, dtype: str = "float32") -> np.ndarray:
    """Cycles of the fused update vertex over ``n_elems`` elements on one tile, computing in
    ``dtype`` (:func:`update_dtype`)."""
    n = np.asarray(n_elems, dtype=np.int64)
    loads, stores, ops = _vector_cycles(opt, phase or opt.name, dtype)
    vw = machine.vector_elems(dtype)
    vectors = ceil_div(ceil_div(n, machine.n_workers), vw)
    worker = ELEMENTWISE_WORKER_OVERHEAD + vectors * (loads + stores + ops)
    return np.where(n > 0, machine.n_workers * worker + SUPERVISOR_OVERHEAD, 0)


def state_dtypes(optimizer: Any, state_dtype: Any = "float32") -> tuple[str, ...]:
    """The storage type of each state slot of ``optimizer``: ``state_dtype`` is "float32",
    "float16" (every slot) or a sequence with one of them per slot (e.g. LAMB's first and
    second moment). ValueError/TypeError in one line for anything else."""
    opt = get_optimizer(optimizer)
    n = opt.n_state
    one = isinstance(state_dtype, str)
    items = [state_dtype] * n if one else state_dtype
    if not one and not isinstance(state_dtype, (tuple, list)):
        raise TypeError(f"optimizer_state_dtype must be 'float32', 'float16' or one of them per "
                        f"state slot, got {state_dtype!r}")
    if not one and len(items) != n:
        raise ValueError(f"optimizer_state_dtype: {opt.name} has {n} state slot(s) "
                         f"{list(opt.state_names)}, got {len(items)} types {list(items)!r}")
    for d in items:
        if not isinstance(d, str):
            raise TypeError(f"optimizer_state_dtype must be 'float32' or 'float16', got {d!r}")
        if d not in STATE_DTYPES:
            raise ValueError(f"optimizer_state_dtype must be 'float32' or 'float16', got {d!r}")
    return tuple(items)


def state_bytes_per_param(optimizer: Any, state_dtype: Any = "float32") -> int:
    """Bytes of optimizer state per parameter (0 for SGD)."""
    return sum(np.dtype(d).itemsize for d in state_dtypes(optimizer, state_dtype))


def update_dtype(optimizer: Any, dtype: str, state_dtype: Any = "float32") -> str:
    """The update's arithmetic type: float16 when the parameters (``dtype``) and every state
    slot are float16, float32 otherwise (also for SGD, which has no state)."""
    sd = state_dtypes(optimizer, state_dtype)
    return "float16" if sd and dtype == "float16" and all(d == "float16" for d in sd) else "float32"


def _ratio_cycles(machine: MachineSpec, k: np.ndarray, name: str = "lamb") -> np.ndarray:
    """Trust-ratio vertex: sum k pairs of partial sums, two square roots and a divide; LARS
    adds ``eta * ||w||``, ``wd * ||w||``, two adds and ``lr * trust`` (3 mul, 2 add)."""
    k = np.asarray(k, dtype=np.int64)
    c = _OP_CYCLES["float32"]          # the norms' partial sums are float32
    extra = 3 * c["mul"] + 2 * c["add"] if name == "lars" else 0
    return SUPERVISOR_OVERHEAD + machine.n_workers * ELEMENTWISE_WORKER_OVERHEAD + k * 2 * c["add"] \
        + 2 * c["sqrt"] + c["divide"] + extra


def lars_adapted(shapes) -> np.ndarray:
    """Which tensors LARS adapts (bool per shape): those of two or more dimensions. One-dimensional
    tensors (biases, batch/layer-norm scales and shifts) keep the plain learning rate and get no
    weight decay, as the skip lists of the MLPerf LARS implementations (module docstring)."""
    return np.array([len(tuple(s)) >= 2 for s in shapes], dtype=bool)


@dataclass
class OptimizerRun:
    """Result of :func:`optimizer_step`: updated ``params`` and ``state`` (one dict per
    parameter, torch.optim names) and the ``profile`` of the step."""

    params: list[np.ndarray]
    state: list[dict[str, np.ndarray]]
    profile: Profile


class _Codelet:
    def __init__(self, name: str, fn: str, keys: tuple[str, ...]):
        self.name, self.fn, self.keys = name, fn, keys

    def run(self, data, batch, n_threads):
        from . import _optim_kernels as k
        getattr(k, self.fn)(data, batch.tiles, *[batch.args[key] for key in self.keys])


class _NoData:
    """A host-link transfer: the bytes are placed by the host; only the time is modelled."""

    name = "host_stream"

    def run(self, data, batch, n_threads):
        return None


@dataclass
class _OptimProgram:
    device: Device
    steps: list = field(default_factory=list)
    p: list = field(default_factory=list)
    g: list = field(default_factory=list)
    s: list = field(default_factory=list)
    hyper: np.ndarray | None = None


def _mappings(shapes, n_tiles: int) -> list[TileMapping]:
    """Each parameter spread linearly over its own run of tiles, starting where the
    previous one ended (so small tensors do not all land on tile 0)."""
    out, start = [], 0
    for shp in shapes:
        n = int(np.prod(shp, dtype=np.int64))
        k = max(1, min(n_tiles, n // MIN_ELEMS_PER_TILE))
        tiles = (start + np.arange(k)) % n_tiles
        out.append(TileMapping.linear(n, k, grain=2, tiles=tiles))
        start = (start + k) % n_tiles
    return out


def _build(opt: Optimizer, shapes, dtype: str, machine: MachineSpec, state_location: str,
           n_state_override: int | None = None, *, allow_overflow: bool = False,
           state_dtype: Any = "float32") -> _OptimProgram:
    dev = Device(machine, allow_overflow=allow_overflow)
    prog = _OptimProgram(dev)
    NT = machine.n_tiles
    maps = _mappings(shapes, NT)
    lamb = opt.name == "lamb"
    cat_state = "optimizer state" if state_location == "chip" else "optimizer state (streamed)"
    sdt = state_dtypes(opt, state_dtype)
    udt = update_dtype(opt, dtype, sdt)
    tiles, offs, ns = [], [], []
    for i, (shp, mp) in enumerate(zip(shapes, maps)):
        p = dev.add_tensor(f"param{i}", shp, dtype, mp, "weights")
        g = dev.add_tensor(f"grad{i}", shp, dtype, mp, "gradients")
        st = [dev.add_tensor(f"{nm}{i}", shp, d, mp, cat_state) for nm, d in zip(opt.state_names, sdt)]
        r = dev.add_tensor(f"lamb_r{i}", shp, "float32", mp, "scratch") if lamb else None
        prog.p.append(p)
        prog.g.append(g)
        prog.s.append(st)
        cnt = p.tile_block(NT)[1]
        t = np.flatnonzero(cnt > 0)
        o = np.full((t.size, 5), 0, dtype=np.int64)
        for j, tt in enumerate([p, g] + st + ([None] * (2 - len(st))) + [r]):
            if tt is not None:
                o[:, j] = tt.tile_block(NT)[0][t]
        tiles.append(t)
        offs.append(o)
        ns.append(cnt[t])
    tiles_a = np.concatenate(tiles).astype(np.int32)
    off_a = np.concatenate(offs)
    n_a = np.concatenate(ns)
    prog.hyper = np.zeros(9, dtype=np.float64)
    isz = np.dtype(dtype).itemsize
    used = [0, 1] + [2 + k for k in range(opt.n_state)] + ([4] if lamb else [])
    sizes = [isz, isz] + [np.dtype(d).itemsize for d in sdt] + ([4] if lamb else [])
    regions = [(off_a[:, j], n_a * b) for j, b in zip(used, sizes)]
    sbytes = sum(sizes[2:2 + opt.n_state])
    if state_location == "host" and opt.n_state:
        prog.steps.append(_host_step("stream optimizer state in", dev, tiles_a, n_a, sbytes))
    if opt.name == "lars":
        prog.steps += _lars_steps(dev, opt, tiles, lars_adapted(shapes), tiles_a, off_a, n_a, prog.hyper,
                                  regions, udt)
    elif not lamb:
        vb = VertexBatch(_Codelet(f"{opt.name}_update", opt.name, ("off", "n", "h")), tiles_a,
                         {"off": off_a, "n": n_a, "h": prog.hyper},
                         optimizer_vertex_cycles(machine, opt, n_a, dtype=udt), regions=regions,
                         why=f"{opt.name} update of {int(n_a.max())} elements in {udt} "
                             f"(fused popops map; state {'/'.join(sdt) or 'none'})")
        prog.steps.append(Superstep(f"{opt.name} update", compute=dev.compute_set([vb], name="update"),
                                    category="optimizer"))
    else:
        prog.steps += _lamb_steps(dev, opt, tiles, tiles_a, off_a, n_a, prog.hyper, regions, udt)
    if state_location == "host" and opt.n_state:
        prog.steps.append(_host_step("stream optimizer state out", dev, tiles_a, n_a, sbytes))
    return prog


def _host_step(name: str, dev: Device, tiles: np.ndarray, n: np.ndarray, state_bytes: int) -> Superstep:
    m = dev.machine
    nbytes = int(n.sum()) * state_bytes
    cyc = int(np.ceil(nbytes * m.clock_hz / m.host_bytes_per_second))
    t = np.unique(tiles)[:1]
    vb = VertexBatch(_NoData(), t, {}, np.full(t.size, cyc),
                     why=f"{nbytes} B of optimizer state over the host link at "
                         f"{m.host_bytes_per_second / 1e9:g} GB/s")
    return Superstep(name, compute=dev.compute_set([vb], name=name), category="host")


def _norm_steps(dev, name: str, tiles_per_param, tiles_a, partials, ratio_args: dict):
    """The two supersteps of a per-tensor trust ratio (LAMB, LARS) over the vertices
    ``tiles_a`` (each tensor's, in order, on ``tiles_per_param``): ``partials(sums_off)`` is
    the vertex batch that writes each vertex's two float32 partial sums at ``sums_off`` on its
    tile; they are exchanged to each tensor's first tile (its owner), where the
    ``<name>_ratio`` vertex sums the k pairs and writes the ratio, which is broadcast back to
    every vertex's tile. Returns the two supersteps and each vertex's ratio offset."""
    m = dev.machine
    NT = m.n_tiles
    V = tiles_a.size
    # per vertex: partial sums (8 B) on its tile; per parameter: the owner (first tile)
    # receives k pairs; every vertex gets the ratio (4 B) on its tile
    sums = dev.alloc(f"{name}.partials", np.bincount(tiles_a, minlength=NT) * 8, "scratch")
    ratio = dev.alloc(f"{name}.ratio", np.bincount(tiles_a, minlength=NT) * 4, "scratch")
    owners = np.array([t[0] for t in tiles_per_param], dtype=np.int32)
    ks = np.array([t.size for t in tiles_per_param], dtype=np.int64)
    recv = dev.alloc(f"{name}.gathered",
                     np.bincount(owners, weights=ks * 8, minlength=NT).astype(np.int64), "exchange")
    # slot of each vertex among the vertices of its tile, and among its parameter's tiles
    order = np.argsort(tiles_a, kind="stable")
    slot = np.empty(V, dtype=np.int64)
    counts = np.bincount(tiles_a, minlength=NT)
    slot[order] = np.arange(V) - np.repeat(np.cumsum(counts) - counts, counts)[np.arange(V)]
    param_of = np.repeat(np.arange(len(tiles_per_param)), ks)
    j_in_param = np.arange(V) - np.repeat(np.cumsum(ks) - ks, ks)
    owner_slot = np.zeros(len(owners), dtype=np.int64)     # base of each parameter on its owner
    seen: dict[int, int] = {}
    for i, o in enumerate(owners):
        owner_slot[i] = seen.get(int(o), 0)
        seen[int(o)] = owner_slot[i] + ks[i]
    sums_off = sums[tiles_a] + slot * 8
    ratio_off = ratio[tiles_a] + slot * 4
    own_t = owners[param_of]
    gather_off = recv[own_t] + (owner_slot[param_of] + j_in_param) * 8
    a = partials(sums_off)
    ex1 = dev.exchange(tiles_a, sums_off, own_t, gather_off, np.full(V, 8), name=f"{name} partial norms")
    first = j_in_param == 0
    rsrc = recv[owners] + owner_slot * 8
    rdst = ratio_off[first]
    b = VertexBatch(_Codelet(f"{name}_ratio", f"{name}_ratio", ("src", "k", "dst", *ratio_args)), owners,
                    {"src": rsrc, "k": ks, "dst": rdst, **ratio_args}, _ratio_cycles(m, ks, name),
                    regions=[(rsrc, ks * 8), (rdst, np.full(owners.size, 4))],
                    why=f"{name} trust ratio of each tensor on its first tile")
    ex2_keep = ~first
    ex2 = dev.exchange(own_t[ex2_keep], ratio_off[first][param_of[ex2_keep]], tiles_a[ex2_keep],
                       ratio_off[ex2_keep], np.full(int(ex2_keep.sum()), 4), name=f"{name} ratio broadcast")
    first_name = "direction" if name == "lamb" else "norms"
    return [Superstep(f"{name} {first_name}", compute=dev.compute_set([a], name=f"{name} {first_name}"),
                      exchange=ex1, category="optimizer"),
            Superstep(f"{name} trust ratio", compute=dev.compute_set([b], name=f"{name} ratio"),
                      exchange=ex2 if ex2_keep.any() else None, category="optimizer")], ratio_off


def _lamb_steps(dev, opt, tiles_per_param, tiles_a, off_a, n_a, hyper, regions,
                udt: str = "float32") -> list[Superstep]:
    m = dev.machine

    def direction(sums_off):
        return VertexBatch(_Codelet("lamb_direction", "lamb_direction", ("off", "n", "h", "sums")), tiles_a,
                           {"off": off_a, "n": n_a, "h": hyper, "sums": sums_off},
                           optimizer_vertex_cycles(m, opt, n_a, dtype=udt),
                           regions=regions + [(sums_off, np.full(tiles_a.size, 8))],
                           why=f"lamb moments, direction and partial norms of {int(n_a.max())} elements")

    steps, ratio_off = _norm_steps(dev, "lamb", tiles_per_param, tiles_a, direction, {})
    c = VertexBatch(_Codelet("lamb_apply", "lamb_apply", ("off", "n", "h", "ratio")), tiles_a,
                    {"off": off_a, "n": n_a, "h": hyper, "ratio": ratio_off},
                    optimizer_vertex_cycles(m, opt, n_a, "lamb_apply", udt),
                    regions=[regions[0], regions[-1], (ratio_off, np.full(tiles_a.size, 4))],
                    why="lamb apply p -= lr * ratio * r")
    return steps + [Superstep("lamb apply", compute=dev.compute_set([c], name="lamb apply"),
                              category="optimizer")]


def _lars_steps(dev, opt, tiles_per_param, adapt, tiles_a, off_a, n_a, hyper, regions,
                udt: str = "float32") -> list[Superstep]:
    """LARS: the norms of the adapted tensors' w and g and their local learning rates
    (:func:`_norm_steps`), then one momentum update over every tensor; ``adapt`` marks the
    adapted tensors (:func:`lars_adapted`), the others keep ``lr``, no weight decay."""
    m = dev.machine
    adapted = np.repeat(adapt, [t.size for t in tiles_per_param])       # per vertex

    def sub(mask):      # the vertices of ``mask``: tiles, offsets, sizes, regions (p, g, momentum)
        return tiles_a[mask], off_a[mask], n_a[mask], [(o[mask], b[mask]) for o, b in regions]

    steps, apply = [], []
    if adapted.any():
        t, o, n, reg = sub(adapted)
        per_param = [tt for tt, a in zip(tiles_per_param, adapt) if a]

        def norms(sums_off):
            return VertexBatch(_Codelet("lars_norms", "lars_norms", ("off", "n", "sums")), t,
                               {"off": o, "n": n, "sums": sums_off},
                               optimizer_vertex_cycles(m, opt, n, "lars_norms", udt),
                               regions=reg[:2] + [(sums_off, np.full(t.size, 8))],
                               why=f"lars partial sums of w² and g² over {int(n.max())} elements")

        steps, ratio_off = _norm_steps(dev, "lars", per_param, t, norms, {"h": hyper})
        apply.append(VertexBatch(_Codelet("lars_apply", "lars_apply", ("off", "n", "h", "ratio")), t,
                                 {"off": o, "n": n, "h": hyper, "ratio": ratio_off},
                                 optimizer_vertex_cycles(m, opt, n, dtype=udt),
                                 regions=reg + [(ratio_off, np.full(t.size, 4))],
                                 why="lars momentum at lr * trust ratio, weight decay in the gradient"))
    if not adapted.all():
        t, o, n, reg = sub(~adapted)
        apply.append(VertexBatch(_Codelet("lars_apply", "lars_apply", ("off", "n", "h", "ratio")), t,
                                 {"off": o, "n": n, "h": hyper, "ratio": np.full(t.size, -1, np.int64)},
                                 optimizer_vertex_cycles(m, opt, n, "lars_plain", udt), regions=reg,
                                 why="lars-skipped 1-D tensors (biases, norms): momentum at lr"))
    return steps + [Superstep("lars apply", compute=dev.compute_set(apply, name="lars apply"),
                              category="optimizer")]


def _hyper(opt: Optimizer, step: int, out: np.ndarray) -> None:
    b1, b2 = opt.betas
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    out[:] = 0
    out[0], out[1] = opt.lr, opt.weight_decay
    if opt.name == "sgd_momentum":
        out[2], out[3], out[4] = opt.momentum, 1 - opt.dampening, 1.0 if step == 1 else 0.0
    elif opt.name == "adam":
        out[2:8] = (1 - b1, b2, opt.eps, opt.lr / bc1, np.sqrt(bc2), 1 - b2)
    elif opt.name == "lamb":
        out[2:9] = (b1, b2, opt.eps, 1 / bc1, 1 / bc2, 1 - b2, 1 - b1)
    elif opt.name == "lars":
        out[2:5] = (opt.momentum, opt.eta, opt.eps)


def _profile_kw(opt: Optimizer, shapes, location: str, state_dtype: tuple = ()) -> dict[str, Any]:
    n = sum(int(np.prod(s, dtype=np.int64)) for s in shapes)
    return {"info": {"op": "optimizer_step", "optimizer": opt.name, "pass": "update",
                     "parameters": n, "state_location": location,
                     "state_dtype": list(state_dtype or ("float32",) * opt.n_state),
                     "layer": f"{opt.name} over {len(shapes)} tensors, {n} parameters"}}


def _check_location(state_location: str) -> None:
    if state_location not in ("chip", "host"):
        raise ValueError(f"state_location must be 'chip' or 'host', got {state_location!r}")


def optimizer_step(params: Sequence[np.ndarray], grads: Sequence[np.ndarray],
                   state: Sequence[dict[str, np.ndarray]] | None = None, *,
                   optimizer: Any = "sgd", step: int = 1, machine: MachineSpec | str = GC200,
                   state_location: str = "chip") -> OptimizerRun:
    """One optimizer step over float32 parameters, computed tile by tile.

    Parameters
    ----------
    params, grads : sequences of float32 ndarrays (same shapes, pairwise)
    state : one dict per parameter (``torch.optim`` state names: ``momentum_buffer``,
        ``exp_avg``, ``exp_avg_sq``), or None for a fresh optimizer (zeros; step 1).
    optimizer : name or :class:`Optimizer`
    step : int
        The step number (1 = first), for Adam/LAMB bias correction and the first momentum
        step (which, as in torch, stores the gradient as the buffer).
    state_location : {"chip", "host"}
        Where the optimizer state lives between steps (see module docstring).

    Returns
    -------
    OptimizerRun
    """
    opt = get_optimizer(optimizer)
    _check_location(state_location)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step must be an int >= 1, got {step!r}")
    params, grads = list(params), list(grads)
    if len(params) != len(grads) or not params:
        raise ValueError(f"need one gradient per parameter, got {len(params)} parameters and "
                         f"{len(grads)} gradients")
    for i, (p, g) in enumerate(zip(params, grads)):
        for nm, a in (("parameter", p), ("gradient", g)):
            if not isinstance(a, np.ndarray) or canonical_dtype(a.dtype) != "float32":
                raise TypeError(f"{nm} {i} must be a float32 ndarray (optimizer steps execute "
                                f"in float32), got {getattr(a, 'dtype', type(a).__name__)}")
        if p.shape != g.shape:
            raise ValueError(f"gradient {i} has shape {g.shape} but parameter {i} has {p.shape}")
    if state is not None and len(state) != len(params):
        raise ValueError(f"need one state dict per parameter, got {len(state)}")
    shapes = [p.shape for p in params]
    prog = _build(opt, shapes, "float32", get_machine(machine), state_location)
    dev = prog.device
    _hyper(opt, step, prog.hyper)
    with dev.arena.lock:
        for i in range(len(params)):
            dev.write(prog.p[i], params[i])
            dev.write(prog.g[i], grads[i])
            for nm, t in zip(opt.state_names, prog.s[i]):
                if state is not None and nm not in state[i]:
                    raise ValueError(f"state {i} has no {nm!r} (a {opt.name} state holds "
                                     f"{list(opt.state_names)})")
                dev.write(t, np.zeros(t.shape, np.float32) if state is None else state[i][nm])
        profile = dev.run(dev.program(prog.steps, label=f"{opt.name} step"), "execute",
                          **_profile_kw(opt, shapes, state_location))
        new_p = [dev.read(t) for t in prog.p]
        new_s = [{nm: dev.read(t) for nm, t in zip(opt.state_names, st)} for st in prog.s]
    return OptimizerRun(params=new_p, state=new_s, profile=profile)


def estimate_optimizer_step(shapes: Sequence[Sequence[int]], *, optimizer: Any = "sgd",
                            dtype: Any = "float32", machine: MachineSpec | str = GC200,
                            state_location: str = "chip", state_dtype: Any = "float32") -> Profile:
    """The cycles :func:`optimizer_step` reports for parameters of these shapes (no data).

    ``dtype`` is the parameters' and gradients' storage type; ``state_dtype`` the optimizer
    state's, "float32" (default), "float16" or one per state slot (:func:`state_dtypes`).
    The update computes in float16 only when both are float16 (:func:`update_dtype`); with
    ``state_location="host"`` the streamed bytes follow ``state_dtype``.
    """
    opt = get_optimizer(optimizer)
    _check_location(state_location)
    sdt = state_dtypes(opt, state_dtype)
    shapes = [tuple(int(x) for x in s) for s in shapes]
    if not shapes or any(int(np.prod(s)) < 1 for s in shapes):
        raise ValueError(f"need at least one non-empty parameter shape, got {shapes}")
    # A cost estimate, not a placement: the caller (the network's liveness model) decides
    # whether the state fits, so a table too large for one chip is still costed.
    prog = _build(opt, shapes, canonical_dtype(dtype), get_machine(machine), state_location,
                  allow_overflow=True, state_dtype=sdt)
    return prog.device.run(prog.device.program(prog.steps, label=f"{opt.name} step"), "estimate",
                           **_profile_kw(opt, shapes, state_location, sdt))


def with_lr(opt: Any, lr: float) -> Optimizer:
    """``opt`` with another learning rate."""
    return replace(get_optimizer(opt), lr=float(lr))
