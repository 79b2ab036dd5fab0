"""GPU comparison model: the per-kernel roofline of one GPU (:mod:`.model`) and networks on
multi-GPU systems, data parallel (:mod:`.system`). Reached as ``ipukern.gpu.<name>``.

The IPU side never imports this package; it sits above ``systems`` in the layers so a
comparison can use both.
"""
from .model import (A100_40GB, A100_80GB, CUDNN_CURVE, EFFICIENCY_CURVES, GPU_PRESETS, H100,
                    OPTIMIZED_CURVE, TITAN_RTX, V100, EfficiencyCurve, GPUEstimate, GPUSpec,
                    estimate_conv, estimate_matmul, get_efficiency_curve, get_gpu)
from .system import (DGX_A100, ELEMENTWISE_HBM_FRACTION, GPU_SYSTEMS, GPUNetworkEstimate,
                     GPUSystem, estimate_network_gpu, get_gpu_system, gpu_all_reduce_seconds)

__all__ = [
    "GPUSpec", "A100_40GB", "A100_80GB", "V100", "H100", "TITAN_RTX", "GPU_PRESETS", "get_gpu",
    "EfficiencyCurve", "CUDNN_CURVE", "OPTIMIZED_CURVE", "EFFICIENCY_CURVES",
    "get_efficiency_curve", "GPUEstimate", "estimate_conv", "estimate_matmul",
    "GPUSystem", "DGX_A100", "GPU_SYSTEMS", "get_gpu_system", "GPUNetworkEstimate",
    "estimate_network_gpu", "gpu_all_reduce_seconds", "ELEMENTWISE_HBM_FRACTION",
]
