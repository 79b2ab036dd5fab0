"""A network's launches on one GPU as a timeline: host issue, GPU execution, DDP overlap.

:func:`network_timeline` lowers a network (:func:`~ipukern.gpu.lowering.lower_network`),
prices every launch (:func:`~ipukern.gpu.kernels.kernel_seconds`) and plays the step:

* the host issues launch ``i`` at ``i x host_per_op_s`` (the stack's per-op cost; CUDA
  graphs 0); the GPU starts it when both the host has issued it and the previous kernel has
  ended, so ``end[i] = max(issue[i], end[i-1]) + t[i]``, computed in closed form as a
  cumulative maximum (no Python loop over kernels). Small kernels under eager PyTorch are
  host-bound, as measured;
* training: forward launches, then backward in reverse layer order, then the optimizer's
  multi-tensor-apply launches (PyTorch >= 2.0 runs ``foreach`` updates on CUDA, apex's fused
  optimizers in MLPerf: ``ceil(tensors / 48)`` launches over all the state's bytes;
  ``multi_tensor_apply``'s depth-3 chunk list holds 48 tensors, apex csrc/multi_tensor_apply.cuh);
* each parameter's gradient is ready when its layer's backward ends; DDP buckets them and
  all-reduces under the rest of the backward (:func:`~ipukern.gpu.comm.ddp_exposed_seconds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .. import _memo
from ..dtypes import DTYPES
from ..ops import OPTIMIZER_WORDS
from .comm import ddp_exposed_seconds
from .kernels import GPUTarget, KernelCall, kernel_seconds
from .lowering import lower_network
from .stacks import SoftwareStack

__all__ = ["Timeline", "network_timeline", "play_launches"]

_TENSORS_PER_LAUNCH = 48


@dataclass(frozen=True)
class Timeline:
    """One step of a network on one GPU."""

    layers: list[dict]          # per layer: name, op, forward_s, backward_s, kernels, why
    forward_seconds: float      # from step start to the end of the last forward kernel
    backward_seconds: float     # from there to the end of the last backward kernel
    optimizer_seconds: float
    exposed_all_reduce_seconds: float
    all_reduce_seconds: float   # total bucket all-reduce time (hidden or not)
    buckets: int
    kernels: int
    host_bound_fraction: float  # of the step's kernels, those that waited for the host
    gpu_busy_seconds: float     # sum of kernel times

    @property
    def step_seconds(self) -> float:
        return (self.forward_seconds + self.backward_seconds + self.exposed_all_reduce_seconds
                + self.optimizer_seconds)


def play_launches(times: np.ndarray, host: float, t0_issue: float, t0_gpu: float) -> tuple[np.ndarray, int]:
    """End times of kernels issued every ``host`` s from ``t0_issue`` on a GPU free at ``t0_gpu``."""
    if times.size == 0:
        return times, 0
    issue = t0_issue + host * np.arange(times.size, dtype=np.float64)
    csum = np.cumsum(times)
    before = csum - times                            # GPU work before kernel i
    # end[i] = max(t0_gpu + csum[i], max_{j<=i}(issue[j] - before[j]) + csum[i])
    start_bound = np.maximum.accumulate(np.maximum(issue - before, t0_gpu))
    ends = start_bound + csum
    prev_end = np.concatenate(([t0_gpu], ends[:-1]))
    return ends, int(np.count_nonzero(issue > prev_end))


def _layer_params(net: Any) -> dict[str, list[int]]:
    shapes = net.shapes(1)
    out: dict[str, list[int]] = {}
    for name, layer in net.layers:
        ps = layer.param_shapes([shapes[i] for i in net.nodes[name].inputs])
        if ps:
            out[name] = [int(np.prod(s)) for s in ps.values()]
    return out


@dataclass(frozen=True)
class _Priced:
    """A network's launches at one batch on one target and stack, each priced."""

    lowered: tuple
    fwd_t: np.ndarray           # forward launch seconds, program order
    bwd_t: np.ndarray           # backward launch seconds, reverse layer order
    owner: tuple[int, ...]      # layer index of each backward launch
    params: dict[str, list[int]]


#: priced launches by network version, batch, target, stack and mode: what a repeated
#: estimate of the same network (other systems, GPU counts, overlap, optimizers) shares.
#: Only the timeline and the all-reduce are played again.
PRICED_CACHE_SIZE = 64
_PRICED = _memo.register(_memo.LruCache("gpu.priced_launches", maxsize=PRICED_CACHE_SIZE),
                         per_batch=True)


def _price_launches(net: Any, batch: int, target: GPUTarget, stack: SoftwareStack,
                    training: bool) -> _Priced:
    gpu, dtype, tf32, direct_curve = target.gpu, target.dtype, target.tf32, target.direct_curve
    lowered = tuple(lower_network(net, batch, gpu, stack, dtype, training=training, tf32=tf32,
                                  direct_curve=direct_curve))
    price: dict[KernelCall, float] = {}

    def t(call: KernelCall) -> float:
        s = price.get(call)
        if s is None:
            s = price[call] = kernel_seconds(call, gpu, dtype, tf32=tf32,
                                            direct_curve=direct_curve).seconds
        return s

    fwd_t = np.array([t(c) for lk in lowered for c in lk.forward], dtype=np.float64)
    owner = tuple(li for li in reversed(range(len(lowered))) for _ in lowered[li].backward)
    bwd_t = np.array([t(c) for li in reversed(range(len(lowered))) for c in lowered[li].backward],
                     dtype=np.float64)
    for a in (fwd_t, bwd_t):
        a.flags.writeable = False
    return _Priced(lowered, fwd_t, bwd_t, owner, _layer_params_of(net) if training else {})


def _priced(net: Any, batch: int, target: GPUTarget, stack: SoftwareStack, training: bool) -> _Priced:
    key = (id(net), net.version, batch, target, stack, training)
    try:
        hit = _PRICED.get(key)
    except TypeError:           # an unhashable custom curve or stack: price without caching
        return _price_launches(net, batch, target, stack, training)
    if hit is not None and hit[0] is net:
        return hit[1]
    res = _price_launches(net, batch, target, stack, training)
    _PRICED.put(key, (net, res))
    return res


_PARAMS = _memo.register(_memo.LruCache("gpu.layer_params", maxsize=PRICED_CACHE_SIZE))


def _layer_params_of(net: Any) -> dict[str, list[int]]:
    """:func:`_layer_params`, kept per network version (they do not depend on the batch)."""
    key = (id(net), net.version)
    hit = _PARAMS.get(key)
    if hit is not None and hit[0] is net:
        return hit[1]
    res = _layer_params(net)
    _PARAMS.put(key, (net, res))
    return res


def network_param_count(net: Any) -> int:
    """Parameters of ``net`` (``net.n_params``: the same per-layer shapes), cached."""
    return sum(sum(v) for v in _layer_params_of(net).values())


def network_timeline(net: Any, batch: int, target: GPUTarget, stack: SoftwareStack, *,
                     training: bool, optimizer: str = "sgd_momentum",
                     all_reduce: Callable[[float], float] | None = None,
                     optimizer_shards: int = 1) -> Timeline:
    """Play one forward pass (or training step) of ``net`` at ``batch`` on one GPU.

    ``all_reduce`` (bytes -> seconds) prices one DDP bucket of gradients in the target's
    dtype; None: a single GPU.
    ``optimizer_shards``: this GPU updates 1/shards of the parameters (a sharded optimizer)."""
    pr = _priced(net, batch, target, stack, bool(training))
    lowered, fwd_t = pr.lowered, pr.fwd_t
    host = stack.host_per_op_s
    fwd_end, waited = play_launches(fwd_t, host, 0.0, 0.0)
    t_fwd = float(fwd_end[-1]) if fwd_end.size else 0.0
    rows, idx = [], 0
    for lk in lowered:
        n = len(lk.forward)
        rows.append({"name": lk.name, "op": lk.op, "forward_s": float(fwd_t[idx:idx + n].sum()),
                     "backward_s": 0.0, "kernels": n,
                     "why": "; ".join(c.label for c in lk.forward) or "no kernel (view or fused)"})
        idx += n
    issued = fwd_t.size
    if not training:
        return Timeline(rows, t_fwd, 0.0, 0.0, 0.0, 0.0, 0, issued, waited / max(issued, 1),
                        float(fwd_t.sum()))
    order = list(range(len(lowered)))[::-1]
    bwd_t, owner = pr.bwd_t, pr.owner
    bwd_end, w2 = play_launches(bwd_t, host, issued * host, t_fwd)
    t_bwd_end = float(bwd_end[-1]) if bwd_end.size else t_fwd
    for li, s in zip(owner, bwd_t):
        rows[li]["backward_s"] += float(s)
        rows[li]["kernels"] += 1
    # gradients: ready when the owning layer's last backward kernel ends
    params = pr.params
    last_end: dict[int, float] = {}
    for li, e in zip(owner, bwd_end):
        last_end[li] = float(e) - t_fwd
    ready, sizes = [], []
    grad_bytes = DTYPES[target.dtype].itemsize
    for li in order:
        for n in params.get(lowered[li].name, []):
            ready.append(last_end.get(li, t_bwd_end - t_fwd))
            sizes.append(n * grad_bytes)
    exposed = comm = 0.0
    buckets = 0
    if all_reduce is not None and sizes:
        ov = ddp_exposed_seconds(ready, sizes, all_reduce=all_reduce)
        exposed, comm, buckets = ov.exposed_s, ov.comm_s, ov.buckets
    n_params = sum(sum(v) for v in params.values())
    n_tensors = sum(len(v) for v in params.values())
    launches = max(1, math.ceil(n_tensors / _TENSORS_PER_LAUNCH)) if n_tensors else 0
    opt_bytes = OPTIMIZER_WORDS[optimizer] * 4 * n_params / optimizer_shards
    opt_call = KernelCall("optimizer", "optimizer step", nbytes=math.ceil(opt_bytes / max(launches, 1)))
    opt_t = np.full(launches, kernel_seconds(opt_call, target.gpu, target.dtype, tf32=target.tf32,
                                             direct_curve=target.direct_curve).seconds)
    opt_end, w3 = play_launches(opt_t, host, (issued + bwd_t.size) * host, t_bwd_end + exposed)
    t_opt = (float(opt_end[-1]) - t_bwd_end - exposed) if opt_end.size else 0.0
    total = issued + bwd_t.size + opt_t.size
    return Timeline(rows, t_fwd, t_bwd_end - t_fwd, t_opt, exposed, comm, buckets, total,
                    (waited + w2 + w3) / max(total, 1),
                    float(fwd_t.sum() + bwd_t.sum() + opt_t.sum()))
