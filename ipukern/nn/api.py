"""estimate_network / run_network: the public entry points for whole networks."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..conv import temp_bytes_bound
from ..core.memory import TileMemoryError
from ..dtypes import canonical_dtype, partials_dtype
from ..machine import GC200, MachineSpec, get_machine
from .compile import NetworkProgram, compile_network
from .layers import PlanContext
from .network import Network
from .profile import NetworkProfile

__all__ = ["NetworkRun", "estimate_network", "network_profile", "run_network"]

#: the max-batch search stops here (reported as this value when even it fits)
MAX_BATCH_SEARCH = 4096


@dataclass
class NetworkRun:
    """Result of :func:`run_network`: ``output`` (the first network output as a host
    array), ``outputs`` (every output by name) and ``profile`` (same cycles as
    :func:`estimate_network`)."""

    output: np.ndarray
    outputs: dict[str, np.ndarray]
    profile: NetworkProfile


def _context(dtype: Any, partials: Any, machine: MachineSpec | str,
             amp: float | None = None) -> PlanContext:
    dt = canonical_dtype(dtype)
    if partials in ("half", "float16", "fp16") and dt == "float32":
        partials = "float"
    m = get_machine(machine)
    if amp is not None:
        temp_bytes_bound(m, amp)          # a clear error for a bad proportion
        amp = float(amp)
    return PlanContext(m, dt, partials_dtype(partials, dt), amp)


def _check_batch(batch: Any) -> int:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    return int(batch)


def _check_net(net: Any) -> Network:
    if not isinstance(net, Network):
        raise TypeError(f"expected an ipukern Network, got {type(net).__name__}")
    if not net.outputs:
        raise ValueError(f"network {net.name!r} has no outputs; call net.output(...)")
    return net


def _spare(net: Network, batch: int, ctx: PlanContext, fold_bn: bool) -> float:
    """Bytes left on the fullest tile at ``batch`` (negative: over budget; -inf: a layer
    fits no plan)."""
    try:
        prog = compile_network(net, batch, ctx, fold_bn=fold_bn)
    except TileMemoryError:      # a layer fits no plan; a host MemoryError is not an answer
        return -math.inf
    live, _ = prog.liveness()
    m = ctx.machine
    return m.tile_bytes - m.reserved_bytes_per_tile - int(live.max())


def _fits(net: Network, batch: int, ctx: PlanContext, fold_bn: bool) -> bool:
    return _spare(net, batch, ctx, fold_bn) >= 0


def search_max_batch(fits: Callable[[int], bool] | None, start: int = 1,
                     limit: int = MAX_BATCH_SEARCH, *,
                     spare: Callable[[int], float] | None = None) -> int:
    """Largest batch in [1, limit] for which ``fits`` holds (0 if batch 1 does not), for a
    ``fits`` monotone in the batch: doubling (or halving) from ``start``, then bisection,
    so about 2 log2(answer / start) evaluations. Starting at the batch just estimated
    costs nothing there (its program is cached).

    ``spare`` (instead of ``fits``): the bytes left at batch b, ``fits(b)`` being
    ``spare(b) >= 0``. While growing, the next batch tried is the larger of the double and
    the batch where the line through the last two fitting batches' spare bytes reaches 0
    (capped at ``limit``; once, a zero short of the double, or the batch above when the
    zero is the batch itself): a network with bytes to spare gets there in a few evaluations
    (the tiny CNN of tests/nn/test_optimizer_state_dtype.py, fitting up to ``limit`` from
    batch 4: 4 instead of 11, each planning the whole network at a new batch); an
    overshoot only widens the bisection's bracket (at most about 2 log2(limit)
    evaluations in all). Exact whenever ``fits`` is monotone.
    """
    if (fits is None) == (spare is None) or not callable(fits if spare is None else spare):
        raise TypeError("search_max_batch needs exactly one of fits (batch -> bool) and "
                        "spare (batch -> bytes left), a callable")
    for name, v in (("start", start), ("limit", limit)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"search_max_batch: {name} must be an int, got {v!r}")
    if limit < 1:
        raise ValueError(f"search_max_batch: limit must be at least 1, got {limit}")
    start, limit = int(start), int(limit)
    got: dict[int, float] = {}

    def ok(b: int) -> bool:
        if spare is None:
            return bool(fits(b))
        got[b] = float(spare(b))
        if math.isnan(got[b]):
            raise ValueError(f"search_max_batch: spare({b}) is NaN")
        return got[b] >= 0

    b = min(max(1, start), limit)
    if ok(b):
        lo, hi, prev, near = b, None, None, True
        while hi is None and lo < limit:
            b = 2 * lo
            if prev is not None:                 # only with spare: the line's zero
                drop = (got[prev] - got[lo]) / (lo - prev)
                z = limit if drop <= 0 else lo + int(got[lo] / drop)
                if z >= b:
                    b = z
                elif near:                       # once: the zero is near (or at lo)
                    b, near = max(z, lo + 1), False
            b = min(b, limit)
            if ok(b):
                prev, lo = (lo if spare is not None else None), b
            else:
                hi = b
        if hi is None:
            return lo
    else:
        lo, hi = 0, b
        while lo == 0 and hi > 1:
            b = hi // 2
            if ok(b):
                lo = b
            else:
                hi = b
        if lo == 0:
            return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def max_batch(net: Network, ctx: PlanContext, fold_bn: bool = True, start: int = 1) -> int:
    """Largest batch whose program fits the tiles (0 if batch 1 does not), found by
    doubling then bisection with the real planner and liveness, guided by the bytes left
    (:func:`search_max_batch`)."""
    from .host_memory import HostMemoryGuard
    return search_max_batch(None, start, spare=HostMemoryGuard(lambda b: _spare(net, b, ctx, fold_bn)))


def network_profile(prog: NetworkProgram, *, allow_overflow: bool = False,
                    label: str | None = None) -> NetworkProfile:
    """The profile of a compiled forward program (raises TileMemoryError unless it fits
    or ``allow_overflow``)."""
    m = prog.machine
    live, weights = prog.liveness()
    steps = []
    for s in prog.steps:
        op_x = sum(r.exchange_cycles for r in s.plan.records)
        steps.append({"name": s.name, "op": s.op, "in_shapes": s.in_shapes, "out_shape": s.out_shape,
                      "pass": s.plan.pass_, "method": s.plan.method, "cycles": s.cycles,
                      "exchange": s.rearrange_cycles + op_x, "rearrange": s.rearrange_cycles,
                      "flops": s.plan.flops})
    ctx = prog.ctx
    prof = NetworkProfile(machine=m, batch=prog.batch, dtype=ctx.dtype, partials=ctx.partials,
                          steps=steps, records=prog.records(), live=live, weights=weights,
                          flops=prog.flops, label=label or prog.net.name,
                          max_batch_fn=lambda: max_batch(prog.net, ctx, prog.fold_bn, prog.batch))
    mem = prof._memory
    if not mem["fits"] and not allow_overflow:
        t, i = mem["busiest_tile"], mem["busiest_step"]
        raise TileMemoryError(
            f"network {prog.net.name!r} (batch {prog.batch}) does not fit: at layer "
            f"{mem['busiest_layer']!r} (step {i}) tile {t} needs {mem['peak_bytes']:,} B "
            f"> budget {mem['budget_bytes']:,} B (incl. {mem['reserve_bytes']:,} B reserved); "
            "pass allow_overflow=True to get the report", tile=t, requested=mem["peak_bytes"],
            used=mem["peak_bytes"], budget=mem["budget_bytes"])
    return prof


def estimate_network(net: Network, batch: int = 16, dtype: Any = "float16", partials: Any = "half",
                     machine: MachineSpec | str = GC200, training: bool = False,
                     recompute: Any = None, optimizer: str = "sgd_momentum", *,
                     optimizer_state_dtype: Any = "float32",
                     fold_bn: bool | None = None, allow_overflow: bool = False,
                     available_memory_proportion: float | None = None,
                     **training_kw: Any) -> NetworkProfile:
    """Cycles, throughput and memory of ``net`` on one IPU, without touching data.

    Parameters
    ----------
    net : Network
    batch : int
        Samples per step.
    dtype : {"float16", "float32"}
    partials : {"half", "float"}
        Accumulation type of convs/matmuls (fp32 networks always accumulate in float).
    machine : MachineSpec or preset name
    training : bool
        False: the inference forward pass. True: forward, backward and optimizer update
        (provided by :mod:`ipukern.nn.training`).
    recompute, optimizer
        Training options (see :mod:`ipukern.nn.training`).
    optimizer_state_dtype : {"float32", "float16"} or one per state slot
        Storage type of the optimizer state (momentum; Adam/LAMB moments, e.g.
        ``("float16", "float32")`` for a half first and float second moment): its bytes in
        the per-tile liveness, the update's cycles (half arithmetic when weights and state
        are float16) and, with ``state_location="host"``, the streamed bytes. Weights are
        stored and updated in ``dtype``; no float32 master copy is modelled (Graphcore's
        ``--precision 16.16``; its ``16.32`` is not).
    fold_bn : bool, optional
        Fold inference batch norms into the preceding conv (default: True for inference).
    allow_overflow : bool
        Report a network that does not fit instead of raising :class:`TileMemoryError`.
    available_memory_proportion : float in (0, 1], optional
        PopLibs' ``availableMemoryProportion`` for every conv and matmul pass: the share of
        a tile's bytes the op's temporary buffers may use when it is planned (None:
        PopLibs' default 0.6; Graphcore's ResNet-50 training configurations use e.g.
        0.16). See :func:`ipukern.conv.plan_conv`.

    Returns
    -------
    NetworkProfile
    """
    net = _check_net(net)
    batch = _check_batch(batch)
    ctx = _context(dtype, partials, machine, available_memory_proportion)
    if training:
        training_kw["optimizer_state_dtype"] = optimizer_state_dtype
        try:
            from . import training as _training
        except ImportError:
            raise NotImplementedError("training=True needs ipukern.nn.training (the training "
                                      "passes), which is not available in this build") from None
        return _training.estimate_training(net, batch, ctx, recompute=recompute, optimizer=optimizer,
                                           allow_overflow=allow_overflow, **training_kw)
    if recompute is not None:
        raise ValueError("recompute= applies to training=True only")
    if not (isinstance(optimizer_state_dtype, str) and optimizer_state_dtype == "float32"):
        raise ValueError("optimizer_state_dtype= applies to training=True only")
    if training_kw:
        raise TypeError(f"unexpected arguments {sorted(training_kw)}")
    prog = compile_network(net, batch, ctx, fold_bn=True if fold_bn is None else fold_bn)
    return network_profile(prog, allow_overflow=allow_overflow)


def run_network(net: Network, x: Any, params: dict[str, Any] | None = None, *,
                dtype: Any = "float32", partials: Any = "float", machine: MachineSpec | str = GC200,
                fold_bn: bool = True, allow_overflow: bool = False,
                available_memory_proportion: float | None = None) -> NetworkRun:
    """Execute the forward pass on real data, tile by tile; same cycles as the estimate.

    Parameters
    ----------
    net : Network
    x : ndarray or dict of str -> ndarray
        The input (batch first), or one array per network input by name (integer inputs
        such as token ids or labels stay host data).
    params : dict, optional
        ``"<layer>.<param>" -> array``; None uses the weights the network carries
        (``from_torch``) or ``net.init_params(seed=0)``.
    dtype, partials, machine, fold_bn, allow_overflow, available_memory_proportion
        As :func:`estimate_network` (default float32 here: results comparable with a
        float32 framework).

    Returns
    -------
    NetworkRun
    """
    net = _check_net(net)
    feeds = x if isinstance(x, dict) else {net.inputs[0]: x} if len(net.inputs) == 1 else None
    if feeds is None:
        raise ValueError(f"network {net.name!r} has inputs {net.inputs}: pass a dict of arrays")
    unknown = set(feeds) - set(net.inputs)
    if unknown:
        raise ValueError(f"unknown network inputs {sorted(unknown)}; inputs are {net.inputs}")
    batch = None
    arrays = {}
    for name in net.inputs:
        if name not in feeds:
            raise ValueError(f"missing network input {name!r}")
        a = np.asarray(feeds[name])
        node = net.nodes[name]
        want = node.sample_shape
        if a.ndim != len(want) + 1 or tuple(a.shape[1:]) != want:
            raise ValueError(f"input {name!r} must have shape (batch, {', '.join(map(str, want))}), "
                             f"got {tuple(a.shape)}")
        if batch is None:
            batch = a.shape[0]
        elif a.shape[0] != batch:
            raise ValueError(f"input {name!r} has batch {a.shape[0]} but another input has {batch}")
        if node.kind == "int":
            if not np.issubdtype(a.dtype, np.integer):
                raise TypeError(f"input {name!r} holds integer ids/labels, got {a.dtype}")
        elif not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"input {name!r} must be floating point, got {a.dtype}")
        arrays[name] = a
    batch = _check_batch(int(batch))
    if params is None:
        params = net.params if net.params is not None else net.init_params(seed=0)
    net.check_params(params)
    ctx = _context(dtype, partials, machine, available_memory_proportion)
    prog = compile_network(net, batch, ctx, fold_bn=fold_bn)
    prof = network_profile(prog, allow_overflow=allow_overflow)
    outs = prog.execute(arrays, params)
    return NetworkRun(output=outs[net.outputs[0]], outputs=outs, profile=prof)
