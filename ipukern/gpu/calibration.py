"""The GPU kernel model's empirical constants, and which rows each was fitted on.

Every other GPU figure is a datasheet value (:mod:`ipukern.gpu.specs`). The constants here
describe how close real kernels come to those peaks; they are not in any datasheet.

* FP32 SIMT GEMM and the memory-bound kernels: fitted by ``python -m ipukern.gpu.fit`` on
  NeuSight's **training** rows only (``ipukern/gpu/data/neusight/kernels.csv`` with
  ``split == "train"``: A100-PCIE-40GB / A100 80GB PCIe, V100-PCIE-32GB, T4, P100, P4).
  H100 and L4 rows and every end-to-end row are never seen by the fit; ``ipukern validate
  --gpu`` reports the error on them.
* Tensor-core GEMM: NeuSight's data is FP32 only, so nothing here is fitted for tensor
  cores. ``tensor_efficiency`` = 0.80: NVIDIA's "Matrix Multiplication Background User's
  Guide" (docs.nvidia.com/deeplearning/performance) shows large FP16 GEMMs on A100 reaching
  about 250 of 312 TFLOP/s. ``tensor_warps`` takes the SIMT value (an assumption).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GemmCalibration", "MemoryCalibration", "GEMM_CALIBRATION", "MEMORY_CALIBRATION",
           "EAGER_HOST_S", "LAUNCH_S", "POWER_LIMITED_W"]

#: boards whose datasheet TDP is this or less (T4 70 W, L4 72 W, P4 75 W) do not hold their
#: boost clock under FP32 GEMM load: the training ones get a sustained-clock fraction fitted
#: on their own rows, a held-out one the geometric mean of those
#: (:meth:`GemmCalibration.clock_fraction`)
POWER_LIMITED_W = 75.0


@dataclass(frozen=True)
class GemmCalibration:
    """Efficiency constants of the tile model (:mod:`ipukern.gpu.gemm`)."""

    simt_efficiency: float       # fraction of the per-SM FP32 peak a saturated SM reaches
    simt_warps: float            # resident warps giving 63% of it (latency hiding)
    tensor_efficiency: float     # the same for tensor-core tiles
    tensor_warps: float
    k_overhead: float            # prologue + epilogue per tile, in K elements
    #: tile reuse (m*n/(m+n), FMAs per shared-memory operand load per k step) at which a
    #: SIMT tile reaches half its rate: small tiles are shared-memory-bandwidth bound
    simt_reuse: float
    memory_efficiency: float     # fraction of DRAM bandwidth an operand stream reaches
    launch_s: float              # GPU-side floor of one kernel (launch latency + ramp)
    #: (GPU preset name, fraction of the boost clock it sustains under FP32 GEMM load),
    #: fitted per GPU on that GPU's own training rows (the boards of :data:`POWER_LIMITED_W`)
    sustained_clock: tuple[tuple[str, float], ...] = ()

    def clock_fraction(self, gpu_name: str, tdp_watts: float | None = None) -> float:
        """Fraction of the boost clock a GPU sustains under FP32 GEMM load.

        A GPU with its own fitted fraction gets it. Any other board whose datasheet TDP is
        :data:`POWER_LIMITED_W` or less (a held-out one, e.g. the 72 W L4) gets the geometric
        mean of the fitted fractions: its power cap binds the same way, and how far below
        boost it sits is known only from the training boards. Every other GPU: 1.0."""
        for name, f in self.sustained_clock:
            if name == gpu_name:
                return f
        if tdp_watts is not None and tdp_watts <= POWER_LIMITED_W and self.sustained_clock:
            logs = [math.log(f) for _, f in self.sustained_clock]
            return math.exp(sum(logs) / len(logs))
        return 1.0


@dataclass(frozen=True)
class MemoryCalibration:
    """Constants of the memory-bound kernel model (:mod:`ipukern.gpu.memory`)."""

    #: fraction of DRAM bandwidth a large kernel of each class reaches
    efficiency: tuple[tuple[str, float], ...]
    #: bytes per SM in flight at which a kernel reaches 63% of its bandwidth
    bytes_per_sm: float
    launch_s: float

    def efficiency_of(self, kind: str) -> float:
        for k, e in self.efficiency:
            if k == kind:
                return e
        raise ValueError(f"no memory-kernel class {kind!r}; classes are "
                         f"{[k for k, _ in self.efficiency]}")


#: GPU-side gap between back-to-back kernels. NVIDIA's "Getting Started with CUDA Graphs"
#: (developer blog, 2019): a 2.9 us kernel issued back to back costs 3.8 us per kernel from a
#: stream and 3.4 us in a graph, i.e. about 0.5-1 us each. Not fitted.
LAUNCH_S = 1e-6

#: host time eager PyTorch spends to dispatch and launch one op, as CUDA events around a
#: single call see it (the floor of NeuSight's single-kernel rows); fitted.
EAGER_HOST_S = 27.99e-6

# fitted by `python -m ipukern.gpu.fit --gemm-only` (training loss 0.2636; values and the
# held-out error: docs/gpu-model.rst), with cuBLAS' SIMT GEMMs priced without split-K
GEMM_CALIBRATION = GemmCalibration(
    simt_efficiency=0.9566, simt_warps=4.0, simt_reuse=8.6751, k_overhead=8.5024,
    memory_efficiency=0.5377, launch_s=LAUNCH_S,
    sustained_clock=(("P4", 0.5803), ("T4", 0.5580)),
    # tensor cores: not fitted (NeuSight is FP32 only); see the module docstring
    tensor_efficiency=0.80, tensor_warps=6.0,
)

MEMORY_CALIBRATION = MemoryCalibration(
    # element-wise, layer norm and softmax fitted; the classes NeuSight does not time take
    # the fitted class closest in access pattern (copy / optimizer / embedding: element-wise;
    # reduce / pool: the norm's read-reduce-write)
    efficiency=(("elementwise", 0.8922), ("norm", 0.4910), ("softmax", 0.6360), ("reduce", 0.4910),
                ("pool", 0.4910), ("optimizer", 0.8922), ("embedding", 0.8922), ("copy", 0.8922)),
    bytes_per_sm=38953.5, launch_s=LAUNCH_S,
)
