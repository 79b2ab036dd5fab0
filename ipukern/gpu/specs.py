"""GPU specs: the peak rates, memory system and per-SM limits of NVIDIA GPUs, with sources.

Every figure is dense (no 2:4 sparsity) at the boost clock. The presets cover the GPUs the
comparisons and NeuSight's measurements use: Pascal (P100, P4), Volta (V100 SXM2 and PCIe),
Turing (T4, TITAN RTX), Ampere (A100 SXM4 and PCIe, 40 and 80 GB), Ada (L4) and Hopper (H100
SXM5 and PCIe). :func:`get_gpu` also accepts the device names ``torch.cuda.get_device_name``
prints (``"NVIDIA A100-SXM4-40GB"``, ``"Tesla T4"``), as NeuSight's data sets record them.

Sources
-------
* [DS] the NVIDIA product datasheet of each GPU (named in each preset's ``sources``).
* [WP-P] NVIDIA Tesla P100 whitepaper (GP100); [WP-V] Volta GV100 whitepaper; [WP-T] Turing
  TU102/TU104 whitepaper; [WP-A] Ampere GA100 whitepaper; [WP-ADA] Ada Lovelace whitepaper;
  [WP-H] Hopper H100 whitepaper.
* [CUDA-CC] CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
  Specifications per Compute Capability" (shared memory per SM, 32-bit registers per SM,
  resident warps and blocks per SM), and table "Throughput of Native Arithmetic Instructions"
  (FP16 results per clock per SM).
* [S33]-[S36]: the A100 sources of ``shared/reference/ipu-hardware.md`` section 12.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

from ..dtypes import canonical_dtype

__all__ = [
    "GPUSpec", "ARCHS", "FORMS", "A100_40GB", "A100_80GB", "A100_PCIE_40GB", "A100_PCIE_80GB",
    "V100", "V100_PCIE", "H100", "H100_PCIE", "L4", "T4", "P100", "P4", "TITAN_RTX",
    "GPU_PRESETS", "get_gpu",
]

#: architectures a :class:`GPUSpec` may name (oldest first)
ARCHS = ("pascal", "volta", "turing", "ampere", "ada", "hopper")
#: board forms
FORMS = ("SXM", "PCIe")

_MiB, _GiB, _KiB = 2**20, 2**30, 2**10


def _check_positive(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a positive finite number, got {value!r}")


_INT_FIELDS = ("sm_count", "l2_bytes", "memory_bytes", "smem_per_sm_bytes", "registers_per_sm",
               "max_warps_per_sm", "max_blocks_per_sm")
_RATE_FIELDS = ("boost_clock_hz", "fp32_flops", "hbm_bandwidth", "pcie_bytes_per_s")
_OPTIONAL_RATE_FIELDS = ("tf32_tensor_flops", "fp16_tensor_flops", "fp16_flops", "bf16_tensor_flops",
                         "fp8_tensor_flops", "l2_bandwidth", "tdp_watts", "nvlink_bytes_per_s")


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
    fp16_tensor_flops : float or None
        Dense FP16 tensor-core peak in FLOP/s, FP32 accumulation; None when the GPU has no
        tensor cores (Pascal): float16 then runs at ``fp16_flops`` on the CUDA cores.
    hbm_bandwidth : float
        Peak DRAM (HBM/GDDR) bandwidth in bytes/s.
    l2_bytes : int
        L2 cache in bytes (informational; the model does not use it).
    memory_bytes : int
        DRAM capacity in bytes (informational).
    arch : str
        One of :data:`ARCHS`.
    form : str
        ``"SXM"`` or ``"PCIe"``.
    fp16_flops : float or None
        Non-tensor FP16 peak in FLOP/s; None means the same as ``fp32_flops``.
    bf16_tensor_flops, fp8_tensor_flops : float or None
        Dense BF16 / FP8 tensor-core peaks in FLOP/s; None when not supported.
    smem_per_sm_bytes, registers_per_sm, max_warps_per_sm, max_blocks_per_sm : int
        Per-SM limits of the compute capability (CUDA C++ Programming Guide).
    l2_bandwidth : float or None
        L2 read bandwidth in bytes/s (whitepaper figure or a GAP-marked estimate).
    tdp_watts : float or None
        Board power (TDP/TGP) in W.
    nvlink_bytes_per_s : float or None
        One GPU's NVLink bandwidth per direction in bytes/s; None without NVLink.
    pcie_bytes_per_s : float
        Host link bandwidth per direction in bytes/s.
    sources : tuple of (str, str)
        Provenance shown by :meth:`describe`.
    """

    name: str
    sm_count: int
    boost_clock_hz: float
    fp32_flops: float
    tf32_tensor_flops: float | None
    fp16_tensor_flops: float | None
    hbm_bandwidth: float
    l2_bytes: int
    memory_bytes: int
    arch: str = "ampere"
    form: str = "SXM"
    fp16_flops: float | None = None
    bf16_tensor_flops: float | None = None
    fp8_tensor_flops: float | None = None
    smem_per_sm_bytes: int = 164 * _KiB
    registers_per_sm: int = 65536
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    l2_bandwidth: float | None = None
    tdp_watts: float | None = None
    nvlink_bytes_per_s: float | None = None
    pcie_bytes_per_s: float = 32e9
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        owner = f"GPUSpec({self.name!r})"
        for fname in _INT_FIELDS:
            v = getattr(self, fname)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{owner}.{fname} must be a positive int, got {v!r}")
        for fname in _RATE_FIELDS:
            _check_positive(owner, fname, getattr(self, fname))
        for fname in _OPTIONAL_RATE_FIELDS:
            if getattr(self, fname) is not None:
                _check_positive(owner, fname, getattr(self, fname))
        if self.arch not in ARCHS:
            raise ValueError(f"{owner}.arch must be one of {ARCHS}, got {self.arch!r}")
        if self.form not in FORMS:
            raise ValueError(f"{owner}.form must be one of {FORMS}, got {self.form!r}")

    def replace(self, **changes: Any) -> GPUSpec:
        """Copy with some fields changed; the name gets a ``*`` unless one is given.

        Example: ``A100_40GB.replace(hbm_bandwidth=2.0e12)``.
        """
        if "name" not in changes:
            changes["name"] = self.name + "*"
        return dataclasses.replace(self, **changes)

    @property
    def has_tensor_cores(self) -> bool:
        """True when the GPU has FP16 tensor cores (Volta and later)."""
        return self.fp16_tensor_flops is not None

    def peak_flops(self, dtype: Any = "float16", *, tf32: bool = False) -> float:
        """Compute peak in FLOP/s that :func:`~ipukern.gpu.estimate_conv` uses for ``dtype``.

        Parameters
        ----------
        dtype : str or dtype
            ``"float16"`` -> FP16 tensor-core peak (FP16 CUDA-core peak on a GPU without
            tensor cores); ``"float32"`` -> FP32 CUDA-core peak, or the TF32 tensor-core peak
            when ``tf32=True``.
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
            if self.fp16_tensor_flops is None:
                rate = self.fp32_flops if self.fp16_flops is None else self.fp16_flops
                return rate, "FP16 CUDA-core", False
            return self.fp16_tensor_flops, "FP16 tensor-core", True
        if tf32:
            if self.tf32_tensor_flops is None:
                raise ValueError(f"{self.name} has no TF32 tensor cores; use tf32=False "
                                 "(FP32 CUDA cores) or an Ampere/Hopper GPU")
            return self.tf32_tensor_flops, "TF32 tensor-core", True
        return self.fp32_flops, "FP32 CUDA-core", False

    def describe(self) -> str:
        """Multi-line human-readable summary."""
        def tf(x: float | None) -> str:
            return "n/a" if x is None else f"{x / 1e12:.1f}"

        def gbs(x: float | None) -> str:
            return "n/a" if x is None else f"{x / 1e9:.0f} GB/s"

        fp16 = self.fp32_flops if self.fp16_flops is None else self.fp16_flops
        lines = [
            f"{self.name} ({self.arch}, {self.form})",
            f"  SMs / boost clock    {self.sm_count} / {self.boost_clock_hz / 1e9:.3f} GHz",
            f"  FP32 (CUDA cores)    {self.fp32_flops / 1e12:.1f} TFLOP/s",
            f"  FP16 (CUDA cores)    {fp16 / 1e12:.1f} TFLOP/s",
            f"  TF32 tensor (dense)  {tf(self.tf32_tensor_flops)} TFLOP/s",
            f"  FP16 tensor (dense)  {tf(self.fp16_tensor_flops)} TFLOP/s",
            f"  BF16 tensor (dense)  {tf(self.bf16_tensor_flops)} TFLOP/s",
            f"  FP8 tensor (dense)   {tf(self.fp8_tensor_flops)} TFLOP/s",
            f"  DRAM bandwidth       {self.hbm_bandwidth / 1e9:.0f} GB/s",
            f"  L2 bandwidth         {gbs(self.l2_bandwidth)}",
            f"  L2 / DRAM            {self.l2_bytes / _MiB:.0f} MiB / {self.memory_bytes / _GiB:.0f} GiB",
            f"  per SM               {self.smem_per_sm_bytes // _KiB} KiB shared, "
            f"{self.registers_per_sm} registers, {self.max_warps_per_sm} warps, "
            f"{self.max_blocks_per_sm} blocks",
            f"  NVLink / PCIe        {gbs(self.nvlink_bytes_per_s)} / {gbs(self.pcie_bytes_per_s)} "
            "per direction",
            f"  TDP                  {'n/a' if self.tdp_watts is None else f'{self.tdp_watts:.0f} W'}",
        ]
        lines += [f"  source: {key}: {src}" for key, src in self.sources]
        return "\n".join(lines)


# ---------------------------------------------------------------- per-architecture SM limits
# [CUDA-CC] "Technical Specifications per Compute Capability": maximum shared memory per SM,
# 32-bit registers per SM (64 K on every architecture here), maximum resident warps and
# resident blocks per SM.
_SM_LIMITS: dict[str, dict[str, int]] = {
    "sm_60": dict(smem_per_sm_bytes=64 * _KiB, max_warps_per_sm=64, max_blocks_per_sm=32),  # P100
    "sm_61": dict(smem_per_sm_bytes=96 * _KiB, max_warps_per_sm=64, max_blocks_per_sm=32),  # P4
    "sm_70": dict(smem_per_sm_bytes=96 * _KiB, max_warps_per_sm=64, max_blocks_per_sm=32),  # V100
    "sm_75": dict(smem_per_sm_bytes=64 * _KiB, max_warps_per_sm=32, max_blocks_per_sm=16),  # T4, TITAN RTX
    "sm_80": dict(smem_per_sm_bytes=164 * _KiB, max_warps_per_sm=64, max_blocks_per_sm=32),  # A100
    "sm_89": dict(smem_per_sm_bytes=100 * _KiB, max_warps_per_sm=48, max_blocks_per_sm=24),  # L4
    "sm_90": dict(smem_per_sm_bytes=228 * _KiB, max_warps_per_sm=64, max_blocks_per_sm=32),  # H100
}

# PCIe per direction: Gen3 x16 = 8 GT/s x 16 lanes x 128/130 = 15.75 GB/s (datasheets quote
# "32 GB/s" bidirectional, i.e. 16 GB/s per direction); Gen4 x16 = 2x Gen3 ("64 GB/s"); Gen5
# x16 = 4x Gen3 ("128 GB/s"). PCI-SIG base specifications 3.0 / 4.0 / 5.0.
_PCIE3, _PCIE4, _PCIE5 = 16e9, 32e9, 64e9

# ------------------------------------------------------------------------------ Ampere
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
    arch="ampere", form="SXM",
    fp16_flops=78e12,                   # [WP-A] table 1: peak FP16 (non-tensor) 78 TFLOPS = 4x FP32
    bf16_tensor_flops=312e12,           # A100 datasheet: BF16 tensor 312 dense (624 sparse)
    fp8_tensor_flops=None,              # FP8 tensor cores arrive with Hopper [WP-H]
    **_SM_LIMITS["sm_80"],
    l2_bandwidth=5120 * 1.41e9,         # [WP-A] table 3: L2 read 5120 B/clk; UNCERTAIN: x boost clock
    tdp_watts=400.0,                    # A100 datasheet: SXM4 max TDP 400 W
    nvlink_bytes_per_s=300e9,           # A100 datasheet: NVLink3 600 GB/s bidirectional (12 links)
    pcie_bytes_per_s=_PCIE4,            # A100 datasheet: PCIe Gen4 64 GB/s bidirectional
    sources=(("rates", "NVIDIA A100 datasheet (SXM4 40 GB), via ipu-hardware.md section 12"),
             ("SMs/clock/L2", "NVIDIA Ampere GA100 whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 8.0")),
)

A100_80GB = A100_40GB.replace(
    name="A100_80GB",
    hbm_bandwidth=2.039e12,             # A100 datasheet: 80 GB HBM2e SXM 2,039 GB/s [S33][S34]
    memory_bytes=80 * _GiB,
    sources=(("rates", "NVIDIA A100 datasheet (SXM4 80 GB): as 40 GB but HBM2e 2,039 GB/s"),
             ("SMs/clock/L2", "NVIDIA Ampere GA100 whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 8.0")),
)

# A100 PCIe: same GA100 die, SM count and 1410 MHz boost as SXM4 (A100 datasheet lists the same
# peak TFLOPS for both forms); it differs in power and memory bandwidth.
A100_PCIE_40GB = A100_40GB.replace(
    name="A100_PCIE_40GB", form="PCIe",
    hbm_bandwidth=1.555e12,             # A100 PCIe datasheet (40 GB): HBM2 1,555 GB/s
    tdp_watts=250.0,                    # A100 PCIe datasheet (40 GB): 250 W
    # A100 datasheet: "NVLink Bridge for 2 GPUs: 600 GB/s" bidirectional; it joins one pair only
    nvlink_bytes_per_s=300e9,
    sources=(("rates", "NVIDIA A100 PCIe datasheet (40 GB): as SXM4, 250 W"),
             ("SMs/clock/L2", "NVIDIA Ampere GA100 whitepaper"),
             ("NVLink", "NVLink bridge for 2 GPUs, 600 GB/s bidirectional (A100 datasheet)")),
)

A100_PCIE_80GB = A100_PCIE_40GB.replace(
    name="A100_PCIE_80GB",
    hbm_bandwidth=1.935e12,             # A100 datasheet (80 GB PCIe): HBM2e 1,935 GB/s
    memory_bytes=80 * _GiB,
    tdp_watts=300.0,                    # A100 datasheet (80 GB PCIe): 300 W
    sources=(("rates", "NVIDIA A100 datasheet (80 GB PCIe): HBM2e 1,935 GB/s, 300 W"),
             ("SMs/clock/L2", "NVIDIA Ampere GA100 whitepaper"),
             ("NVLink", "NVLink bridge for 2 GPUs, 600 GB/s bidirectional (A100 datasheet)")),
)

# ------------------------------------------------------------------------------ Volta
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
    arch="volta", form="SXM",
    fp16_flops=31.4e12,                 # [WP-V] table 1: peak FP16 (non-tensor) 31.4 TFLOPS = 2x FP32
    **_SM_LIMITS["sm_70"],
    l2_bandwidth=2048 * 1.53e9,         # [WP-A] table 3: V100 L2 read 2048 B/clk; UNCERTAIN: x boost
    tdp_watts=300.0,                    # V100 datasheet (SXM2): 300 W
    nvlink_bytes_per_s=150e9,           # V100 datasheet: NVLink2 300 GB/s bidirectional (6 links)
    pcie_bytes_per_s=_PCIE3,            # V100 datasheet: PCIe Gen3 32 GB/s bidirectional
    sources=(("rates", "NVIDIA V100 datasheet (SXM2)"),
             ("SMs/clock/L2", "NVIDIA Volta GV100 whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 7.0")),
)

V100_PCIE = V100.replace(
    name="V100_PCIE", form="PCIe",
    boost_clock_hz=1.38e9,              # V100 PCIe: 1380 MHz boost; 80 x 64 x 2 x 1.38 GHz = 14.1 TF
    fp32_flops=14e12,                   # NVIDIA V100 datasheet (PCIe): 14 TFLOPS
    fp16_tensor_flops=112e12,           # NVIDIA V100 datasheet (PCIe): 112 TFLOPS tensor
    fp16_flops=28e12,                   # 2x FP32 [WP-V]; UNCERTAIN: derived, not a datasheet line
    l2_bandwidth=2048 * 1.38e9,         # as V100 SXM2 at the PCIe boost clock; UNCERTAIN
    tdp_watts=250.0,                    # V100 datasheet (PCIe): 250 W
    nvlink_bytes_per_s=None,            # the PCIe V100 has no NVLink
    sources=(("rates", "NVIDIA V100 datasheet (PCIe 32 GB)"),
             ("SMs/L2", "NVIDIA Volta GV100 whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 7.0")),
)

# ------------------------------------------------------------------------------ Hopper
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
    arch="hopper", form="SXM",
    fp16_flops=133.8e12,                # [WP-H] table: FP16 non-tensor 133.8 (SXM5); UNCERTAIN
    bf16_tensor_flops=989.4e12,         # H100 datasheet (SXM5): BF16 1,979 with sparsity
    fp8_tensor_flops=1978.9e12,         # H100 datasheet (SXM5): FP8 3,958 with sparsity
    **_SM_LIMITS["sm_90"],
    # GAP: no public L2 bandwidth figure for Hopper; assumed A100's 5120 B/clk at 1.98 GHz
    l2_bandwidth=5120 * 1.98e9,
    tdp_watts=700.0,                    # H100 datasheet (SXM5): up to 700 W
    nvlink_bytes_per_s=450e9,           # H100 datasheet: NVLink4 900 GB/s bidirectional (18 links)
    pcie_bytes_per_s=_PCIE5,            # H100 datasheet: PCIe Gen5 128 GB/s bidirectional
    sources=(("rates", "NVIDIA H100 datasheet (SXM5); dense = half the sparse figures"),
             ("SMs/L2", "NVIDIA Hopper whitepaper"),
             ("clock", "1.98 GHz implied by the FP32 figure (uncertain)"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 9.0")),
)

H100_PCIE = H100.replace(
    name="H100_PCIE", form="PCIe",
    sm_count=114,                       # H100 datasheet / Hopper whitepaper: PCIe has 114 SMs
    boost_clock_hz=1.755e9,             # Hopper whitepaper: 1755 MHz; 114 x 128 x 2 x 1.755 = 51.2 TF
    fp32_flops=51.2e12,                 # H100 datasheet (PCIe): 51 TFLOPS
    tf32_tensor_flops=378e12,           # H100 datasheet (PCIe): 756 with sparsity
    fp16_tensor_flops=756e12,           # H100 datasheet (PCIe): 1,513 with sparsity
    hbm_bandwidth=2.0e12,               # H100 datasheet (PCIe): HBM2e 2 TB/s
    fp16_flops=102.4e12,                # [WP-H]: 2x FP32; UNCERTAIN
    bf16_tensor_flops=756e12,           # H100 datasheet (PCIe): 1,513 with sparsity
    fp8_tensor_flops=1513e12,           # H100 datasheet (PCIe): 3,026 with sparsity
    l2_bandwidth=5120 * 1.755e9,        # GAP: as H100 SXM5 (A100's B/clk) at the PCIe clock
    tdp_watts=350.0,                    # H100 datasheet (PCIe): 300-350 W; the upper figure
    nvlink_bytes_per_s=300e9,           # H100 datasheet (PCIe): NVLink bridge 600 GB/s bidirectional
    sources=(("rates", "NVIDIA H100 datasheet (PCIe 80 GB); dense = half the sparse figures"),
             ("SMs/clock", "NVIDIA Hopper whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 9.0")),
)

# ------------------------------------------------------------------------------ Ada, Turing
L4 = GPUSpec(
    name="L4",
    sm_count=58,                        # [WP-ADA]/L4 datasheet: AD104, 7,424 CUDA cores = 58 x 128
    boost_clock_hz=2.04e9,              # L4 datasheet: 2040 MHz; 58 x 128 x 2 x 2.04 GHz = 30.3 TF
    fp32_flops=30.3e12,                 # L4 datasheet: FP32 30.3 TFLOPS
    tf32_tensor_flops=60e12,            # L4 datasheet: TF32 120 with sparsity; UNCERTAIN: 60.0 vs 60.6
    fp16_tensor_flops=121e12,           # L4 datasheet: FP16 242 with sparsity
    hbm_bandwidth=300e9,                # L4 datasheet: 24 GB GDDR6, 300 GB/s
    l2_bytes=48 * _MiB,                 # [WP-ADA]: AD104 48 MB L2
    memory_bytes=24 * _GiB,             # L4 datasheet: 24 GB
    arch="ada", form="PCIe",
    fp16_flops=None,                    # [WP-ADA]: non-tensor FP16 = FP32 rate on Ada
    bf16_tensor_flops=121e12,           # L4 datasheet: BF16 242 with sparsity
    fp8_tensor_flops=242.5e12,          # L4 datasheet: FP8 485 with sparsity
    **_SM_LIMITS["sm_89"],
    # GAP: no public L2 bandwidth; V100's 2048 B/clk scaled by SMs (58/80) at 2.04 GHz
    l2_bandwidth=2048 * 58 / 80 * 2.04e9,
    tdp_watts=72.0,                     # L4 datasheet: 72 W
    nvlink_bytes_per_s=None,            # L4 has no NVLink
    pcie_bytes_per_s=_PCIE4,            # L4 datasheet: PCIe Gen4 x16 64 GB/s bidirectional
    sources=(("rates", "NVIDIA L4 datasheet; dense = half the sparse figures"),
             ("L2", "NVIDIA Ada Lovelace whitepaper (AD104)"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 8.9")),
)

T4 = GPUSpec(
    name="T4",
    sm_count=40,                        # [WP-T]: T4 = TU104 with 40 SMs (2,560 CUDA cores)
    boost_clock_hz=1.59e9,              # T4 datasheet / [WP-T]: 1590 MHz; 40 x 64 x 2 x 1.59 = 8.1 TF
    fp32_flops=8.1e12,                  # T4 datasheet: FP32 8.1 TFLOPS
    tf32_tensor_flops=None,             # Turing has no TF32
    fp16_tensor_flops=65e12,            # T4 datasheet: mixed precision (FP16/FP32) 65 TFLOPS
    hbm_bandwidth=320e9,                # T4 datasheet: 16 GB GDDR6, 320+ GB/s
    l2_bytes=4 * _MiB,                  # [WP-T]: T4 4 MB L2
    memory_bytes=16 * _GiB,             # T4 datasheet: 16 GB
    arch="turing", form="PCIe",
    fp16_flops=16.2e12,                 # [CUDA-CC] sm_75: FP16 at 2x the FP32 rate; UNCERTAIN
    **_SM_LIMITS["sm_75"],
    l2_bandwidth=2048 * 40 / 80 * 1.59e9,   # GAP: V100's 2048 B/clk scaled by SMs (40/80)
    tdp_watts=70.0,                     # T4 datasheet: 70 W
    nvlink_bytes_per_s=None,            # T4 has no NVLink
    pcie_bytes_per_s=_PCIE3,            # T4 datasheet: PCIe Gen3 x16
    sources=(("rates", "NVIDIA T4 datasheet"), ("SMs/L2", "NVIDIA Turing whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 7.5")),
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
    arch="turing", form="PCIe",
    fp16_flops=32.6e12,                 # [CUDA-CC] sm_75: FP16 at 2x the FP32 rate; UNCERTAIN
    **_SM_LIMITS["sm_75"],
    l2_bandwidth=2048 * 72 / 80 * 1.77e9,   # GAP: V100's 2048 B/clk scaled by SMs (72/80)
    tdp_watts=280.0,                    # NVIDIA TITAN RTX product page: 280 W
    nvlink_bytes_per_s=50e9,            # TITAN RTX product page: NVLink bridge 100 GB/s bidirectional
    pcie_bytes_per_s=_PCIE3,            # PCIe Gen3 x16
    sources=(("rates", "NVIDIA Turing whitepaper (TITAN RTX); peers-and-gpu.md section 3.1"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 7.5")),
)

# ------------------------------------------------------------------------------ Pascal
P100 = GPUSpec(
    name="P100",
    sm_count=56,                        # [WP-P]: Tesla P100 has 56 SMs (3,584 CUDA cores)
    boost_clock_hz=1.303e9,             # P100 PCIe: 1303 MHz; 56 x 64 x 2 x 1.303 GHz = 9.34 TF
    fp32_flops=9.3e12,                  # P100 datasheet (PCIe): FP32 9.3 TFLOPS
    tf32_tensor_flops=None,             # no tensor cores
    fp16_tensor_flops=None,             # no tensor cores (Volta introduced them)
    hbm_bandwidth=732e9,                # P100 datasheet (PCIe 16 GB): CoWoS HBM2 732 GB/s
    l2_bytes=4 * _MiB,                  # [WP-P]: 4 MB L2
    memory_bytes=16 * _GiB,             # the 16 GB PCIe part (a 12 GB one also exists)
    arch="pascal", form="PCIe",
    fp16_flops=18.7e12,                 # P100 datasheet (PCIe): FP16 18.7 TFLOPS (2x FP32, sm_60)
    **_SM_LIMITS["sm_60"],
    l2_bandwidth=2048 * 56 / 80 * 1.303e9,  # GAP: V100's 2048 B/clk scaled by SMs (56/80)
    tdp_watts=250.0,                    # P100 datasheet (PCIe): 250 W
    nvlink_bytes_per_s=None,            # NVLink only on the SXM2 P100
    pcie_bytes_per_s=_PCIE3,            # P100 datasheet: PCIe Gen3 32 GB/s bidirectional
    sources=(("rates", "NVIDIA Tesla P100 PCIe datasheet (16 GB)"),
             ("SMs/L2", "NVIDIA Tesla P100 (GP100) whitepaper"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 6.0")),
)

P4 = GPUSpec(
    name="P4",
    sm_count=20,                        # P4 datasheet: GP104, 2,560 CUDA cores = 20 x 128
    boost_clock_hz=1.063e9,             # P4 datasheet: 1063 MHz; 20 x 128 x 2 x 1.063 = 5.44 TF
    fp32_flops=5.5e12,                  # P4 datasheet: FP32 5.5 TFLOPS
    tf32_tensor_flops=None,             # no tensor cores
    fp16_tensor_flops=None,             # no tensor cores
    hbm_bandwidth=192e9,                # P4 datasheet: 8 GB GDDR5, 192 GB/s
    l2_bytes=2 * _MiB,                  # GP104: 2 MB L2 (GTX 1080 whitepaper); UNCERTAIN for P4
    memory_bytes=8 * _GiB,              # P4 datasheet: 8 GB
    arch="pascal", form="PCIe",
    # [CUDA-CC] throughput table, cc 6.1: 2 FP16 results/clk/SM vs 128 FP32 -> 1/64 of FP32
    fp16_flops=5.5e12 / 64,
    **_SM_LIMITS["sm_61"],
    l2_bandwidth=2048 * 20 / 80 * 1.063e9,  # GAP: V100's 2048 B/clk scaled by SMs (20/80)
    tdp_watts=75.0,                     # P4 datasheet: 50-75 W; the upper figure
    nvlink_bytes_per_s=None,            # P4 has no NVLink
    pcie_bytes_per_s=_PCIE3,            # P4 datasheet: PCIe Gen3 x16
    sources=(("rates", "NVIDIA Tesla P4 datasheet"),
             ("per-SM limits", "CUDA C++ Programming Guide, compute capability 6.1")),
)

GPU_PRESETS: dict[str, GPUSpec] = {
    g.name: g for g in (A100_40GB, A100_80GB, A100_PCIE_40GB, A100_PCIE_80GB, V100, V100_PCIE, H100,
                        H100_PCIE, L4, T4, P100, P4, TITAN_RTX)
}


def _key(name: str) -> str:
    return name.strip().upper().replace("-", "_").replace(" ", "_")


# "A100" is the 40 GB SXM4 part; the long names are what torch.cuda.get_device_name prints
# (as NeuSight's data sets record the devices).
_GPU_ALIASES = {_key(alias): preset for alias, preset in {
    "A100": "A100_40GB",
    "NVIDIA H100 80GB HBM3": "H100",
    "NVIDIA L4": "L4",
    "NVIDIA A100-PCIE-40GB": "A100_PCIE_40GB",
    "NVIDIA A100 80GB PCIe": "A100_PCIE_80GB",
    "NVIDIA A100-SXM4-40GB": "A100_40GB",
    "Tesla V100-PCIE-32GB": "V100_PCIE",
    "Tesla T4": "T4",
    "Tesla P100-PCIE-16GB": "P100",
    "Tesla P4": "P4",
}.items()}


def get_gpu(gpu: GPUSpec | str | None) -> GPUSpec:
    """Resolve a preset name or pass a :class:`GPUSpec` through; None -> ``A100_40GB``.

    Names are case-insensitive; ``-`` and spaces count as ``_`` (``"a100-80gb"`` works),
    ``"A100"`` means the 40 GB SXM4 part, and the device names PyTorch prints
    (``"NVIDIA A100-SXM4-40GB"``, ``"Tesla T4"``, ...) name their presets.

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
        key = _key(gpu)
        key = _GPU_ALIASES.get(key, key)
        if key in GPU_PRESETS:
            return GPU_PRESETS[key]
        raise ValueError(f"unknown GPU {gpu!r}; presets are {sorted(GPU_PRESETS)} "
                         "(or pass a GPUSpec)")
    raise TypeError(f"gpu must be a GPUSpec or a preset name, got {type(gpu).__name__}")
