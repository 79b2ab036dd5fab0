"""estimate_network / run_network: the public entry points for whole networks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _progress
from ..core import TileMemoryError
from ..machine import GC200, MachineSpec
from .compile import compile_network
from .max_batch import max_batch
from .layers import plan_context
from .network import Network
from .profile import NetworkProfile
from .program import NetworkProgram

__all__ = ["NetworkRun", "estimate_network", "network_profile", "run_network"]

@dataclass
class NetworkRun:
    """Result of :func:`run_network`: ``output`` (the first network output as a host
    array), ``outputs`` (every output by name) and ``profile`` (same cycles as
    :func:`estimate_network`)."""

    output: np.ndarray
    outputs: dict[str, np.ndarray]
    profile: NetworkProfile


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
    ctx = plan_context(dtype, partials, machine, available_memory_proportion)
    if training:
        training_kw["optimizer_state_dtype"] = optimizer_state_dtype
        from .training import estimate_training
        return estimate_training(net, batch, ctx, recompute=recompute, optimizer=optimizer,
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
                available_memory_proportion: float | None = None,
                cache: bool = True) -> NetworkRun:
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
    cache : bool
        Read the host copy tables of the first run in this process from the on-disk cache
        (``$IPUKERN_CACHE_DIR/tables``, :mod:`ipukern.nn.host.table_cache`) or write them
        there; False builds them without touching the disk. Same bits and cycles.

    A call running over a second draws a progress line on stderr (layers planned, then
    run) when ``IPUKERN_PROGRESS=1`` or stderr is a terminal (``IPUKERN_PROGRESS=0``: never).

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
    if not isinstance(cache, bool):
        raise TypeError(f"cache must be True or False, got {cache!r}")
    if params is None:
        params = net.params if net.params is not None else net.init_params(seed=0)
    net.check_params(params)
    ctx = plan_context(dtype, partials, machine, available_memory_proportion)
    with _progress.Progress(f"run_network {net.name}", enabled=_progress.enabled()):
        prog = compile_network(net, batch, ctx, fold_bn=fold_bn)
        prof = network_profile(prog, allow_overflow=allow_overflow)
        outs = prog.execute(arrays, params, cache=cache)
    return NetworkRun(output=outs[net.outputs[0]], outputs=outs, profile=prof)
