"""Memory-bound GPU kernels: element-wise, norms, softmax, pools, reductions, optimizer updates.

One launch moving ``nbytes`` (reads + writes) takes::

    t = launch_s + nbytes / (e_kind x ceiling x (1 - exp(-nbytes / (bytes_per_sm x SMs))))

* ``ceiling`` is the DRAM bandwidth, or the L2 bandwidth when the whole working set fits in
  half the L2 (repeated kernels on small tensors hit L2 and exceed the DRAM peak);
* the ramp term says a small kernel does not keep enough bytes in flight on every SM to
  reach the peak (Little's law);
* ``e_kind`` per kernel class and the ramp constant are fitted on NeuSight's training GPUs
  (:mod:`ipukern.gpu.calibration`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .calibration import MEMORY_CALIBRATION, MemoryCalibration
from .specs import GPUSpec

__all__ = ["MemoryTime", "memory_seconds", "MEMORY_KINDS"]

MEMORY_KINDS = ("elementwise", "norm", "softmax", "reduce", "pool", "optimizer", "embedding", "copy")


@dataclass(frozen=True)
class MemoryTime:
    seconds: float
    nbytes: int
    bandwidth: float        # achieved bytes/s
    ceiling: str            # "DRAM" or "L2"


def memory_seconds(gpu: GPUSpec, kind: str, nbytes: float, *,
                   calibration: MemoryCalibration | None = None) -> MemoryTime:
    """Time of one memory-bound launch of class ``kind`` moving ``nbytes``.

    Raises
    ------
    ValueError
        Unknown kind, or ``nbytes`` negative / not finite.
    """
    if kind not in MEMORY_KINDS:
        raise ValueError(f"unknown memory-kernel class {kind!r}; classes are {list(MEMORY_KINDS)}")
    if isinstance(nbytes, bool) or not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")
    cal = MEMORY_CALIBRATION if calibration is None else calibration
    if nbytes == 0:
        return MemoryTime(cal.launch_s, 0, 0.0, "DRAM")
    in_l2 = gpu.l2_bandwidth is not None and nbytes <= gpu.l2_bytes / 2
    ceiling = gpu.l2_bandwidth if in_l2 else gpu.hbm_bandwidth
    ramp = 1.0 - math.exp(-nbytes / (cal.bytes_per_sm * gpu.sm_count))
    t = nbytes / (cal.efficiency_of(kind) * ceiling * ramp)
    return MemoryTime(cal.launch_s + t, int(nbytes), nbytes / t, "L2" if in_l2 else "DRAM")
