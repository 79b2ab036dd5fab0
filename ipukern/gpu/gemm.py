"""GEMM-class GPU kernels as thread-block tiles in waves over the SMs.

A cuBLAS/cuDNN GEMM ``C[b] (M x N) = A[b] (M x K) @ B[b] (K x N)`` launches a grid of
thread blocks, each computing one ``tile.m x tile.n`` block of C over (a slice of) K. The
model prices one launch from the structure of that grid:

* **occupancy**: blocks per SM from the tile's threads, registers and shared memory against
  the SM's limits (:class:`~ipukern.gpu.specs.GPUSpec` fields, CUDA C Programming Guide);
* **waves**: the grid's tiles run in waves of ``SMs x blocks per SM``; the last, partial wave
  is priced at the blocks each of its SMs holds (wave quantisation);
* **per-tile time**: ``2 x tile.m x tile.n x (K_slice + k_overhead)`` FLOP at the SM's peak
  times an efficiency that rises with the resident warps (latency hiding):
  ``e(w) = e_sat x (1 - exp(-w / w0))``; ``k_overhead`` is the prologue/epilogue in K units;
* **operand traffic**: each wave streams the A rows and B columns its tiles cover; when A
  and B fit in half the L2 they are read from DRAM once (L2 reuse), else once per wave;
  C is written once. Time = max(compute, DRAM traffic / (e_mem x bandwidth));
* **split-K**: K cut into ``s`` slices multiplies the tiles (filling the SMs on small M x N)
  and adds a memory-bound reduction of the ``s`` fp32 partial C's. Only where the library
  does it (``GemmProblem.split_k``): tensor-core GEMMs and cuDNN's weight gradients, not
  cuBLAS' FP32 SIMT GEMMs (one kernel over the whole K, :mod:`ipukern.gpu.kernels`);
* the **candidate** (tile, split) with the least time wins, as cuBLAS' heuristics aim to.

The efficiency constants ``e_sat``, ``w0``, ``k_overhead``, ``e_mem`` are empirical. They
live in :mod:`ipukern.gpu.calibration`, fitted on named training rows only (FP32 SIMT) or
taken from a cited source (tensor cores); see ``docs/gpu-model.rst``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .calibration import GEMM_CALIBRATION, GemmCalibration
from .specs import GPUSpec

__all__ = ["Tile", "GemmProblem", "GemmTime", "gemm_seconds", "tiles_for"]


@dataclass(frozen=True)
class Tile:
    """One thread-block tile shape of a GEMM kernel family."""

    m: int
    n: int
    k: int                 # K step per main-loop iteration (shared-memory stage depth)
    threads: int
    regs_per_thread: int
    stages: int
    family: str            # "simt" (FP32 CUDA cores) or "tensor"

    def smem_bytes(self, elem: int) -> int:
        """Shared memory of the A and B stages."""
        return (self.m + self.n) * self.k * elem * self.stages

    @property
    def name(self) -> str:
        return f"{self.family}_{self.m}x{self.n}x{self.k}"


# FP32 SIMT tiles: the shapes cuBLAS' sgemm kernels are named after in NeuSight's traces
# (ampere/volta/maxwell_sgemm_{128x128,128x64,64x64,128x32,32x128,...}, cutlass simt
# 256x128_8x4; "sliced1x4" tiles split K over 4 warps). Each thread computes an 8x8 (or
# 4x8) block of C, hence threads = m*n/64 and about 128 registers for the 128x128 tile.
_SIMT = (
    Tile(256, 128, 8, 256, 200, 4, "simt"),
    Tile(128, 128, 8, 256, 128, 2, "simt"),
    Tile(128, 64, 8, 128, 128, 2, "simt"),
    Tile(64, 128, 8, 128, 128, 2, "simt"),
    Tile(64, 64, 8, 64, 128, 2, "simt"),
    Tile(128, 32, 8, 128, 96, 2, "simt"),
    Tile(32, 128, 8, 128, 96, 2, "simt"),
    Tile(64, 32, 8, 128, 64, 2, "simt"),     # sliced1x4
    Tile(32, 32, 8, 128, 64, 2, "simt"),     # sliced1x4
)
# Tensor-core tiles (CUTLASS 2.x/3.x default Ampere/Hopper shapes: 256x128x32, 128x256x32,
# 128x128x32, 128x64x32, 64x128x32, 64x64x32 with 3-4 stages; CUTLASS
# include/cutlass/gemm/device/default_gemm_configuration.h and the profiler's kernel list).
_TENSOR = (
    Tile(256, 128, 32, 256, 232, 3, "tensor"),
    Tile(128, 256, 32, 256, 232, 3, "tensor"),
    Tile(128, 128, 32, 256, 128, 4, "tensor"),
    Tile(128, 64, 32, 128, 128, 4, "tensor"),
    Tile(64, 128, 32, 128, 128, 4, "tensor"),
    Tile(64, 64, 32, 128, 96, 5, "tensor"),
)
_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


def tiles_for(tensor: bool) -> tuple[Tile, ...]:
    """The candidate tiles of one kernel family."""
    return _TENSOR if tensor else _SIMT


@dataclass(frozen=True)
class GemmProblem:
    """``batch`` products of (m x k) @ (k x n) on one kernel family.

    ``elem`` / ``out_elem`` are bytes per operand and per C element (``out_elem`` 0: as
    ``elem``); ``peak`` the FLOP/s of the family (FP32 CUDA-core, TF32 or FP16 tensor);
    ``tensor`` picks tensor-core tiles; ``a_bytes`` the unique DRAM bytes of all A operands
    when fewer than ``batch*m*k*elem`` (a conv's input under implicit GEMM). ``split_k``:
    whether the library may split K over several blocks (False: cuBLAS' FP32 SIMT GEMMs,
    one kernel over the whole K).
    """

    m: int
    n: int
    k: int
    batch: int = 1
    elem: int = 4
    out_elem: int = 0
    peak: float = 0.0
    tensor: bool = False
    a_bytes: int | None = None
    split_k: bool = True

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GEMM {name} must be an int >= 1, got {v!r}")
        if not (self.peak > 0 and math.isfinite(self.peak)):
            raise ValueError(f"GEMM peak must be a positive FLOP/s, got {self.peak!r}")
        if not isinstance(self.split_k, bool):
            raise TypeError(f"GEMM split_k must be a bool, got {self.split_k!r}")
        if not self.out_elem:
            object.__setattr__(self, "out_elem", self.elem)


@dataclass(frozen=True)
class GemmTime:
    """One GEMM launch as the model prices it."""

    seconds: float
    tile: str
    split_k: int
    blocks_per_sm: int
    tiles: int
    waves: float
    compute_seconds: float
    memory_seconds: float
    reduce_seconds: float
    dram_bytes: int
    bound: str


def _blocks_per_sm(tile: Tile, gpu: GPUSpec, elem: int) -> int:
    by_threads = gpu.max_warps_per_sm * 32 // tile.threads
    by_regs = gpu.registers_per_sm // (tile.threads * tile.regs_per_thread)
    by_smem = gpu.smem_per_sm_bytes // max(1, tile.smem_bytes(elem))
    return max(0, min(gpu.max_blocks_per_sm, by_threads, by_regs, by_smem))


def _sm_rate(gpu: GPUSpec, tensor_peak: float, warps: float, cal: GemmCalibration,
             tensor: bool, reuse: float) -> float:
    """FLOP/s one SM reaches with ``warps`` resident warps of a tile with operand ``reuse``."""
    e_sat = cal.tensor_efficiency if tensor else cal.simt_efficiency
    w0 = cal.tensor_warps if tensor else cal.simt_warps
    if tensor:
        clock = 1.0
    else:
        clock = cal.clock_fraction(gpu.name, gpu.tdp_watts) * reuse / (reuse + cal.simt_reuse)
    return tensor_peak / gpu.sm_count * clock * e_sat * (1.0 - math.exp(-warps / w0))


def _candidate(gpu: GPUSpec, pr: GemmProblem, tile: Tile, split: int,
               cal: GemmCalibration) -> GemmTime | None:
    m, n, k, batch, elem, out_elem = pr.m, pr.n, pr.k, pr.batch, pr.elem, pr.out_elem
    peak, tensor, a_unique = pr.peak, pr.tensor, pr.a_bytes
    bps = _blocks_per_sm(tile, gpu, elem)
    if bps == 0:
        return None
    k_slice = math.ceil(k / split)
    if split > 1 and k_slice < 4 * tile.k:
        return None
    tm, tn = math.ceil(m / tile.m), math.ceil(n / tile.n)
    tiles = tm * tn * batch * split
    sms = gpu.sm_count
    warps = tile.threads // 32
    reuse = tile.m * tile.n / (tile.m + tile.n)
    flops_tile = 2.0 * tile.m * tile.n * (k_slice + cal.k_overhead)

    def wave_time(blocks: int) -> float:
        return flops_tile * blocks / _sm_rate(gpu, peak, blocks * warps, cal, tensor, reuse)

    full, rest = divmod(tiles, sms * bps)
    t_compute = full * wave_time(bps)
    if rest:
        t_compute += wave_time(math.ceil(rest / sms))
    waves = tiles / (sms * bps)
    # operand traffic: per-wave A rows / B columns, or once when A+B fit in half the L2
    a_bytes, b_bytes = m * k * elem, k * n * elem
    a_scale = 1.0
    if a_unique is not None:        # implicit GEMM: A is gathered from a smaller tensor
        a_scale = min(1.0, a_unique / batch / a_bytes)
        a_bytes = a_unique // batch
    c_bytes = m * n * (4 if split > 1 else out_elem)
    if a_bytes + b_bytes <= gpu.l2_bytes // 2:
        dram = batch * (a_bytes + b_bytes) + batch * split * c_bytes
    else:
        resident = min(tiles, sms * bps) / split
        rows = min(tm, max(1, math.isqrt(int(resident))))
        cols = min(tn, max(1, math.ceil(resident / rows)))
        per_wave = (rows * tile.m * a_scale + cols * tile.n) * k * elem
        dram = max(batch * (a_bytes + b_bytes), math.ceil(waves) * per_wave) + batch * split * c_bytes
    t_mem = dram / (cal.memory_efficiency * gpu.hbm_bandwidth)
    t_reduce = 0.0
    if split > 1:       # a separate reduction of the fp32 partials, memory-bound
        t_reduce = (batch * m * n * (4 * split + out_elem)) / (cal.memory_efficiency * gpu.hbm_bandwidth) \
            + cal.launch_s
    seconds = max(t_compute, t_mem) + t_reduce + cal.launch_s
    return GemmTime(seconds=seconds, tile=tile.name, split_k=split, blocks_per_sm=bps, tiles=tiles,
                    waves=waves, compute_seconds=t_compute, memory_seconds=t_mem,
                    reduce_seconds=t_reduce, dram_bytes=int(dram),
                    bound="compute" if t_compute >= t_mem else "memory")


@functools.lru_cache(maxsize=65536)
def _gemm_cached(gpu: GPUSpec, pr: GemmProblem, cal: GemmCalibration) -> GemmTime:
    best: GemmTime | None = None
    for tile in tiles_for(pr.tensor):
        for split in (_SPLITS if pr.split_k else (1,)):
            c = _candidate(gpu, pr, tile, split, cal)
            if c is not None and (best is None or c.seconds < best.seconds):
                best = c
    if best is None:
        raise ValueError(f"no GEMM tile fits on {gpu.name} (shared memory / registers per SM)")
    return best


def gemm_seconds(gpu: GPUSpec, problem: GemmProblem, *,
                 calibration: GemmCalibration | None = None) -> GemmTime:
    """The cheapest (tile, split-K) launch for a :class:`GemmProblem` on ``gpu``.

    ``calibration`` defaults to :data:`ipukern.gpu.calibration.GEMM_CALIBRATION`.
    """
    if not isinstance(problem, GemmProblem):
        raise TypeError(f"problem must be a GemmProblem, got {type(problem).__name__}")
    cal = GEMM_CALIBRATION if calibration is None else calibration
    return _gemm_cached(gpu, problem, cal)
