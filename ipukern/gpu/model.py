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

import bisect
import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

from ..dtypes import canonical_dtype
from ..conv import ConvParams

__all__ = [
    "GPUSpec", "A100_40GB", "A100_80GB", "V100", "H100", "TITAN_RTX", "GPU_PRESETS", "get_gpu",
    "EfficiencyCurve", "CUDNN_CURVE", "OPTIMIZED_CURVE", "EFFICIENCY_CURVES",
    "get_efficiency_curve", "GPUEstimate", "estimate_conv", "estimate_matmul",
]


def _check_positive(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a positive finite number, got {value!r}")


# =========================================================================== GPU specs
_MiB, _GiB = 2**20, 2**30


@dataclass(frozen=True)
class GPUSpec:
    """Peak rates of one GPU, all dense (no 2:4 sparsity), per second.

    Parameters
    ----------
    name : str
        Preset name, e.g. ``"A100_40GB"``.
    sm_count : int
        Streaming multiprocessors.
    boost_clock_hz : float
        Boost clock in Hz (the clock the CUDA-core peak is quoted at).
    fp32_flops : float
        FP32 CUDA-core peak in FLOP/s (1 FMA = 2 FLOP).
    tf32_tensor_flops : float or None
        Dense TF32 tensor-core peak in FLOP/s; None when the GPU has no TF32 (pre-Ampere).
    fp16_tensor_flops : float
        Dense FP16 tensor-core peak in FLOP/s, FP32 accumulation.
    hbm_bandwidth : float
        Peak DRAM (HBM/GDDR) bandwidth in bytes/s.
    l2_bytes : int
        L2 cache in bytes (informational; the model does not use it).
    memory_bytes : int
        DRAM capacity in bytes (informational).
    sources : tuple of (str, str)
        Provenance shown by :meth:`describe`.
    """

    name: str
    sm_count: int
    boost_clock_hz: float
    fp32_flops: float
    tf32_tensor_flops: float | None
    fp16_tensor_flops: float
    hbm_bandwidth: float
    l2_bytes: int
    memory_bytes: int
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        owner = f"GPUSpec({self.name!r})"
        for fname in ("sm_count", "l2_bytes", "memory_bytes"):
            v = getattr(self, fname)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{owner}.{fname} must be a positive int, got {v!r}")
        for fname in ("boost_clock_hz", "fp32_flops", "fp16_tensor_flops", "hbm_bandwidth"):
            _check_positive(owner, fname, getattr(self, fname))
        if self.tf32_tensor_flops is not None:
            _check_positive(owner, "tf32_tensor_flops", self.tf32_tensor_flops)

    def replace(self, **changes: Any) -> "GPUSpec":
        """Copy with some fields changed; the name gets a ``*`` unless one is given.

        Example: ``A100_40GB.replace(hbm_bandwidth=2.0e12)``.
        """
        if "name" not in changes:
            changes["name"] = self.name + "*"
        return dataclasses.replace(self, **changes)

    def peak_flops(self, dtype: Any = "float16", *, tf32: bool = False) -> float:
        """Compute peak in FLOP/s that :func:`estimate_conv` uses for ``dtype``.

        Parameters
        ----------
        dtype : str or dtype
            ``"float16"`` -> FP16 tensor-core peak; ``"float32"`` -> FP32 CUDA-core peak,
            or the TF32 tensor-core peak when ``tf32=True``.
        tf32 : bool
            Use TF32 tensor cores for float32 (no effect on float16).

        Raises
        ------
        ValueError
            ``tf32=True`` on a GPU without TF32.
        """
        return self._peak(canonical_dtype(dtype), tf32)[0]

    def _peak(self, dtype: str, tf32: bool) -> tuple[float, str, bool]:
        """(FLOP/s, label, runs on tensor cores) for a canonical dtype."""
        if dtype == "float16":
            return self.fp16_tensor_flops, "FP16 tensor-core", True
        if tf32:
            if self.tf32_tensor_flops is None:
                raise ValueError(f"{self.name} has no TF32 tensor cores; use tf32=False "
                                 "(FP32 CUDA cores) or an Ampere/Hopper GPU")
            return self.tf32_tensor_flops, "TF32 tensor-core", True
        return self.fp32_flops, "FP32 CUDA-core", False

    def describe(self) -> str:
        """Multi-line human-readable summary."""
        tf32 = "n/a" if self.tf32_tensor_flops is None else f"{self.tf32_tensor_flops / 1e12:.1f}"
        lines = [
            f"{self.name}",
            f"  SMs / boost clock    {self.sm_count} / {self.boost_clock_hz / 1e9:.3f} GHz",
            f"  FP32 (CUDA cores)    {self.fp32_flops / 1e12:.1f} TFLOP/s",
            f"  TF32 tensor (dense)  {tf32} TFLOP/s",
            f"  FP16 tensor (dense)  {self.fp16_tensor_flops / 1e12:.1f} TFLOP/s",
            f"  DRAM bandwidth       {self.hbm_bandwidth / 1e9:.0f} GB/s",
            f"  L2 / DRAM            {self.l2_bytes / _MiB:.0f} MiB / {self.memory_bytes / _GiB:.0f} GiB",
        ]
        lines += [f"  source: {key}: {src}" for key, src in self.sources]
        return "\n".join(lines)


# A100 values: shared/reference/ipu-hardware.md section 12, whose sources are the NVIDIA A100
# datasheet and the Ampere (GA100) whitepaper ([S33]-[S36] there).
A100_40GB = GPUSpec(
    name="A100_40GB",
    sm_count=108,                       # Ampere whitepaper: 108 SMs on A100 [S33][S34]
    boost_clock_hz=1.41e9,              # 1410 MHz boost [S33][S36]
    fp32_flops=19.5e12,                 # A100 datasheet; = 108 x 64 x 2 x 1.41 GHz [S33][S35]
    tf32_tensor_flops=156e12,           # A100 datasheet, dense (312 with sparsity) [S33][S35]
    fp16_tensor_flops=312e12,           # A100 datasheet, dense (624 with sparsity) [S33][S35]
    hbm_bandwidth=1.555e12,             # A100 datasheet: 40 GB HBM2, 1,555 GB/s [S33][S34]
    l2_bytes=40 * _MiB,                 # Ampere whitepaper: 40 MB L2 [S34][S36]
    memory_bytes=40 * _GiB,             # A100 datasheet
    sources=(("rates", "NVIDIA A100 datasheet (SXM4 40 GB), via ipu-hardware.md section 12"),
             ("SMs/clock/L2", "NVIDIA Ampere GA100 whitepaper")),
)

A100_80GB = A100_40GB.replace(
    name="A100_80GB",
    hbm_bandwidth=2.039e12,             # A100 datasheet: 80 GB HBM2e SXM 2,039 GB/s [S33][S34]
    memory_bytes=80 * _GiB,
    sources=(("rates", "NVIDIA A100 datasheet (SXM4 80 GB): as 40 GB but HBM2e 2,039 GB/s"),
             ("SMs/clock/L2", "NVIDIA Ampere GA100 whitepaper")),
)

# V100 and H100: NVIDIA datasheet and whitepaper values quoted from memory. V100 matches
# peers-and-gpu.md section 3.1; H100 matches a public copy of the datasheet table.
V100 = GPUSpec(
    name="V100",
    sm_count=80,                        # NVIDIA Volta (GV100) whitepaper: 80 SMs on V100
    boost_clock_hz=1.53e9,              # Volta whitepaper: 1530 MHz boost (SXM2)
    fp32_flops=15.7e12,                 # NVIDIA V100 datasheet (SXM2); = 80 x 64 x 2 x 1.53 GHz
    tf32_tensor_flops=None,             # Volta has no TF32
    fp16_tensor_flops=125e12,           # NVIDIA V100 datasheet (SXM2) "125 TFLOPS tensor"
    hbm_bandwidth=900e9,                # NVIDIA V100 datasheet: HBM2 900 GB/s
    l2_bytes=6 * _MiB,                  # Volta whitepaper: 6 MB L2
    memory_bytes=32 * _GiB,             # the 32 GB SXM2 variant (a 16 GB one also exists)
    sources=(("rates", "NVIDIA V100 datasheet (SXM2)"),
             ("SMs/clock/L2", "NVIDIA Volta GV100 whitepaper")),
)

H100 = GPUSpec(
    name="H100",
    sm_count=132,                       # NVIDIA H100 datasheet / Hopper whitepaper (SXM5)
    # UNCERTAIN: 1.98 GHz is the clock the FP32 figure implies (66.9e12 / (132 x 128 x 2));
    # NVIDIA's tensor-core figures correspond to ~1.83 GHz.
    boost_clock_hz=1.98e9,
    fp32_flops=66.9e12,                 # NVIDIA H100 datasheet (SXM5): "67 TFLOPS"
    tf32_tensor_flops=494.7e12,         # NVIDIA H100 datasheet (SXM5): 989 with sparsity
    fp16_tensor_flops=989.4e12,         # NVIDIA H100 datasheet (SXM5): 1,979 with sparsity
    hbm_bandwidth=3.35e12,              # NVIDIA H100 datasheet (SXM5): HBM3 3.35 TB/s
    l2_bytes=50 * _MiB,                 # Hopper whitepaper: 50 MB L2
    memory_bytes=80 * _GiB,             # NVIDIA H100 datasheet (SXM5): 80 GB
    sources=(("rates", "NVIDIA H100 datasheet (SXM5); dense = half the sparse figures"),
             ("SMs/L2", "NVIDIA Hopper whitepaper"),
             ("clock", "1.98 GHz implied by the FP32 figure (uncertain)")),
)

# The GPU the "cudnn" curve was measured on, so users can check the fit against Dataset A.
TITAN_RTX = GPUSpec(
    name="TITAN_RTX",
    sm_count=72,                        # NVIDIA Turing (TU102) whitepaper: 72 SMs
    boost_clock_hz=1.77e9,              # Turing whitepaper: 1770 MHz boost
    fp32_flops=16.3e12,                 # Turing whitepaper; = 72 x 64 x 2 x 1.77 GHz
    tf32_tensor_flops=None,             # Turing has no TF32
    fp16_tensor_flops=130.5e12,         # Turing whitepaper, FP32 accumulate (from memory)
    hbm_bandwidth=672e9,                # Turing whitepaper: GDDR6 384-bit, 672 GB/s
    l2_bytes=6 * _MiB,                  # Turing whitepaper: 6 MB L2
    memory_bytes=24 * _GiB,             # 24 GB GDDR6
    sources=(("rates", "NVIDIA Turing whitepaper (TITAN RTX); peers-and-gpu.md section 3.1"),),
)

GPU_PRESETS: dict[str, GPUSpec] = {
    "A100_40GB": A100_40GB, "A100_80GB": A100_80GB, "V100": V100, "H100": H100,
    "TITAN_RTX": TITAN_RTX,
}
_GPU_ALIASES = {"A100": "A100_40GB"}


def get_gpu(gpu: "GPUSpec | str | None") -> GPUSpec:
    """Resolve a preset name or pass a :class:`GPUSpec` through; None -> ``A100_40GB``.

    Names are case-insensitive; ``-`` and spaces count as ``_`` (``"a100-80gb"`` works) and
    ``"A100"`` means the 40 GB part.

    Raises
    ------
    ValueError
        Unknown name (the message lists the presets).
    TypeError
        Neither a string nor a GPUSpec.
    """
    if gpu is None:
        return A100_40GB
    if isinstance(gpu, GPUSpec):
        return gpu
    if isinstance(gpu, str):
        key = gpu.strip().upper().replace("-", "_").replace(" ", "_")
        key = _GPU_ALIASES.get(key, key)
        if key in GPU_PRESETS:
            return GPU_PRESETS[key]
        raise ValueError(f"unknown GPU {gpu!r}; presets are {sorted(GPU_PRESETS)} "
                         "(or pass a GPUSpec)")
    raise TypeError(f"gpu must be a GPUSpec or a preset name, got {type(gpu).__name__}")


# =========================================================================== efficiency curves
@dataclass(frozen=True)
class EfficiencyCurve:
    """Fractions of the compute peak and of DRAM bandwidth a GPU software stack reaches,
    as a function of channels per group (cpg).

    Between points the efficiencies are interpolated linearly in log2(cpg); outside the
    points they are held at the end values.

    Parameters
    ----------
    name : str
        Shown in every :class:`GPUEstimate`.
    points : sequence of (cpg, e_compute, e_memory)
        Calibration points, any order, distinct cpg > 0, efficiencies in (0, 1].
    tensor_core_cap : float
        Upper bound on e_compute when the peak is a tensor-core peak (FP16, TF32). The
        FP32 CUDA-core calibration says nothing about tensor-core efficiency.
    launch_s : float
        Per-kernel time floor in seconds (launch latency plus tail of a tiny kernel).
    baseline : str
        Which GPU software the curve describes.
    """

    name: str
    points: tuple[tuple[float, float, float], ...]
    tensor_core_cap: float = 1.0
    launch_s: float = 5e-6
    baseline: str = ""

    def __post_init__(self) -> None:
        where = f"EfficiencyCurve {self.name!r}"
        if isinstance(self.points, (str, bytes)) or not isinstance(self.points, Iterable):
            raise ValueError(f"{where}: points must be a sequence of (cpg, e_compute, e_memory), "
                             f"got {type(self.points).__name__}")
        clean = []
        for i, p in enumerate(self.points):
            row = None if isinstance(p, (str, bytes)) or not isinstance(p, Iterable) else tuple(p)
            if row is None or len(row) != 3:
                raise ValueError(f"{where}: point {i} must be (cpg, e_compute, e_memory), got {p!r}")
            try:
                cpg, e_c, e_m = (float(x) for x in row)
            except (TypeError, ValueError):
                raise ValueError(f"{where}: point {i} must hold three numbers, got {p!r}") from None
            if not (math.isfinite(cpg) and cpg > 0):
                raise ValueError(f"{where}: point {i} has channels-per-group {row[0]!r}; it must be > 0")
            for label, e in (("e_compute", e_c), ("e_memory", e_m)):
                if not (math.isfinite(e) and 0 < e <= 1):
                    raise ValueError(f"{where}: point {i} has {label}={e!r}; efficiencies are "
                                     "fractions of a peak in (0, 1]")
            clean.append((cpg, e_c, e_m))
        if not clean:
            raise ValueError(f"{where}: needs at least one (cpg, e_compute, e_memory) point")
        clean.sort()
        for a, b in zip(clean, clean[1:]):
            if a[0] == b[0]:
                raise ValueError(f"{where}: two points at channels-per-group {a[0]:g}")
        if isinstance(self.tensor_core_cap, bool) or not isinstance(self.tensor_core_cap, Real) \
                or not 0 < self.tensor_core_cap <= 1:
            raise ValueError(f"{where}: tensor_core_cap must be in (0, 1], got {self.tensor_core_cap!r}")
        if isinstance(self.launch_s, bool) or not isinstance(self.launch_s, Real) \
                or not math.isfinite(self.launch_s) or self.launch_s < 0:
            raise ValueError(f"{where}: launch_s must be a finite number of seconds >= 0, "
                             f"got {self.launch_s!r}")
        object.__setattr__(self, "points", tuple(clean))

    def at(self, cpg: float) -> tuple[float, float]:
        """(e_compute, e_memory) at ``cpg`` channels per group, before any tensor-core cap.

        Raises
        ------
        ValueError
            ``cpg`` is not a positive number.
        """
        if isinstance(cpg, bool) or not isinstance(cpg, Real) or not math.isfinite(cpg) or cpg <= 0:
            raise ValueError(f"channels per group must be a positive number, got {cpg!r}")
        pts = self.points
        if cpg <= pts[0][0]:
            return pts[0][1], pts[0][2]
        if cpg >= pts[-1][0]:
            return pts[-1][1], pts[-1][2]
        i = bisect.bisect_right([p[0] for p in pts], cpg)
        (c0, ec0, em0), (c1, ec1, em1) = pts[i - 1], pts[i]
        w = (math.log2(cpg) - math.log2(c0)) / (math.log2(c1) - math.log2(c0))
        return ec0 + w * (ec1 - ec0), em0 + w * (em1 - em0)

    __call__ = at

    def replace(self, **changes: Any) -> "EfficiencyCurve":
        """Copy with some fields changed, e.g. ``CUDNN_CURVE.replace(launch_s=5e-6)``."""
        if "name" not in changes:
            changes["name"] = self.name + "*"
        return dataclasses.replace(self, **changes)


# Derivation of each point: module docstring, "Calibration of the cudnn curve".
CUDNN_CURVE = EfficiencyCurve(
    name="cudnn",
    points=(
        (1, 0.062, 0.34),    # depthwise (PyTorch's native kernel in that era)
        (2, 0.068, 0.18),
        (4, 0.11, 0.14),
        (8, 0.26, 0.17),
        (16, 0.55, 0.19),
        (32, 0.74, 0.19),
        (64, 0.74, 0.25),
        (128, 1.0, 0.70),    # dense; Winograd's >1 capped, e_m assumed
    ),
    tensor_core_cap=0.5,     # assumption: NCHW cuDNN on tensor cores (see docstring)
    launch_s=10e-6,          # cuDNN via PyTorch on tiny batch-1 layers: 6.5-20 us (TileOPs #1568)
    baseline="PyTorch + cuDNN 7/8 (2019-2021), NCHW, cudnn.benchmark=True; "
             "calibrated on TITAN RTX FP32 grouped 3x3 (Dataset A)",
)

OPTIMIZED_CURVE = EfficiencyCurve(
    name="optimized",
    points=(
        (1, 0.155, 0.80),    # Lu et al.: 2-3x over cuDNN on depthwise (2.5x, e_m capped 0.8)
        (4, 0.54, 0.70),     # TileOPs: 4.9x over cuDNN on grouped ResNeXt; TVM reaches 0.60 of BW
        (32, 1.0, 0.80),     # dense-level compute once groups are wide (assumption)
        (128, 1.0, 0.80),
    ),
    tensor_core_cap=0.75,    # CUTLASS/cuBLAS-class kernels (assumption)
    launch_s=5e-6,           # TileOPs custom kernels on tiny layers: 4.1-6.4 us
    baseline="hand-written grouped/depthwise kernels (TileLang, TVM, Lu et al. 2022)",
)

EFFICIENCY_CURVES: dict[str, EfficiencyCurve] = {"cudnn": CUDNN_CURVE, "optimized": OPTIMIZED_CURVE}


def get_efficiency_curve(
        efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]") -> EfficiencyCurve:
    """Resolve a preset name (``"cudnn"``, ``"optimized"``), pass a curve through, or build
    a curve named ``"custom"`` from a sequence of (cpg, e_compute, e_memory) points.

    Raises
    ------
    ValueError
        Unknown preset name, or bad points.
    TypeError
        Anything else.
    """
    if isinstance(efficiency, EfficiencyCurve):
        return efficiency
    if isinstance(efficiency, str):
        key = efficiency.strip().lower()
        if key in EFFICIENCY_CURVES:
            return EFFICIENCY_CURVES[key]
        raise ValueError(f"unknown efficiency curve {efficiency!r}; presets are "
                         f"{sorted(EFFICIENCY_CURVES)}, or pass an EfficiencyCurve or "
                         "(cpg, e_compute, e_memory) points")
    if isinstance(efficiency, Iterable) and not isinstance(efficiency, bytes):
        return EfficiencyCurve(name="custom", points=tuple(efficiency))
    raise TypeError("efficiency must be a preset name, an EfficiencyCurve or a sequence of "
                    f"(cpg, e_compute, e_memory) points, got {type(efficiency).__name__}")


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


def estimate_conv(params: ConvParams, gpu: "GPUSpec | str" = A100_40GB, *,
                  efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]" = "cudnn",
                  tf32: bool = False, launch_s: float | None = None) -> GPUEstimate:
    """Modelled forward (inference) time of one grouped conv2d on a GPU.

    ``t = max(flops / (e_c * peak), bytes / (e_m * bandwidth), launch_s)`` with
    ``(e_c, e_m)`` read from the efficiency curve at ``params.in_per_group``. The module
    docstring has the calibration.

    Parameters
    ----------
    params : ConvParams
        The layer. ``params.partials`` is ignored: data-centre GPUs run FP16 with FP32
        accumulation at the full tensor-core rate.
    gpu : GPUSpec or str
        A spec or a preset name (see :data:`GPU_PRESETS`). Default: A100 40 GB (SXM4).
    efficiency : str, EfficiencyCurve or sequence of (cpg, e_compute, e_memory)
        ``"cudnn"`` (PyTorch + cuDNN of 2019-2021, NCHW), ``"optimized"`` (hand-written
        kernels), or your own curve.
    tf32 : bool
        float32 convs on TF32 tensor cores instead of FP32 CUDA cores. No effect on float16.
    launch_s : float, optional
        Per-kernel floor in seconds; default: the curve's ``launch_s``.

    Returns
    -------
    GPUEstimate
        Time in seconds, achieved TFLOP/s, utilisation, the binding term and the reasons.

    Raises
    ------
    TypeError
        ``params`` is not a ConvParams.
    ValueError
        Unknown GPU or curve name, bad curve points, negative ``launch_s``, or ``tf32=True``
        on a GPU without TF32.

    Examples
    --------
    >>> from ipukern.conv import ConvParams
    >>> p = ConvParams(batch=32, in_channels=256, out_channels=256, in_h=28, in_w=28,
    ...                kernel_h=3, kernel_w=3, padding=1, groups=32, dtype="float16")
    >>> est = estimate_conv(p, "A100_40GB")
    >>> est.bound
    'memory'
    """
    if not isinstance(params, ConvParams):
        raise TypeError(f"params must be a ConvParams, got {type(params).__name__}")
    nb = params.nbytes()
    return _estimate(flops=params.flops, nbytes=nb["input"] + nb["weight"] + nb["output"],
                     cpg=params.in_per_group, dtype=params.dtype, gpu=get_gpu(gpu),
                     curve=get_efficiency_curve(efficiency), tf32=tf32, launch_s=launch_s,
                     layer=params.describe())


def estimate_matmul(m: int, k: int, n: int, groups: int = 1, dtype: Any = "float32",
                    gpu: "GPUSpec | str" = A100_40GB, *,
                    efficiency: "EfficiencyCurve | str | Sequence[Sequence[float]]" = "cudnn",
                    tf32: bool = False, launch_s: float | None = None) -> GPUEstimate:
    """Modelled time of ``groups`` independent (m, k) @ (k, n) products on a GPU.

    A grouped matmul is exactly a grouped 1x1 convolution with m output positions,
    ``groups * k`` input and ``groups * n`` output channels, so it is estimated as that
    conv: the curve is read at cpg = k, FLOPs = 2*groups*m*k*n, bytes = groups*(m*k + k*n +
    m*n) elements. The "cudnn" curve's 0.5 tensor-core cap is pessimistic for large FP16
    GEMMs (cuBLAS gets closer to the peak); ``efficiency="optimized"`` is the better
    stand-in there.

    Parameters
    ----------
    m, k, n : int
        Rows of A, shared dimension, columns of B (per group).
    groups : int
        Independent products (a batched matmul).
    dtype : str or dtype
        ``"float16"`` or ``"float32"``.
    gpu, efficiency, tf32, launch_s
        As in :func:`estimate_conv`.

    Returns
    -------
    GPUEstimate
        ``layer`` reads ``"matmul g{groups} {m}x{k}x{n} {dtype}"``.

    Raises
    ------
    TypeError, ValueError
        Non-int or non-positive sizes, unsupported dtype, and as :func:`estimate_conv`.
    """
    for name, v in (("m", m), ("k", k), ("n", n), ("groups", groups)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    conv = ConvParams(batch=1, in_channels=groups * k, out_channels=groups * n, in_h=m, in_w=1,
                      kernel_h=1, kernel_w=1, groups=groups, dtype=dtype)
    nb = conv.nbytes()
    return _estimate(flops=conv.flops, nbytes=nb["input"] + nb["weight"] + nb["output"],
                     cpg=k, dtype=conv.dtype, gpu=get_gpu(gpu),
                     curve=get_efficiency_curve(efficiency), tf32=tf32, launch_s=launch_s,
                     layer=f"matmul g{groups} {m}x{k}x{n} {conv.dtype}")
