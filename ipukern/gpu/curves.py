"""GPU efficiency curves: the fractions of the compute peak and of DRAM bandwidth a GPU
software stack's conv kernels reach, as a function of channels per group.

The one-curve roofline (:func:`ipukern.gpu.model.estimate_conv_curve`) reads every layer off a
curve; the kernel model (:mod:`ipukern.gpu.kernels`) reads only direct grouped/depthwise
convs off it. The calibration of each preset curve is in :mod:`ipukern.gpu.model`'s docstring.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

__all__ = ["EfficiencyCurve", "CUDNN_CURVE", "OPTIMIZED_CURVE", "EFFICIENCY_CURVES", "get_efficiency_curve"]


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


