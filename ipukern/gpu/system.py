"""GPU systems: a network's forward pass or training step on N GPUs, data parallel, with the
gradient all-reduce over NVLink/NVSwitch. Reached as ``ipukern.gpu.GPUSystem`` etc.

Per layer on one GPU (the per-op model of :mod:`ipukern.gpu`):

- ``Conv2d`` -> :func:`~ipukern.gpu.estimate_conv`; ``Linear`` / ``MatMul`` ->
  :func:`~ipukern.gpu.estimate_matmul`;
- ``Flatten`` / ``Reshape`` are views (no kernel, no time);
- every other layer is memory-bound: it reads its inputs and writes its output once, at
  the curve's dense e_m (``ELEMENTWISE_HBM_FRACTION``, the STREAM-like 0.80 of
  :mod:`ipukern.gpu`), with the curve's per-kernel launch floor.

A training step adds, per conv/matmul, the backward-data and weight-gradient products: both
have the forward's MAC count and are costed as the forward (same efficiency: a documented
simplification, cuDNN's backward kernels differ); a memory-bound layer's backward reads the
output gradient and the saved input and writes the input gradient (2x its forward bytes).
The optimizer (fp32 master weights) streams ``OPTIMIZER_WORDS`` fp32 words per parameter, as the
IPU systems model (:mod:`ipukern.systems.training`): SGD with momentum (the default) 5 (weight,
gradient, momentum read; weight, momentum written), LARS 7 (its per-tensor norms read the weight
and gradient once more: ``SGDwFASTLARS`` of NVIDIA's MLPerf v1.0/v1.1 ResNet-50,
``mxnet/common/fit.py``, runs ``multi_sum_sq`` over the weights and over the gradients before
``lars_multi_sgd_mom_update``; the 1-D tensors it skips are counted too), Adam 7, LAMB 10
(its apply pass re-reads the weight and the update). The gradient all-reduce is a ring over the
NVSwitch (NCCL's algorithm for one node): ``2 (N - 1) / N x bytes / link rate
+ 2 (N - 1) x step latency``; with ``overlap=True`` (PyTorch DDP's default bucketing) it
runs under the backward pass and only the excess counts.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..ops import OPTIMIZER_WORDS
from ..systems.training import training_samples
from .model import A100_40GB, GPUSpec, estimate_conv, estimate_matmul, get_efficiency_curve, get_gpu

__all__ = ["GPUSystem", "DGX_A100", "GPU_SYSTEMS", "get_gpu_system", "GPUNetworkEstimate",
           "estimate_network_gpu", "gpu_all_reduce_seconds", "ELEMENTWISE_HBM_FRACTION"]

#: fraction of HBM bandwidth a streaming (element-wise) kernel reaches: the dense e_m cap
#: of :mod:`ipukern.gpu`'s curves (STREAM-like 0.80, an assumption documented there).
ELEMENTWISE_HBM_FRACTION = 0.80
#: per-step latency of an NCCL ring step over NVSwitch. GAP: no public figure in our
#: references; 5 us is a documented assumption (``GPUSystem.replace(step_latency_s=...)``).
NCCL_STEP_LATENCY_S = 5e-6


@dataclass(frozen=True)
class GPUSystem:
    """N identical GPUs joined by a switch (every GPU reaches every other at full rate).

    ``link_bytes_per_second`` is one GPU's NVLink rate per direction.
    """

    name: str
    gpu: GPUSpec
    n_gpus: int
    link_bytes_per_second: float
    step_latency_s: float = NCCL_STEP_LATENCY_S
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu", get_gpu(self.gpu))
        if isinstance(self.n_gpus, bool) or not isinstance(self.n_gpus, int) or self.n_gpus < 1:
            raise ValueError(f"GPUSystem.n_gpus must be a positive int, got {self.n_gpus!r}")
        if not (self.link_bytes_per_second > 0 and math.isfinite(self.link_bytes_per_second)):
            raise ValueError("GPUSystem.link_bytes_per_second must be positive")
        if not (self.step_latency_s >= 0 and math.isfinite(self.step_latency_s)):
            raise ValueError("GPUSystem.step_latency_s must be >= 0")

    def replace(self, **changes: Any) -> GPUSystem:
        changes.setdefault("name", self.name + "*")
        return dataclasses.replace(self, **changes)

    def peak_flops(self, dtype: Any = "float16") -> float:
        return self.n_gpus * self.gpu.peak_flops(dtype)


#: NVIDIA DGX A100 (2020): 8 x A100 SXM4 40 GB, six NVSwitches, 600 GB/s GPU-to-GPU
#: bidirectional per GPU (NVIDIA developer blog "Defining AI innovation with DGX A100"; A100
#: whitepaper; ipu-hardware.md section 12: NVLink3 600 GB/s) = 300 GB/s per direction (D).
DGX_A100 = GPUSystem("DGX_A100", A100_40GB, 8, 300e9,
                     sources=(("GPUs", "8 x A100 SXM4 40 GB (DGX A100 datasheet)"),
                              ("NVSwitch", "6 NVSwitch, 600 GB/s bidirectional per GPU (NVIDIA blog)"),
                              ("step latency", "GAP: 5 us per NCCL ring step assumed")))
GPU_SYSTEMS = {"DGX_A100": DGX_A100}


def get_gpu_system(s: GPUSystem | str) -> GPUSystem:
    if isinstance(s, GPUSystem):
        return s
    if isinstance(s, str) and s.upper().replace("-", "_") in GPU_SYSTEMS:
        return GPU_SYSTEMS[s.upper().replace("-", "_")]
    raise ValueError(f"unknown GPU system {s!r}; presets are {sorted(GPU_SYSTEMS)}")


def gpu_all_reduce_seconds(system: GPUSystem, nbytes: float, n_gpus: int | None = None) -> float:
    """Ring all-reduce of ``nbytes`` per GPU over the switch (see module docstring)."""
    n = system.n_gpus if n_gpus is None else int(n_gpus)
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")
    if n <= 1 or nbytes == 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / system.link_bytes_per_second + 2 * (n - 1) * system.step_latency_s


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
    all_reduce_seconds: float
    step_seconds: float
    n_params: int

    @property
    def samples_per_second(self) -> float:
        return self.n_gpus * self.batch_per_gpu / self.step_seconds

    def time_to_train(self, *, epochs: float | None = None, dataset_size: int | None = None,
                      samples: float | None = None) -> float:
        """Seconds to process ``samples`` (or ``epochs x dataset_size``) samples."""
        return training_samples(epochs, dataset_size, samples) / self.samples_per_second


def _layer_seconds(layer: Any, in_shapes: list, out_shape: tuple, dt: str, gpu: GPUSpec,
                   curve: Any) -> tuple[float, str]:
    """(forward seconds, why) of one layer on one GPU."""
    op = getattr(layer, "op", "")
    if op == "conv2d":
        p = dataclasses.replace(layer.conv_params(tuple(in_shapes[0])), dtype=dt)
        e = estimate_conv(p, gpu, efficiency=curve)
        return e.seconds, f"{e.bound}-bound conv"
    if op == "linear":
        rows = int(np.prod(in_shapes[0][:-1]))
        e = estimate_matmul(rows, layer.in_features, layer.out_features, 1, dt, gpu, efficiency=curve)
        return e.seconds, f"{e.bound}-bound matmul"
    if op == "matmul":
        a, b = in_shapes
        e = estimate_matmul(int(a[1]), int(a[2]), int(b[2]), int(a[0]), dt, gpu, efficiency=curve)
        return e.seconds, f"{e.bound}-bound batched matmul"
    if op in ("flatten", "reshape"):
        return 0.0, "a view (no kernel)"
    item = DTYPES[dt].itemsize
    elems = sum(int(np.prod(s)) for s in in_shapes) + int(np.prod(out_shape))
    t = max(elems * item / (ELEMENTWISE_HBM_FRACTION * gpu.hbm_bandwidth), curve.launch_s)
    return t, "memory-bound element-wise"


def estimate_network_gpu(net: Any, batch: int, system: GPUSystem | str = DGX_A100, *,
                         dtype: Any = "float16", training: bool = False, n_gpus: int | None = None,
                         efficiency: Any = "cudnn", overlap: bool = True,
                         optimizer: str = "sgd_momentum") -> GPUNetworkEstimate:
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
    efficiency : GPU efficiency curve (see :mod:`ipukern.gpu`)
    overlap : bool
        Hide the all-reduce under the backward pass (only the excess counts).
    optimizer : {"sgd", "sgd_momentum", "adam", "lamb", "lars"}
        The training step's optimizer (its fp32 words per parameter, module docstring).
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
    dt = canonical_dtype(dtype)
    curve = get_efficiency_curve(efficiency)
    shapes = net.shapes(batch)
    rows, fwd, bwd = [], 0.0, 0.0
    for name, layer in net.layers:
        node = net.nodes[name]
        ins = [shapes[i] for i in node.inputs]
        t, why = _layer_seconds(layer, ins, shapes[name], dt, system.gpu, curve)
        rows.append({"name": name, "op": layer.op, "forward_s": t, "why": why})
        fwd += t
        bwd += 2 * t
    n_params = int(net.n_params)
    opt = ar = 0.0
    if training:
        words = OPTIMIZER_WORDS[optimizer] * 4 * n_params          # fp32 master weights and state
        opt = words / (ELEMENTWISE_HBM_FRACTION * system.gpu.hbm_bandwidth)
        ar = gpu_all_reduce_seconds(system, n_params * DTYPES[dt].itemsize, n)
        step = fwd + (max(bwd, ar) if overlap else bwd + ar) + opt
    else:
        bwd, step = 0.0, fwd
    return GPUNetworkEstimate(system.name, n, batch, bool(training), rows, fwd, bwd, opt, ar, step, n_params)
