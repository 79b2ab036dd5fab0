"""GPU systems: a network's forward pass or training step on N GPUs, data parallel, under a
named software stack. Reached as ``ipukern.gpu.estimate_network_gpu`` etc.

Per GPU the step is the kernel timeline of :mod:`ipukern.gpu.network`: the network lowered
to the launches its stack makes (:mod:`ipukern.gpu.lowering`: GEMM-class kernels as
thread-block tiles in waves, :mod:`ipukern.gpu.gemm`; memory-bound passes by size,
:mod:`ipukern.gpu.memory`; fusions and host cost per op, :mod:`ipukern.gpu.stacks`), played
against the host's issue rate. A training step adds every layer's own data- and
weight-gradient kernels, the optimizer's multi-tensor launches over ``OPTIMIZER_WORDS`` fp32
words per parameter (SGD with momentum 5, LARS 7, Adam 7, LAMB 10; as the IPU model,
:mod:`ipukern.systems.training`), and the gradient all-reduce: NCCL's tuning model
(:mod:`ipukern.gpu.comm`) per DDP bucket, overlapped with the rest of the backward pass as
PyTorch DDP does (``overlap=True``); what is not hidden adds to the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


from ..dtypes import DTYPES, canonical_dtype
from ..ops import OPTIMIZER_WORDS
from ..systems.training import training_samples
from .model import get_efficiency_curve
from .kernels import GPUTarget
from .network import network_param_count, network_timeline
from .stacks import SoftwareStack, get_stack
from .systems import DGX_A100, GPU_SYSTEMS, GPUSystem, get_gpu_system, gpu_all_reduce_seconds

__all__ = ["GPUSystem", "DGX_A100", "GPU_SYSTEMS", "get_gpu_system", "GPUNetworkEstimate",
           "estimate_network_gpu", "gpu_all_reduce_seconds", "ELEMENTWISE_HBM_FRACTION",
           "DEFAULT_STACK"]

#: kept for callers of the one-curve model; the kernel model's streaming efficiency is the
#: fitted ``elementwise`` class of :data:`ipukern.gpu.calibration.MEMORY_CALIBRATION`
ELEMENTWISE_HBM_FRACTION = 0.80

#: every comparison in ipukern sets the GPU against the IPU's best published configuration,
#: so the default GPU software is the best published one too (NVIDIA's MLPerf stack)
DEFAULT_STACK = "mlperf"


@dataclass(frozen=True)
class GPUNetworkEstimate:
    """A network on a GPU system: per-layer seconds and the step total."""

    system: str
    n_gpus: int
    batch_per_gpu: int
    training: bool
    layers: list[dict]
    forward_seconds: float
    backward_seconds: float
    optimizer_seconds: float
    all_reduce_seconds: float          # all buckets' NCCL time, hidden or not
    step_seconds: float
    n_params: int
    stack: str = DEFAULT_STACK
    exposed_all_reduce_seconds: float = 0.0
    kernels: int = 0
    host_bound_fraction: float = 0.0   # share of launches the GPU waited for the host on
    dtype: str = "float16"

    @property
    def samples_per_second(self) -> float:
        return self.n_gpus * self.batch_per_gpu / self.step_seconds

    def time_to_train(self, *, epochs: float | None = None, dataset_size: int | None = None,
                      samples: float | None = None) -> float:
        """Seconds to process ``samples`` (or ``epochs x dataset_size``) samples."""
        return training_samples(epochs, dataset_size, samples) / self.samples_per_second


def estimate_network_gpu(net: Any, batch: int, system: GPUSystem | str = DGX_A100, *,
                         dtype: Any = "float16", training: bool = False, n_gpus: int | None = None,
                         overlap: bool = True, optimizer: str = "sgd_momentum",
                         stack: SoftwareStack | str = DEFAULT_STACK) -> GPUNetworkEstimate:
    """A network's forward pass (or training step) on a GPU system, data parallel.

    Parameters
    ----------
    net : ipukern.nn.Network
    batch : int
        Samples per GPU per step.
    system : GPUSystem or preset name (``"DGX_A100"``)
    dtype : {"float16", "float32"}
    training : bool
        Forward + backward + optimizer + gradient all-reduce (module docstring).
    n_gpus : int, optional
        GPUs used (default: all of the system).
    overlap : bool
        Overlap the all-reduce with the backward pass, bucket by bucket, as DDP does
        (False: after it; so do the stack's ``distributed_optimizers``).
    optimizer : {"sgd", "sgd_momentum", "adam", "lamb", "lars"}
    stack : SoftwareStack or ``"mlperf"`` / ``"cuda-graphs"`` / ``"pytorch-eager"``
        The GPU software (:mod:`ipukern.gpu.stacks`): its fusions, host cost per op, TF32 rule
        and grouped-conv curve (the ``efficiency=`` of earlier versions is the stack's
        ``grouped_curve``). Named in the result.
    """
    system = get_gpu_system(system)
    n = system.n_gpus if n_gpus is None else n_gpus
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= system.n_gpus:
        raise ValueError(f"{system.name} has {system.n_gpus} GPUs; cannot use {n!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    if not hasattr(net, "layers") or not hasattr(net, "shapes"):
        raise TypeError(f"net must be an ipukern.nn.Network, got {type(net).__name__}")
    if not isinstance(optimizer, str) or optimizer not in OPTIMIZER_WORDS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_WORDS)}, got {optimizer!r}")
    st = get_stack(stack)
    dt = canonical_dtype(dtype)
    if dt not in ("float16", "float32"):
        raise ValueError(f"GPU dtype must be float16 or float32, got {dt!r}")
    curve = get_efficiency_curve(st.grouped_curve)
    gpu = system.gpu
    use_tf32 = st.tf32 and dt == "float32" and gpu.tf32_tensor_flops is not None
    grad_bytes = DTYPES[dt].itemsize

    def bucket(nbytes: float) -> float:
        return gpu_all_reduce_seconds(system, nbytes, n)

    tl = network_timeline(net, batch, GPUTarget(gpu, dt, use_tf32, curve), st, training=bool(training),
                          optimizer=optimizer, all_reduce=bucket if (training and n > 1) else None,
                          optimizer_shards=n if st.distributes(optimizer) else 1)
    n_params = network_param_count(net)
    exposed, comm = tl.exposed_all_reduce_seconds, tl.all_reduce_seconds
    if training and n > 1 and (not overlap or st.distributes(optimizer)):
        comm = gpu_all_reduce_seconds(system, n_params * grad_bytes, n)
        exposed = comm
    step = tl.forward_seconds + tl.backward_seconds + exposed + tl.optimizer_seconds
    return GPUNetworkEstimate(system.name, n, batch, bool(training), tl.layers, tl.forward_seconds,
                              tl.backward_seconds, tl.optimizer_seconds, comm, step, n_params,
                              stack=st.name, exposed_all_reduce_seconds=exposed, kernels=tl.kernels,
                              host_bound_fraction=tl.host_bound_fraction, dtype=dt)
