"""One GPU kernel launch, and its price on a GPU.

A :class:`KernelCall` is what a framework launches: a GEMM (linear, batched matmul, a conv
as implicit GEMM or Winograd, their data and weight gradients), a direct grouped/depthwise
conv, or a memory-bound kernel of one of :data:`~ipukern.gpu.memory.MEMORY_KINDS`.
:func:`kernel_seconds` prices it with :mod:`ipukern.gpu.gemm` / :mod:`ipukern.gpu.memory`.

Convolutions (:func:`conv_kernels`) follow cuDNN with ``benchmark=True``: of the algorithms
that apply, the fastest under the model wins:

* implicit GEMM: ``M = N*Ho*Wo``, ``N = Cout/g``, ``K = Cin/g*kh*kw``, one GEMM per group
  (batched), the input read from DRAM once (the im2col gather is served from L2/shared memory);
* Winograd F(2x2, 3x3) for 3x3 stride-1 dense convs on CUDA cores: 16 GEMMs of ``K = Cin`` over the
  2x2 output tiles (2.25x fewer multiplies) plus the input/output transforms as memory passes;
* direct grouped/depthwise kernels: an empirical roofline with efficiencies read at the
  channels per group from :data:`ipukern.gpu.curves.CUDNN_CURVE` (calibrated on TITAN RTX
  grouped convs, ``docs/gpu-model.rst``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .calibration import GemmCalibration, MemoryCalibration
from .curves import CUDNN_CURVE
from .gemm import GemmProblem, gemm_seconds
from .memory import MEMORY_KINDS, memory_seconds
from .specs import GPUSpec

__all__ = ["GPUTarget", "KernelCall", "KernelPrice", "kernel_seconds", "conv_kernels"]


#: FP32 SIMT GEMMs that may split K: only cuDNN's weight-gradient kernels (their long
#: reduction over N*Ho*Wo; cuDNN names them ``*_stridedB_splitK_*``). cuBLAS' SIMT sgemm
#: kernels run the whole K in one kernel: NeuSight's traces show one launch (no split-K
#: reduction) in 2,682 of its 2,700 linear/bmm rows, on every GPU. Tensor-core GEMMs split.
SIMT_SPLIT_K_LABELS = frozenset({"implicit GEMM wgrad", "direct grouped conv wgrad"})


@dataclass(frozen=True)
class KernelCall:
    """One launch.

    ``kind`` is ``"gemm"`` (sizes m, n, k, batch), ``"direct_conv"`` (flops, nbytes, cpg) or
    a memory-kernel class (nbytes).
    """

    kind: str
    label: str = ""
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    nbytes: int = 0
    flops: int = 0
    cpg: int = 0
    a_bytes: int = -1        # GEMM: unique DRAM bytes of A when not m*k elements (implicit GEMM)

    def __post_init__(self) -> None:
        if self.kind not in ("gemm", "direct_conv") + MEMORY_KINDS:
            raise ValueError(f"unknown kernel kind {self.kind!r}")


@dataclass(frozen=True)
class GPUTarget:
    """What prices a launch: the GPU, the compute dtype, TF32 for FP32 GEMMs, and the
    efficiency curve of direct grouped/depthwise convs (None: the cuDNN curve)."""

    gpu: GPUSpec
    dtype: str
    tf32: bool = False
    direct_curve: Any = None


@dataclass(frozen=True)
class KernelPrice:
    seconds: float
    bound: str
    detail: str
    compute_seconds: float = 0.0
    memory_seconds: float = 0.0


def kernel_seconds(call: KernelCall, gpu: GPUSpec, dtype: str, *, tf32: bool = False,
                   gemm_calibration: GemmCalibration | None = None,
                   memory_calibration: MemoryCalibration | None = None,
                   direct_curve: Any = None) -> KernelPrice:
    """Modelled GPU time of one launch (no host overhead: that is the stack's).

    ``direct_curve`` is the efficiency curve of direct grouped/depthwise convs (an
    :class:`~ipukern.gpu.model.EfficiencyCurve`; default the cuDNN curve)."""
    elem = 2 if dtype == "float16" else 4
    if call.kind == "gemm":
        peak, _, tensor = gpu._peak(dtype, tf32)
        pr = GemmProblem(call.m, call.n, call.k, call.batch, elem, peak=peak, tensor=tensor,
                         a_bytes=None if call.a_bytes < 0 else call.a_bytes,
                         split_k=tensor or call.label in SIMT_SPLIT_K_LABELS)
        g = gemm_seconds(gpu, pr, calibration=gemm_calibration)
        return KernelPrice(g.seconds, g.bound, f"{g.tile} split-k {g.split_k}, {g.waves:.2f} waves",
                           g.compute_seconds, g.memory_seconds + g.reduce_seconds)
    if call.kind == "direct_conv":
        e_c, e_m = (CUDNN_CURVE if direct_curve is None else direct_curve).at(max(call.cpg, 1))
        # the curve's own reading of a peak (ipukern.gpu.model): the tensor-core peak with
        # e_c capped at the curve's tensor_core_cap, so grouped layers cost as they always did
        curve = CUDNN_CURVE if direct_curve is None else direct_curve
        peak, _, tensor = gpu._peak(dtype, tf32)
        if tensor:
            e_c = min(e_c, curve.tensor_core_cap)
        t_c = call.flops / (e_c * peak)
        t_m = call.nbytes / (e_m * gpu.hbm_bandwidth)
        launch = memory_seconds(gpu, "copy", 0, calibration=memory_calibration).seconds
        detail = f"direct grouped conv, cpg {call.cpg}"
        if call.m:      # the dense conv's GEMM (m, n, k): its rate caps the grouped kernel's
            dense = gemm_seconds(gpu, GemmProblem(call.m, call.n, call.k, 1, elem, peak=peak, tensor=tensor,
                                                  split_k=tensor or call.label in SIMT_SPLIT_K_LABELS),
                                 calibration=gemm_calibration)
            floor = dense.compute_seconds * call.flops / (2.0 * call.m * call.n * call.k)
            if floor > t_c:
                t_c, detail = floor, detail + ", at the dense conv's rate"
        return KernelPrice(max(t_c, t_m) + launch, "compute" if t_c >= t_m else "memory",
                           detail, t_c, t_m)
    mt = memory_seconds(gpu, call.kind, call.nbytes, calibration=memory_calibration)
    return KernelPrice(mt.seconds, "memory", f"{call.kind} at {mt.bandwidth / 1e9:.0f} GB/s ({mt.ceiling})",
                       0.0, mt.seconds - _launch_of(memory_calibration))


def _launch_of(cal: MemoryCalibration | None) -> float:
    from .calibration import MEMORY_CALIBRATION
    return (MEMORY_CALIBRATION if cal is None else cal).launch_s


#: a grouped/depthwise weight-gradient kernel over a forward one on the same roofline: the
#: forward share 1/3 of forward + weight gradient that the cudnn curve was derived with
#: (TITAN Xp forward-only timings, pytorch/pytorch#18631, against Dataset A's training
#: steps; ipukern.gpu.model, "Calibration of the cudnn curve"). Not fitted here.
GROUPED_WGRAD_TO_FORWARD = 2.0


def _grouped_conv_kernels(p, phase: str, nbytes: tuple[int, int, int]) -> list[KernelCall]:
    """A grouped/depthwise conv pass on the empirical curve (cuDNN's grouped kernels do not
    reach its dense GEMM rates: Dataset A, TITAN RTX; TileOPs PR #1568: 0.72 TFLOP/s on a
    grouped ResNeXt layer), each pass with its own structure, never faster than the dense
    conv of the same channels in that pass (the ``m, n, k`` of the call):

    * forward: the curve at Cin/g over the output positions;
    * data gradient: the transposed grouped conv (dy with the flipped filter; Dumoulin &
      Visin 2016, section 4): the curve at its own reduction width Cout/g, over the input's
      positions, its dense bound the dense conv's dgrad GEMM;
    * weight gradient: ``GROUPED_WGRAD_TO_FORWARD`` times the forward kernel's work, the
      ratio the curve was derived with, so model and calibration agree.

    A per-group implicit GEMM is not a candidate: priced by the GEMM model it would beat the
    measured grouped forward kernels several times over at small Cin/g, which cuDNN (whose
    forward has that algorithm too) does not.
    """
    x_bytes, y_bytes, w_bytes = nbytes
    m, n, k, g, ho, wo = _conv_dims(p)
    flops = 2 * m * n * k * g
    moved = x_bytes + y_bytes + w_bytes
    if phase == "dgrad":
        return [KernelCall("direct_conv", "direct grouped conv dgrad", m=p.batch * p.in_h * p.in_w,
                           n=p.in_channels, k=p.out_channels * p.kernel_h * p.kernel_w, flops=flops,
                           nbytes=moved, cpg=n)]
    r = GROUPED_WGRAD_TO_FORWARD if phase == "wgrad" else 1.0
    return [KernelCall("direct_conv", f"direct grouped conv {phase}", m=m, n=n * g, k=k * g,
                       flops=int(r * flops), nbytes=int(r * moved), cpg=p.in_channels // g)]


def _conv_dims(p) -> tuple[int, int, int, int, int, int]:
    """(outputs per group M, N per group, K per group, groups, Ho, Wo) of a ConvParams."""
    ho, wo = p.out_h, p.out_w
    g = p.groups
    return p.batch * ho * wo, p.out_channels // g, (p.in_channels // g) * p.kernel_h * p.kernel_w, g, ho, wo


def conv_kernels(p, phase: str, gpu: GPUSpec, dtype: str, *, tf32: bool = False,
                 gemm_calibration: GemmCalibration | None = None,
                 memory_calibration: MemoryCalibration | None = None,
                 direct_curve: Any = None) -> list[KernelCall]:
    """The cheapest algorithm's launches for one conv pass (``"forward"``, ``"dgrad"``,
    ``"wgrad"``) of a ConvParams ``p``."""
    elem = 2 if dtype == "float16" else 4
    m, n, k, g, ho, wo = _conv_dims(p)
    cin_g = p.in_channels // g
    x_bytes = p.batch * p.in_channels * p.in_h * p.in_w * elem
    y_bytes = p.batch * p.out_channels * ho * wo * elem
    w_bytes = p.out_channels * cin_g * p.kernel_h * p.kernel_w * elem
    if g > 1:
        return _grouped_conv_kernels(p, phase, (x_bytes, y_bytes, w_bytes))
    options: list[list[KernelCall]] = []
    if phase == "forward":
        options.append([KernelCall("gemm", "implicit GEMM", m=m, n=n, k=k, batch=g, a_bytes=x_bytes)])
    elif phase == "dgrad":      # dx (N*H*W x Cin/g) = dy (.. x Cout/g*kh*kw) @ w^T
        options.append([KernelCall("gemm", "implicit GEMM dgrad", m=p.batch * p.in_h * p.in_w, n=cin_g,
                                   k=n * p.kernel_h * p.kernel_w, batch=g, a_bytes=y_bytes)])
    else:                       # dw (Cout/g x K) = dy^T (Cout/g x N*Ho*Wo) @ im2col(x)
        options.append([KernelCall("gemm", "implicit GEMM wgrad", m=n, n=k, k=m, batch=g, a_bytes=y_bytes)])
    # Winograd only where cuDNN runs it: on CUDA cores (its kernels are *scudnn_winograd*,
    # single precision; the tensor-core paths are implicit GEMM)
    tensor_core = gpu._peak(dtype, tf32)[2]
    if (g == 1 and not tensor_core and p.kernel_h == p.kernel_w == 3 and tuple(p.stride) == (1, 1)
            and tuple(p.dilation) == (1, 1) and phase != "wgrad"):
        tiles = p.batch * math.ceil(ho / 2) * math.ceil(wo / 2)
        cin, cout = (p.in_channels, p.out_channels) if phase == "forward" else (p.out_channels, p.in_channels)
        tin = tiles * 16 * cin * 4       # transformed input, fp32
        tout = tiles * 16 * cout * 4
        options.append([
            KernelCall("elementwise", "winograd input transform", nbytes=x_bytes + tin),
            KernelCall("elementwise", "winograd filter transform", nbytes=w_bytes + 16 * cin * cout * 4),
            KernelCall("gemm", "winograd GEMM", m=tiles, n=cout, k=cin, batch=16),
            KernelCall("elementwise", "winograd output transform", nbytes=tout + y_bytes),
        ])
    def total(calls: list[KernelCall]) -> float:
        return sum(kernel_seconds(c, gpu, dtype, tf32=tf32, gemm_calibration=gemm_calibration,
                                  memory_calibration=memory_calibration,
                                  direct_curve=direct_curve).seconds for c in calls)

    best = min(options, key=total)
    return best
