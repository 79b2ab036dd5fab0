"""GPU comparison model: how long one grouped conv2d (forward pass) takes on an NVIDIA GPU.

The model is a roofline whose two ceilings are scaled by an *efficiency* that depends on the
channels per group (cpg, ``ConvParams.in_per_group``)::

    t = max(flops / (e_c(cpg) * peak_flops),     # compute term
            bytes / (e_m(cpg) * hbm_bandwidth),  # memory term
            launch_s)                            # per-kernel floor

``flops`` is the conventional direct count (``ConvParams.flops``: padding taps included);
``bytes`` is input read + weight read + output written once, in the conv's dtype. The peak
depends on the dtype: float16 uses the dense FP16 tensor-core peak; float32 uses the FP32
CUDA-core peak, or the dense TF32 tensor-core peak with ``tf32=True`` (cuDNN of 2019-2021 ran
FP32 convs on CUDA cores unless TF32 was enabled, so CUDA cores are the default). The
``max`` form is the one of ``shared/reference/peers-and-gpu.md`` section 3.4; the shape of
the efficiency curve does the work.

Which GPU software the curves stand for
---------------------------------------
* ``"cudnn"`` (default): PyTorch + cuDNN 7/8 of its era (2019-2021), NCHW layout,
  ``cudnn.benchmark=True``. In PyTorch of that era FP32 *depthwise* convs ran PyTorch's own
  depthwise kernel, not cuDNN, so the cpg=1 point describes that kernel.
* ``"optimized"``: hand-written grouped/depthwise GPU kernels (TileLang, TVM, Lu et al.),
  several times faster than cuDNN on grouped shapes. Use it when a comparison should be
  generous to the GPU.

Hand-written kernels are 2-5x faster than cuDNN on the same grouped layer, and TVM was up to
9x faster than TensorRT (apache/tvm PR #2075). Every comparison must therefore say which
curve it used; :class:`GPUEstimate` carries the curve name.

Calibration of the ``"cudnn"`` curve
------------------------------------
Dataset A (``sara-nl/grouped_conv_bench``, ``runs/titanrtx_2D.txt``): one
``nn.Conv2d(C, C, 3, padding=1, groups=g)`` on a TITAN RTX, FP32, NCHW, 181 shapes: C = 32,
64 and 128, H = W = 128, 256 and 512, batch 16, 32 and 64, g = 1 .. C. It reports training
img/s. A training step there is *not* forward + 2 backward convs. The input tensor does not
require grad, so no data gradient is computed. One step is:

* forward conv;
* weight-gradient conv;
* about 10 elementwise passes over one activation tensor (bias add 2, MSE loss forward 4,
  loss backward 3, bias gradient 1).

Conversion to one forward conv (per image, A = C*H*W*4 bytes, TITAN RTX 672 GB/s)::

    t_step = 1 / (img/s)
    t_conv = t_step - 10 * A / (0.85 * 672e9)   # elementwise passes at 85 % of HBM
    t_fwd  = t_conv / 3                          # forward = 1/3, weight gradient = 2/3
    e_c_eff = 2*H*W*9*C*cpg / t_fwd / 16.3e12    # fraction of the FP32 peak
    e_m_eff = (2*A + weight bytes) / t_fwd / 672e9  # fraction of HBM bandwidth

The pass count is an estimate from the PyTorch ops of that era. Three passes more or fewer
move the grouped points by about 10 % and the depthwise point by about 25 %.

The forward share 1/3 was not fitted to Dataset A. It comes from synchronised forward-only
timings on a TITAN Xp (pytorch/pytorch#18631, 2x32x512x512, 3x3). There the depthwise conv
reached e_m = 0.24. The dense conv reached e_c = 0.71, after its separate bias-add pass is
removed. Matching Dataset A's same-shape rows (C=32, 512x512) to those values needs a
forward share of 0.29 (dense) and 0.30-0.40 (depthwise). The two numbers are taken together
as 1/3.

Medians of Dataset A per cpg after conversion (26 shapes per point, 17 at cpg 64, 8 at 128):

=====  ========  ========  ===========================================================
cpg    e_c_eff   e_m_eff   curve point (e_c, e_m) and why
=====  ========  ========  ===========================================================
1      0.031     0.337     (0.062, 0.34)  depthwise: memory-bound, e_c = 2 x effective
2      0.034     0.182     (0.068, 0.18)  memory-bound, e_c = 2 x effective
4      0.054     0.145     (0.11, 0.14)   memory-bound, e_c = 2 x effective
8      0.128     0.173     (0.26, 0.17)   memory-bound, e_c = 2 x effective
16     0.277     0.187     (0.55, 0.19)   memory-bound, e_c = 2 x effective
32     0.568     0.192     (0.74, 0.19)   memory-bound, e_c = 2 x eff capped at e_c(64)
64     0.744     0.125     (0.74, 0.25)   compute-bound, e_m = 2 x effective
128    1.716     0.146     (1.0, 0.70)    dense: e_c capped at 1.0, e_m assumed
=====  ========  ========  ===========================================================

On grouped layers the time per image hardly depends on the group count, so one measurement
cannot tell the compute term from the memory term. Below cpg = 64 the model makes the memory
term bind on the calibration layers (3x3, C_in = C_out), with e_m = the measured bandwidth
fraction (the "activation-pass floor" of
section 3.4). This reading is the one that carries over to tensor-core GPUs and FP16, where
grouped kernels gain from halved bytes but not from the tensor cores. The compute
efficiency gets a headroom factor of 2 (an assumption): a layer with more than twice the
calibration layers' FLOP/byte at the same cpg (e.g. a 5x5 or 7x7 depthwise kernel) becomes
compute-bound and slows with its FLOPs.

The dense point: Dataset A's dense convs reach 1.7x the direct-FLOP peak (Winograd). The
model counts direct FLOPs, so the point is capped at 1.0. Its e_m = 0.70 is an assumption:
cuDNN's dense kernels stream from HBM like a GEMM. It only matters for low-intensity dense
layers such as 1x1 convs. Through the cap, the model's dense layers are up to 1.7x slower
than Dataset A's. This is the main reason the model's grouped layers look better against
dense layers than they did in Dataset A.

Tensor cores: the FP32 curve has no evidence about FP16/TF32 dense efficiency, so the
compute efficiency on a tensor-core peak is capped at ``tensor_core_cap`` = 0.5. This is an
assumption, not a measurement: large NHWC cuDNN convs are taken to reach about 0.7 of the
tensor peak (unverified here), and NCHW inputs add transposes. The MosaicML Composer
channels_last card reports 1.5-2x faster convs without those transposes, hence about 0.5.

Launch floor: ``launch_s`` = 10 us, from cuDNN (through PyTorch) on tiny batch-1 FP16 layers
(tile-ai/TileOPs PR #1568): 6.5 us for a MobileNetV2 depthwise layer and 20 us for a
grouped ResNeXt layer.

Calibration of the ``"optimized"`` curve
----------------------------------------
* cpg 1: Lu, Zhang and Wang (IEEE TPDS 2022) measured 2-3x over cuDNN on depthwise. 2.5x
  the cuDNN point gives e_c = 0.155 and e_m = 0.85, and e_m is capped at 0.80 (a STREAM-like
  fraction of HBM).
* cpg 4: the TileOPs custom kernel is 4.9x faster than cuDNN on a grouped ResNeXt layer
  (PR #1568). 4.9x the cuDNN point gives e_c = 0.54 and e_m = 0.71, so e_m is set to 0.70.
  Cross-check: TVM's grouped kernels (apache/tvm PR #2075, GTX 1080, INT8, batch 32, 56x56,
  C=128, g=32) move 25.7 MB in 0.134 ms, 0.60 of the 320 GB/s.
* cpg >= 32: dense-level compute (e_c = 1.0) and e_m = 0.80 (assumption).
* ``tensor_core_cap`` = 0.75 (CUTLASS/cuBLAS-class kernels; assumption). ``launch_s`` = 5 us
  (TileOPs custom kernels: 4.1-6.4 us on tiny layers).

On every preset, e_c is non-decreasing in cpg and so is cpg * e_m. Hence, for fixed channel
counts, the achieved TFLOP/s never rises as the group count grows (cpg shrinks).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

from ..conv import ConvParams
# the curves live in .curves and the GPU specs in .specs; these names stay importable from here
from .curves import CUDNN_CURVE, EFFICIENCY_CURVES, OPTIMIZED_CURVE, EfficiencyCurve, get_efficiency_curve
from .specs import A100_40GB, A100_80GB, GPU_PRESETS, H100, TITAN_RTX, V100, GPUSpec, get_gpu

__all__ = [
    "GPUSpec", "A100_40GB", "A100_80GB", "V100", "H100", "TITAN_RTX", "GPU_PRESETS", "get_gpu",
    "EfficiencyCurve", "CUDNN_CURVE", "OPTIMIZED_CURVE", "EFFICIENCY_CURVES",
    "get_efficiency_curve", "GPUEstimate", "estimate_conv", "estimate_matmul",
    "estimate_conv_curve", "estimate_matmul_curve",
]

# =========================================================================== estimates
def _fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e9:.3g} ns"


def _fmt_pct(x: float) -> str:
    # two significant digits below 1 % so tiny utilisations do not print as "0%"
    if x >= 0.1:
        return f"{x:.0%}"
    return f"{x * 100:.2g}%"


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


@dataclass(frozen=True)
class GPUEstimate:
    """Modelled time of one layer on one GPU, with the reasons.

    Attributes
    ----------
    seconds : float
        Modelled time in seconds: max(compute_seconds, memory_seconds, launch_seconds).
    tflops : float
        Achieved TFLOP/s = flops / seconds / 1e12 (conventional direct FLOP count).
    utilisation : float
        Achieved FLOP/s as a fraction of ``peak_flops``.
    bound : str
        ``"compute"``, ``"memory"`` or ``"launch"``: the term that set ``seconds``.
    e_compute, e_memory : float
        Efficiencies used (e_compute after the tensor-core cap).
    gpu, curve : str
        GPU and efficiency-curve names.
    layer : str
        Description of the layer (``ConvParams.describe()`` for convs).
    flops : int
        FLOPs counted (2 per MAC).
    nbytes : int
        DRAM bytes counted: input + weights + output, once each.
    channels_per_group : int
        The cpg the curve was read at.
    peak_flops : float
        Peak used for the compute term, FLOP/s.
    peak_kind : str
        ``"FP32 CUDA-core"``, ``"TF32 tensor-core"`` or ``"FP16 tensor-core"``.
    bandwidth : float
        DRAM bandwidth used for the memory term, bytes/s.
    compute_seconds, memory_seconds, launch_seconds : float
        The three terms, seconds.
    """

    seconds: float
    tflops: float
    utilisation: float
    bound: str
    e_compute: float
    e_memory: float
    gpu: str
    curve: str
    layer: str
    flops: int
    nbytes: int
    channels_per_group: int
    peak_flops: float
    peak_kind: str
    bandwidth: float
    compute_seconds: float
    memory_seconds: float
    launch_seconds: float
    #: the kernel model's choice ("implicit GEMM simt_128x64x8 split-k 1, ...");
    #: empty for the one-curve roofline (``estimate_conv_curve``)
    algorithm: str = ""

    @property
    def memory_utilisation(self) -> float:
        """Achieved DRAM bandwidth as a fraction of the GPU's peak bandwidth."""
        return self.nbytes / self.seconds / self.bandwidth

    def to_dict(self) -> dict[str, Any]:
        """All fields plus ``memory_utilisation``, as plain Python values (JSON-ready)."""
        d = dataclasses.asdict(self)
        d["memory_utilisation"] = self.memory_utilisation
        return d

    def explain(self) -> str:
        """One or two sentences saying which term set the time and why."""
        cpg = f"{self.channels_per_group} channel{'s' if self.channels_per_group != 1 else ''}/group"
        peak = f"{self.peak_flops / 1e12:.3g} TFLOP/s {self.peak_kind} peak"
        bw = f"{self.bandwidth / 1e9:.0f} GB/s"
        compute = f"{_fmt_seconds(self.compute_seconds)} at e_c={self.e_compute:.2g} of the {peak}"
        memory = f"{_fmt_seconds(self.memory_seconds)} at e_m={self.e_memory:.2g} of {bw}"
        achieved = (f"Achieved {self.tflops:.3g} TFLOP/s = {_fmt_pct(self.utilisation)} of peak "
                    f"({self.gpu}, {self.curve} curve).")
        if self.algorithm:
            return (f"{self.bound}-bound: {self.algorithm}; {_fmt_seconds(self.seconds)} for "
                    f"{self.flops:.3g} FLOP and {_fmt_bytes(self.nbytes)}. {achieved}")
        if self.bound == "memory":
            head = (f"memory-bound at {_fmt_pct(self.memory_utilisation)} of HBM bandwidth: "
                    f"{self.curve} kernels reach e_m={self.e_memory:.2g} at {cpg}, so moving "
                    f"{_fmt_bytes(self.nbytes)} takes {_fmt_seconds(self.seconds)} "
                    f"(compute term {compute}).")
        elif self.bound == "compute":
            head = (f"compute-bound at {_fmt_pct(self.utilisation)} of the {peak}: {self.curve} "
                    f"kernels reach e_c={self.e_compute:.2g} at {cpg}, so "
                    f"{self.flops:.3g} FLOP take {_fmt_seconds(self.seconds)} "
                    f"(memory term {memory}).")
        else:
            head = (f"launch-bound: the {_fmt_seconds(self.launch_seconds)} per-kernel floor "
                    f"exceeds the compute term ({compute}) and the memory term ({memory}).")
        return f"{head} {achieved}"


def _estimate(*, flops: int, nbytes: int, cpg: int, dtype: str, gpu: GPUSpec,
              curve: EfficiencyCurve, tf32: bool, launch_s: float | None,
              layer: str) -> GPUEstimate:
    peak, peak_kind, tensor = gpu._peak(dtype, tf32)
    e_c, e_m = curve.at(cpg)
    if tensor:
        e_c = min(e_c, curve.tensor_core_cap)
    if launch_s is None:
        launch_s = curve.launch_s
    elif isinstance(launch_s, bool) or not isinstance(launch_s, Real) \
            or not math.isfinite(launch_s) or launch_s < 0:
        raise ValueError(f"launch_s must be a finite number of seconds >= 0, got {launch_s!r}")
    t_c = flops / (e_c * peak)
    t_m = nbytes / (e_m * gpu.hbm_bandwidth)
    t_l = float(launch_s)
    seconds = max(t_c, t_m, t_l)
    if t_l >= t_c and t_l >= t_m:
        bound = "launch"
    elif t_m >= t_c:
        bound = "memory"
    else:
        bound = "compute"
    achieved = flops / seconds
    return GPUEstimate(
        seconds=seconds, tflops=achieved / 1e12, utilisation=achieved / peak, bound=bound,
        e_compute=e_c, e_memory=e_m, gpu=gpu.name, curve=curve.name, layer=layer,
        flops=int(flops), nbytes=int(nbytes), channels_per_group=int(cpg), peak_flops=peak,
        peak_kind=peak_kind, bandwidth=gpu.hbm_bandwidth, compute_seconds=t_c,
        memory_seconds=t_m, launch_seconds=t_l,
    )


@dataclass(frozen=True)
class _Layer:
    """What a GPUEstimate reports about the layer: direct FLOPs, bytes, cpg and its label."""

    flops: int
    nbytes: int
    cpg: int
    label: str


def _check_launch(launch_s: float | None) -> None:
    if launch_s is not None and (isinstance(launch_s, bool) or not isinstance(launch_s, Real)
                                 or not math.isfinite(launch_s) or launch_s < 0):
        raise ValueError(f"launch_s must be a finite number of seconds >= 0, got {launch_s!r}")


def _kernel_estimate(calls: list, target: Any, layer: _Layer, launch_s: float | None) -> GPUEstimate:
    """The kernel model's price of ``calls`` (one layer's launches) as a GPUEstimate."""
    from .kernels import kernel_seconds

    _check_launch(launch_s)
    gpu, curve = target.gpu, target.direct_curve
    peak, peak_kind, _ = gpu._peak(target.dtype, target.tf32)
    prices = [kernel_seconds(c, gpu, target.dtype, tf32=target.tf32, direct_curve=curve) for c in calls]
    seconds = sum(p.seconds for p in prices)
    t_c = sum(p.compute_seconds for p in prices)
    t_m = sum(p.memory_seconds for p in prices)
    t_l = seconds - max(t_c, t_m) if launch_s is None else float(launch_s)
    bound = "compute" if t_c >= t_m else "memory"
    if launch_s is not None and t_l > seconds:
        seconds, bound = t_l, "launch"
    achieved = layer.flops / seconds
    main = max(zip(calls, prices), key=lambda cp: cp[1].seconds)
    more = f" + {len(calls) - 1} more kernels" if len(calls) > 1 else ""
    return GPUEstimate(
        seconds=seconds, tflops=achieved / 1e12, utilisation=achieved / peak, bound=bound,
        e_compute=layer.flops / (t_c * peak) if t_c > 0 else 0.0,
        e_memory=layer.nbytes / (t_m * gpu.hbm_bandwidth) if t_m > 0 else 0.0,
        gpu=gpu.name, curve=curve.name, layer=layer.label, flops=int(layer.flops),
        nbytes=int(layer.nbytes), channels_per_group=int(layer.cpg), peak_flops=peak,
        peak_kind=peak_kind, bandwidth=gpu.hbm_bandwidth, compute_seconds=t_c, memory_seconds=t_m,
        launch_seconds=t_l, algorithm=f"{main[0].label} ({main[1].detail}){more}",
    )


def _conv_layer(params: ConvParams) -> _Layer:
    if not isinstance(params, ConvParams):
        raise TypeError(f"params must be a ConvParams, got {type(params).__name__}")
    nb = params.nbytes()
    return _Layer(params.flops, nb["input"] + nb["weight"] + nb["output"], params.in_per_group,
                  params.describe())


def estimate_conv(params: ConvParams, gpu: "GPUSpec | str" = A100_40GB, *,
                  efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]" = "cudnn",
                  tf32: bool = False, launch_s: float | None = None) -> GPUEstimate:
    """Modelled forward (inference) time of one grouped conv2d on a GPU: the launches cuDNN
    would pick under the kernel model (:func:`ipukern.gpu.kernels.conv_kernels`: implicit
    GEMM as thread-block tiles in waves, Winograd on CUDA cores, or a direct grouped/depthwise
    kernel read off the efficiency curve), GPU time only (no host cost per op: that is a
    network's software stack, :mod:`ipukern.gpu.stacks`). :func:`estimate_conv_curve` is the
    one-curve roofline this model replaced.

    Parameters
    ----------
    params : ConvParams
        The layer (float16 or float32). ``params.partials`` is ignored: data-centre GPUs run
        FP16 with FP32 accumulation at the full tensor-core rate.
    gpu : GPUSpec or str
        A spec or a preset name (see :data:`GPU_PRESETS`). Default: A100 40 GB (SXM4).
    efficiency : str, EfficiencyCurve or sequence of (cpg, e_compute, e_memory)
        The curve of grouped/depthwise kernels: ``"cudnn"`` (PyTorch + cuDNN of 2019-2021,
        NCHW), ``"optimized"`` (hand-written kernels), or your own curve.
    tf32 : bool
        float32 convs on TF32 tensor cores instead of FP32 CUDA cores. No effect on float16.
    launch_s : float, optional
        A per-layer floor in seconds (default: none beyond each kernel's launch cost).

    Returns
    -------
    GPUEstimate
        Time, achieved TFLOP/s, utilisation, the binding term and the kernel chosen
        (``algorithm``).

    Raises
    ------
    TypeError
        ``params`` is not a ConvParams.
    ValueError
        Unknown GPU or curve name, bad curve points, negative ``launch_s``, a dtype other
        than float16/float32, or ``tf32=True`` on a GPU without TF32.

    Examples
    --------
    >>> from ipukern.conv import ConvParams
    >>> p = ConvParams(batch=32, in_channels=256, out_channels=256, in_h=28, in_w=28,
    ...                kernel_h=3, kernel_w=3, padding=1, groups=32, dtype="float16")
    >>> est = estimate_conv(p, "A100_40GB")
    >>> est.bound
    'memory'
    """
    from .kernels import GPUTarget, conv_kernels

    layer = _conv_layer(params)
    if params.dtype not in ("float16", "float32"):
        raise ValueError(f"GPU convs run float16 or float32, got {params.dtype!r}")
    target = GPUTarget(get_gpu(gpu), params.dtype, bool(tf32), get_efficiency_curve(efficiency))
    if tf32:
        target.gpu._peak(params.dtype, True)            # a GPU without TF32 fails here
    calls = conv_kernels(params, "forward", target.gpu, params.dtype, tf32=target.tf32,
                         direct_curve=target.direct_curve)
    return _kernel_estimate(calls, target, layer, launch_s)


def estimate_conv_curve(params: ConvParams, gpu: "GPUSpec | str" = A100_40GB, *,
                        efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]" = "cudnn",
                        tf32: bool = False, launch_s: float | None = None) -> GPUEstimate:
    """The one-curve roofline of one conv (the GPU model before the kernel model):
    ``t = max(flops / (e_c * peak), bytes / (e_m * bandwidth), launch_s)`` with
    ``(e_c, e_m)`` read at ``params.in_per_group``; the module docstring has the calibration.
    Parameters as :func:`estimate_conv`; ``launch_s`` defaults to the curve's floor."""
    layer = _conv_layer(params)
    return _estimate(flops=layer.flops, nbytes=layer.nbytes, cpg=layer.cpg, dtype=params.dtype,
                     gpu=get_gpu(gpu), curve=get_efficiency_curve(efficiency), tf32=tf32,
                     launch_s=launch_s, layer=layer.label)


def _matmul_layer(m: int, k: int, n: int, groups: int, dtype: Any) -> tuple[ConvParams, _Layer]:
    for name, v in (("m", m), ("k", k), ("n", n), ("groups", groups)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    conv = ConvParams(batch=1, in_channels=groups * k, out_channels=groups * n, in_h=m, in_w=1,
                      kernel_h=1, kernel_w=1, groups=groups, dtype=dtype)
    nb = conv.nbytes()
    return conv, _Layer(conv.flops, nb["input"] + nb["weight"] + nb["output"], k,
                        f"matmul g{groups} {m}x{k}x{n} {conv.dtype}")


def estimate_matmul(m: int, k: int, n: int, groups: int = 1, dtype: Any = "float32",
                    gpu: "GPUSpec | str" = A100_40GB, *,
                    efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]" = "cudnn",
                    tf32: bool = False, launch_s: float | None = None) -> GPUEstimate:
    """Modelled time of ``groups`` independent (m, k) @ (k, n) products on a GPU: one batched
    GEMM launch under the kernel model (:mod:`ipukern.gpu.gemm`). :func:`estimate_matmul_curve`
    is the one-curve roofline it replaced.

    Parameters
    ----------
    m, k, n : int
        Rows of A, shared dimension, columns of B (per group).
    groups : int
        Independent products (a batched matmul).
    dtype : str or dtype
        ``"float16"`` or ``"float32"``.
    gpu, efficiency, tf32, launch_s
        As in :func:`estimate_conv` (``efficiency`` only names the curve in the result).

    Returns
    -------
    GPUEstimate
        ``layer`` reads ``"matmul g{groups} {m}x{k}x{n} {dtype}"``.

    Raises
    ------
    TypeError, ValueError
        Non-int or non-positive sizes, unsupported dtype, and as :func:`estimate_conv`.
    """
    from .kernels import GPUTarget, KernelCall

    conv, layer = _matmul_layer(m, k, n, groups, dtype)
    if conv.dtype not in ("float16", "float32"):
        raise ValueError(f"GPU matmuls run float16 or float32, got {conv.dtype!r}")
    target = GPUTarget(get_gpu(gpu), conv.dtype, bool(tf32), get_efficiency_curve(efficiency))
    if tf32:
        target.gpu._peak(conv.dtype, True)
    call = KernelCall("gemm", "batched GEMM" if groups > 1 else "GEMM", m=m, n=n, k=k, batch=groups)
    return _kernel_estimate([call], target, layer, launch_s)


def estimate_matmul_curve(m: int, k: int, n: int, groups: int = 1, dtype: Any = "float32",
                          gpu: "GPUSpec | str" = A100_40GB, *,
                          efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]" = "cudnn",
                          tf32: bool = False) -> GPUEstimate:
    """The one-curve roofline of a (grouped) matmul: exactly a grouped 1x1 convolution with
    m output positions, ``groups * k`` input and ``groups * n`` output channels, read off the
    curve at cpg = k (FLOPs = 2*groups*m*k*n, bytes = groups*(m*k + k*n + m*n) elements).
    Parameters as :func:`estimate_matmul`; the floor is the curve's ``launch_s``."""
    conv, layer = _matmul_layer(m, k, n, groups, dtype)
    return _estimate(flops=layer.flops, nbytes=layer.nbytes, cpg=k, dtype=conv.dtype, gpu=get_gpu(gpu),
                     curve=get_efficiency_curve(efficiency), tf32=tf32, launch_s=None,
                     layer=layer.label)
