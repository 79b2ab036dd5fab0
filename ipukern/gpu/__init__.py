"""GPU comparison model: a kernel-level model of GPU launches (thread-block tiles in waves,
:mod:`.gemm`; memory-bound kernels, :mod:`.memory`; both priced per launch by :mod:`.kernels`,
its empirical constants fitted on NeuSight's training rows, :mod:`.calibration` / :mod:`.fit`),
software stacks (:mod:`.stacks`), networks lowered to launches and played on a timeline
(:mod:`.lowering`, :mod:`.network`), the one-curve roofline it replaced (:mod:`.model`,
``estimate_conv_curve``), the GPU specs
(:mod:`.specs`), NCCL collectives and DDP overlap (:mod:`.comm`), GPU systems (:mod:`.systems`)
and networks on multi-GPU systems, data parallel (:mod:`.system`). Reached as
``ipukern.gpu.<name>``.

The IPU side never imports this package; it sits above ``systems`` in the layers so a
comparison can use both.
"""
from .comm import CollectiveTime, DDPOverlap, all_reduce_seconds, ddp_exposed_seconds
from .model import (CUDNN_CURVE, EFFICIENCY_CURVES, OPTIMIZED_CURVE, EfficiencyCurve, GPUEstimate,
                    estimate_conv, estimate_conv_curve, estimate_matmul, estimate_matmul_curve,
                    get_efficiency_curve)
from .specs import (A100_40GB, A100_80GB, A100_PCIE_40GB, A100_PCIE_80GB, GPU_PRESETS, H100, H100_PCIE,
                    L4, P4, P100, T4, TITAN_RTX, V100, V100_PCIE, GPUSpec, get_gpu)
from .stacks import FUSIONS, STACKS, SoftwareStack, get_stack
from .system import DEFAULT_STACK, ELEMENTWISE_HBM_FRACTION, GPUNetworkEstimate, estimate_network_gpu
from .systems import (DGX_A100, DGX_A100_40GB, DGX_H100, GPU_SYSTEMS, GPUSystem, get_gpu_system,
                      gpu_all_reduce_seconds)

__all__ = [
    "GPUSpec", "A100_40GB", "A100_80GB", "A100_PCIE_40GB", "A100_PCIE_80GB", "V100", "V100_PCIE",
    "H100", "H100_PCIE", "L4", "T4", "P100", "P4", "TITAN_RTX", "GPU_PRESETS", "get_gpu",
    "EfficiencyCurve", "CUDNN_CURVE", "OPTIMIZED_CURVE", "EFFICIENCY_CURVES",
    "get_efficiency_curve", "GPUEstimate", "estimate_conv", "estimate_matmul",
    "estimate_conv_curve", "estimate_matmul_curve",
    "GPUSystem", "DGX_A100", "DGX_A100_40GB", "DGX_H100", "GPU_SYSTEMS", "get_gpu_system",
    "GPUNetworkEstimate", "estimate_network_gpu", "gpu_all_reduce_seconds", "ELEMENTWISE_HBM_FRACTION",
    "all_reduce_seconds", "CollectiveTime", "ddp_exposed_seconds", "DDPOverlap",
    "SoftwareStack", "STACKS", "FUSIONS", "get_stack", "DEFAULT_STACK",
]
