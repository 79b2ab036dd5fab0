"""Grouped-convolution scaling: how throughput changes as channels per group shrink, on the
simulated IPU versus the GPU model.

One call answers the project's main question::

    from ipukern.scaling import grouped_conv_sweep
    rows = grouped_conv_sweep()              # default layers, batch 1 and 32, fp16, GC200 vs A100
    print(rows.format_table())
    rows.to_csv("scaling.csv"); rows.to_json("scaling.json")

Design
------
* A :class:`ConvLayer` describes a layer *independently of its groups*: channels, spatial
  size, kernel, stride. The sweep turns it into one :class:`~ipukern.conv.ConvParams` per
  channels-per-group value (``groups = channels // cpg``; the output channels stay fixed,
  so a cpg value also needs ``out_channels % groups == 0``).
* Channels per group (cpg) is always the *input* channels per group, as in the GPU model and
  in ``ConvParams.in_per_group``. ``"dense"`` means ``cpg = channels`` (groups = 1).
  Values that do not divide the layer's channels (e.g. 32 for the 144-channel EfficientNet
  layer) are **skipped**, not rounded: the sweep's ``skipped`` list names each one and why.
* The IPU side uses estimate mode (:func:`ipukern.estimate_conv2d`): the same planner and
  program as execute mode, no tensor data, so batch 32 costs the same host time as batch 1.
  The GPU side is :func:`ipukern.gpu.estimate_conv` (roofline x calibrated efficiency; the
  curve, ``"cudnn"`` by default, is recorded in every GPU row).
* Rows are *long*: one :class:`SweepRow` per (layer, batch, cpg, device), IPU machines and
  GPUs alike, with the IPU-only and GPU-only fields left ``None`` on the other kind. Every
  row carries the IPU/GPU throughput ratios of its (layer, batch, cpg) point: an IPU row has
  one ratio per GPU, a GPU row one per IPU machine, and **every ratio is IPU TFLOP/s divided
  by GPU TFLOP/s** (> 1: the IPU is faster). ``ipu_gpu_ratio`` is the ratio of the first
  (machine, GPU) pair that involves the row's device, for the common one-IPU-one-GPU case.
* Utilisation is each device's achieved FLOP/s over *its own* peak for the dtype: the IPU's
  AMP peak for (dtype, partials) (GC200 fp16->fp32: 125 TFLOP/s) and the GPU's FP16
  tensor-core peak (A100: 312 TFLOP/s). Both count the conventional direct MACs
  (``ConvParams.macs``: taps on padding included).
* Memory per tile is the busiest tile's bytes from the program's memory report, *including*
  the reserved bytes for code and stacks (48 KiB on GC200), out of ``tile_bytes``.

Default layer set (:data:`DEFAULT_LAYERS`; batch 1 and 32 unless ``batch`` says otherwise):

==================  ==========================  ================================================
name                shape (C, HxW, kernel)      where it comes from
==================  ==========================  ================================================
resnext50_c128      128->128, 56x56, 3x3        ResNeXt-50 (32x4d) conv2 stage grouped 3x3 (cpg 4)
resnext50_c256      256->256, 28x28, 3x3        ResNeXt-50 (32x4d) conv3 stage grouped 3x3 (cpg 8)
effnet_b0_dw3       144->144, 56x56, 3x3        EfficientNet-B0 stage 2 MBConv6 depthwise 3x3
effnet_b0_dw5       240->240, 28x28, 5x5        EfficientNet-B0 stage 3 MBConv6 depthwise 5x5
mobilenet_v1_dw_s2  64->64, 112x112, 3x3 s2     MobileNetV1 conv_dw_2, strided depthwise
==================  ==========================  ================================================

The first one is "the default layer" the README quotes ratios for.

**Layer lists** (CSV, one layer per row, a header row naming the columns) describe the
layers of a sweep: ``name,channels,height,width`` are required; ``kernel, stride, padding,
out_channels, batch, note`` are optional (defaults as in :class:`~ipukern.scaling.ConvLayer`)::

    name,channels,height,width,kernel,stride
    resnext_c128,128,56,56,3,1
    mobilenet_dw,64,112,112,3,2
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ._files import read_input_text
from ._format import MISSING
from ._format import format_table as format_text_table
from ._pool import run_points
from .dtypes import canonical_dtype, partials_dtype
from .gpu import A100_40GB, GPUSpec, estimate_conv, get_efficiency_curve, get_gpu
from .machine import GC200, MachineSpec, get_machine, with_exchange_bandwidth
from .ops import estimate_conv2d
from .conv import ConvParams

__all__ = [
    "ConvLayer", "DEFAULT_LAYERS", "DEFAULT_CPG", "DEFAULT_BATCH", "SweepRow", "SweepResult",
    "grouped_conv_sweep", "get_layer", "with_exchange_bandwidth", "format_table", "to_csv",
    "to_json", "read_csv", "read_layers", "write_layers", "LAYER_COLUMNS",
]

#: channels-per-group values swept by default; "dense" = the layer's channel count
DEFAULT_CPG: tuple[int | str, ...] = (1, 2, 4, 8, 16, 32, 64, "dense")
#: batch sizes swept by default (each layer's own ``batch`` is used when ``batch=None``)
DEFAULT_BATCH: tuple[int, ...] = (1, 32)


# =========================================================================== layers
@dataclass(frozen=True)
class ConvLayer:
    """A 2-D convolution layer described independently of its group count.

    Parameters
    ----------
    name : str
        Short identifier used in tables, file columns and ``--layer``.
    channels : int
        Input channels C.
    height, width : int
        Input spatial size.
    kernel : int
        Square kernel size.
    stride : int
    padding : int, optional
        Symmetric padding; default ``kernel // 2`` ("same" for odd kernels at stride 1).
    out_channels : int, optional
        Output channels; default ``channels`` (grouped and depthwise layers keep the width).
    batch : int
        Batch used when the sweep is asked for the layers' own batch (``batch=None``).
    note : str
        Where the layer comes from (shown in the JSON metadata).
    """

    name: str
    channels: int
    height: int
    width: int
    kernel: int = 3
    stride: int = 1
    padding: int | None = None
    out_channels: int | None = None
    batch: int = 1
    note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ConvLayer.name must be a non-empty string, got {self.name!r}")
        if self.padding is None:
            object.__setattr__(self, "padding", self.kernel // 2 if isinstance(self.kernel, int) else 0)
        if self.out_channels is None:
            object.__setattr__(self, "out_channels", self.channels)
        for fname, minimum in (("channels", 1), ("height", 1), ("width", 1), ("kernel", 1),
                               ("stride", 1), ("padding", 0), ("out_channels", 1), ("batch", 1)):
            v = getattr(self, fname)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"ConvLayer {self.name!r}: {fname} must be an int, got {v!r}")
            if v < minimum:
                raise ValueError(f"ConvLayer {self.name!r}: {fname} must be >= {minimum}, got {v}")
        # fail early on a kernel that does not fit the padded input (ConvParams checks it too)
        self.params(self.channels)

    def groups_for(self, cpg: int) -> int | None:
        """Group count for ``cpg`` input channels per group, or None if it does not divide
        both the input and the output channels."""
        if cpg < 1 or self.channels % cpg:
            return None
        g = self.channels // cpg
        return g if self.out_channels % g == 0 else None

    def params(self, cpg: int, *, batch: int | None = None, dtype: Any = "float16",
               partials: Any = "float") -> ConvParams:
        """The :class:`ConvParams` of this layer at ``cpg`` channels per group.

        Raises
        ------
        ValueError
            ``cpg`` does not divide the channels, or the shape is impossible.
        """
        g = self.groups_for(cpg)
        if g is None:
            raise ValueError(f"layer {self.name!r}: {cpg} channels per group does not divide "
                             f"{self.channels} input and {self.out_channels} output channels")
        dt = canonical_dtype(dtype)
        return ConvParams(batch=self.batch if batch is None else batch,
                          in_channels=self.channels, out_channels=self.out_channels,
                          in_h=self.height, in_w=self.width, kernel_h=self.kernel,
                          kernel_w=self.kernel, stride=(self.stride, self.stride),
                          padding=(self.padding, self.padding), groups=g, dtype=dt,
                          partials=partials_dtype(partials, dt))

    def describe(self) -> str:
        """e.g. ``resnext50_c128: 128->128 56x56 k3x3 s1 p1``."""
        return (f"{self.name}: {self.channels}->{self.out_channels} {self.height}x{self.width} "
                f"k{self.kernel}x{self.kernel} s{self.stride} p{self.padding}")


DEFAULT_LAYERS: tuple[ConvLayer, ...] = (
    ConvLayer("resnext50_c128", channels=128, height=56, width=56, kernel=3,
              note="ResNeXt-50 32x4d conv2 stage grouped 3x3 (32 groups, cpg 4 in the network)"),
    ConvLayer("resnext50_c256", channels=256, height=28, width=28, kernel=3,
              note="ResNeXt-50 32x4d conv3 stage grouped 3x3 (32 groups, cpg 8 in the network)"),
    ConvLayer("effnet_b0_dw3", channels=144, height=56, width=56, kernel=3,
              note="EfficientNet-B0 stage 2 MBConv6 depthwise 3x3 (24x6 channels, cpg 1 in the "
                   "network); 144 has no divisor 32 or 64"),
    ConvLayer("effnet_b0_dw5", channels=240, height=28, width=28, kernel=5,
              note="EfficientNet-B0 stage 3 MBConv6 depthwise 5x5 (40x6 channels, cpg 1 in the "
                   "network); 240 has no divisor 32 or 64"),
    ConvLayer("mobilenet_v1_dw_s2", channels=64, height=112, width=112, kernel=3, stride=2,
              note="MobileNetV1 conv_dw_2: strided depthwise 3x3, 112x112 -> 56x56 (cpg 1)"),
)


def get_layer(name: str) -> ConvLayer:
    """A default layer by name (case-insensitive)."""
    for layer in DEFAULT_LAYERS:
        if layer.name.lower() == name.lower():
            return layer
    raise ValueError(f"unknown layer {name!r}; default layers are "
                     f"{[layer.name for layer in DEFAULT_LAYERS]}")


# =========================================================================== rows
@dataclass(frozen=True)
class SweepRow:
    """One (layer, batch, channels-per-group, device) point of a sweep.

    Fields common to both kinds describe the layer and the achieved rate; IPU-only fields
    (``cycles`` ... ``exchange_tbps``) are None on GPU rows and GPU-only fields (``gpu_*``)
    are None on IPU rows. ``ratios`` maps each counterpart device to IPU TFLOP/s / GPU
    TFLOP/s for this point.
    """

    layer: str
    batch: int
    channels_per_group: int
    groups: int
    dense: bool
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel: int
    stride: int
    padding: int
    dtype: str
    partials: str
    macs: int
    flops: int
    device: str
    kind: str                      # "ipu" or "gpu"
    seconds: float
    tflops: float
    peak_tflops: float
    utilisation: float
    # ---- IPU only
    cycles: int | None = None
    clock_ghz: float | None = None
    method: str | None = None
    vertex_method: str | None = None
    tiles_used: int | None = None
    serial_splits: int | None = None
    max_bytes_per_tile: int | None = None
    mean_bytes_per_tile: float | None = None
    tile_bytes: int | None = None
    exchange_share: float | None = None
    exchange_tbps: float | None = None
    # ---- GPU only
    gpu_bound: str | None = None
    gpu_curve: str | None = None
    gpu_e_compute: float | None = None
    gpu_e_memory: float | None = None
    # ---- both: IPU/GPU ratio against each counterpart device, and the primary one
    ipu_gpu_ratio: float | None = None
    ratios: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[str, int, int]:
        """The point this row belongs to: (layer, batch, channels_per_group)."""
        return (self.layer, self.batch, self.channels_per_group)

    def to_dict(self) -> dict[str, Any]:
        """Flat dict: the fields, with ``ratios`` spread into ``ratio_vs_<device>`` keys."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "ratios"}
        for other, r in self.ratios.items():
            d[f"ratio_vs_{other}"] = r
        return d


_FIELDS = [f.name for f in dataclasses.fields(SweepRow) if f.name != "ratios"]


class SweepResult(list):
    """The rows of a sweep (a list of :class:`SweepRow`) plus what was skipped and how.

    Attributes
    ----------
    skipped : list of dict
        ``{"layer", "channels_per_group", "reason"}`` for each requested cpg value that does
        not divide a layer's channels.
    meta : dict
        Settings of the sweep (dtype, devices, exchange bandwidths, GPU curve), the host
        time and what ran the points (``"executor"``, e.g. ``"serial"``).
    """

    def __init__(self, rows: Iterable[SweepRow] = (), *, skipped: list | None = None,
                 meta: dict | None = None):
        super().__init__(rows)
        self.skipped: list[dict[str, Any]] = list(skipped or [])
        self.meta: dict[str, Any] = dict(meta or {})

    def ipu(self) -> list[SweepRow]:
        return [r for r in self if r.kind == "ipu"]

    def gpu(self) -> list[SweepRow]:
        return [r for r in self if r.kind == "gpu"]

    def ratio(self, layer: str, batch: int, cpg: int | str, machine: str | None = None,
              gpu: str | None = None) -> float:
        """IPU/GPU TFLOP/s ratio at one point (first machine / first GPU by default)."""
        for r in self.ipu():
            c = r.in_channels if cpg == "dense" else cpg
            if (r.layer, r.batch, r.channels_per_group) == (layer, batch, c) \
                    and (machine is None or r.device == machine):
                if gpu is None:
                    return r.ipu_gpu_ratio
                return r.ratios[gpu]
        raise KeyError(f"no IPU row for layer {layer!r}, batch {batch}, cpg {cpg}"
                       + (f", machine {machine!r}" if machine else ""))

    def to_dicts(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self]

    def format_table(self, **kw: Any) -> str:
        return format_table(self, **kw)

    def to_csv(self, path: str | Path | None = None) -> str:
        return to_csv(self, path)

    def to_json(self, path: str | Path | None = None, **kw: Any) -> str:
        return to_json(self, path, **kw)

    def to_pandas(self) -> Any:
        """One row per sweep point (the columns of :meth:`to_dicts`). Needs pandas."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("SweepResult.to_pandas needs pandas: pip install pandas") from e
        return pd.DataFrame(self.to_dicts())


# =========================================================================== sweep
def _as_list(x: Any) -> list:
    if x is None:
        return []
    if isinstance(x, (str, bytes, ConvLayer, MachineSpec, GPUSpec, int)):
        return [x]
    return list(x)


def _resolve_cpg(values: Sequence[int | str], layer: ConvLayer) -> tuple[list[tuple[int, bool]], list[dict]]:
    """(cpg, is_dense) pairs valid for ``layer``, ascending and de-duplicated, plus skips."""
    keep: dict[int, bool] = {}
    skipped = []
    for v in values:
        if isinstance(v, str):
            if v.strip().lower() != "dense":
                raise ValueError(f"channels_per_group values are ints or 'dense', got {v!r}")
            c = layer.channels
        elif isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"channels_per_group values are ints or 'dense', got {v!r}")
        else:
            c = v
        if c < 1:
            raise ValueError(f"channels per group must be >= 1, got {c}")
        if layer.groups_for(c) is None:
            why = (f"{c} does not divide {layer.channels} input channels" if layer.channels % c
                   else f"{layer.channels // c} groups do not divide {layer.out_channels} "
                        "output channels")
            skipped.append({"layer": layer.name, "channels_per_group": c, "reason": why})
            continue
        keep[c] = c == layer.channels
    return sorted(keep.items()), skipped


def _ipu_row(common: dict, params: ConvParams, machine: MachineSpec, bias: bool) -> SweepRow:
    prof = estimate_conv2d(params.input_shape, params.weight_shape, dtype=params.dtype,
                           stride=params.stride, padding=params.padding,
                           dilation=params.dilation, groups=params.groups, machine=machine,
                           partials=params.partials, bias=bias)
    mem = prof.memory
    total = prof.total_cycles
    return SweepRow(
        **common, device=machine.name, kind="ipu", seconds=prof.seconds, tflops=prof.tflops,
        peak_tflops=prof.peak_flops / 1e12, utilisation=prof.utilisation,
        cycles=total, clock_ghz=machine.clock_hz / 1e9, method=prof.info.get("method"),
        vertex_method=prof.info.get("vertex_method"), tiles_used=prof.info.get("tiles_used"),
        serial_splits=prof.info.get("serial_splits"),
        max_bytes_per_tile=mem.max_bytes if mem is not None else None,
        mean_bytes_per_tile=mem.mean_bytes if mem is not None else None,
        tile_bytes=machine.tile_bytes,
        exchange_share=prof.exchange_cycles / total if total else 0.0,
        exchange_tbps=machine.exchange_bandwidth / 1e12)


def _gpu_row(common: dict, params: ConvParams, gpu: GPUSpec, curve: Any) -> SweepRow:
    est = estimate_conv(params, gpu, efficiency=curve)
    return SweepRow(
        **common, device=gpu.name, kind="gpu", seconds=est.seconds, tflops=est.tflops,
        peak_tflops=est.peak_flops / 1e12, utilisation=est.utilisation, gpu_bound=est.bound,
        gpu_curve=est.curve, gpu_e_compute=est.e_compute, gpu_e_memory=est.e_memory)


def _sweep_point(job: tuple, *, dt: str, pt: str, ms: list, gs: list, curve: Any,
                 bias: bool) -> list[SweepRow]:
    """Rows of one (layer, batch, cpg) point: every machine, then every GPU (module level so
    a process pool can pickle it)."""
    lay, b, c, dense = job
    params = lay.params(c, batch=b, dtype=dt, partials=pt)
    common = dict(layer=lay.name, batch=b, channels_per_group=c, groups=params.groups,
                  dense=dense, in_channels=lay.channels, out_channels=lay.out_channels,
                  height=lay.height, width=lay.width, kernel=lay.kernel, stride=lay.stride,
                  padding=lay.padding, dtype=dt, partials=pt, macs=params.macs,
                  flops=params.flops)
    ipu = [_ipu_row(common, params, m, bias) for m in ms]
    gpu = [_gpu_row(common, params, g, curve) for g in gs]
    rows = []
    for r in ipu:
        rat = {g.device: r.tflops / g.tflops for g in gpu}
        rows.append(dataclasses.replace(r, ratios=rat, ipu_gpu_ratio=next(iter(rat.values()), None)))
    for g in gpu:
        rat = {r.device: r.tflops / g.tflops for r in ipu}
        rows.append(dataclasses.replace(g, ratios=rat, ipu_gpu_ratio=next(iter(rat.values()), None)))
    return rows


def grouped_conv_sweep(layer: ConvLayer | Sequence[ConvLayer] | str | None = None, *,
                       channels_per_group: Sequence[int | str] = DEFAULT_CPG,
                       machines: Sequence[MachineSpec | str] | MachineSpec | str = (GC200,),
                       gpus: Sequence[GPUSpec | str] | GPUSpec | str = (A100_40GB,),
                       dtype: Any = "float16", batch: int | Sequence[int] | None = DEFAULT_BATCH,
                       partials: Any = "float", gpu_efficiency: Any = "cudnn",
                       bias: bool = False,
                       progress: Callable[[int, int, str], None] | None = None,
                       executor: Any = "auto") -> SweepResult:
    """Throughput of grouped convolutions vs channels per group, IPU machines and GPUs.

    Parameters
    ----------
    layer : ConvLayer, default-layer name, or a sequence of them; default :data:`DEFAULT_LAYERS`
    channels_per_group : sequence of int or "dense"
        Input channels per group; values that do not divide a layer's channels are skipped
        (listed in ``result.skipped``). Default ``(1, 2, 4, 8, 16, 32, 64, "dense")``.
    machines : MachineSpec(s) or preset name(s)
        Simulated IPUs; default GC200 with the 47.5 TB/s default exchange (use
        :func:`with_exchange_bandwidth` for the 8 TB/s datasheet figure).
    gpus : GPUSpec(s) or preset name(s); default A100 40 GB.
    dtype : {"float16", "float32"}
    batch : int, sequence of int, or None
        Batch sizes; None uses each layer's own ``batch``. Default (1, 32).
    partials : {"float", "half"}
        IPU accumulation dtype; it sets the IPU peak used for utilisation (GC200 fp16->fp32
        125 TFLOP/s, fp16->fp16 250). The GPU always accumulates fp16 in fp32 at full rate.
    gpu_efficiency : "cudnn", "optimized", or an EfficiencyCurve
        Which GPU software the GPU rows stand for (see :mod:`ipukern.gpu`).
    bias : bool
        Include a bias add in the IPU program.
    progress : callable(done, total, label), optional
        Called after each (layer, batch, cpg) point.
    executor : "auto" (default), None, "process" or a concurrent.futures.Executor
        Where the points run: ``"auto"`` runs them here and moves the rest to a process
        pool once they are expected to take long enough for it to pay (a few seconds of
        points; see :mod:`ipukern._pool`); None serially; ``"process"`` a process pool for
        the call; or your executor (a thread pool, a Dask ``Client.get_executor()``, an MPI
        pool...). Rows, their order and every number are identical to a serial run; only
        ``meta["host_seconds"]`` and ``meta["executor"]`` (what ran the points) differ.

    Returns
    -------
    SweepResult
        A list of :class:`SweepRow`, ordered by layer, batch, cpg (ascending), then
        machines, then GPUs; ``.skipped`` and ``.meta`` as documented there.

    Raises
    ------
    ValueError, TypeError
        Bad layer, cpg, batch, dtype, device names, or two devices with the same name.
    TileMemoryError
        A point does not fit the tiles even with serial splits.
    """
    t0 = time.perf_counter()
    layers = [get_layer(x) if isinstance(x, str) else x
              for x in (_as_list(layer) if layer is not None else DEFAULT_LAYERS)]
    if not layers:
        raise ValueError("no layers to sweep")
    for x in layers:
        if not isinstance(x, ConvLayer):
            raise TypeError(f"layers must be ConvLayer or default-layer names, got {type(x).__name__}")
    ms = [get_machine(m) for m in _as_list(machines)]
    gs = [get_gpu(g) for g in _as_list(gpus)]
    if not ms and not gs:
        raise ValueError("no devices: give at least one machine or GPU")
    names = [m.name for m in ms] + [g.name for g in gs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"device names must be unique, {dup} appear twice; give variants a "
                         "name, e.g. GC200.replace(..., name='GC200-slow')")
    curve = get_efficiency_curve(gpu_efficiency)
    dt = canonical_dtype(dtype)
    pt = partials_dtype(partials, dt)
    batches = _as_list(batch) if batch is not None else [None]
    for b in batches:
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise ValueError(f"batch sizes must be ints >= 1, got {b!r}")
    cpg_values = list(channels_per_group)
    if not cpg_values:
        raise ValueError("channels_per_group is empty")

    plan = []
    skipped: list[dict] = []
    for lay in layers:
        cpgs, sk = _resolve_cpg(cpg_values, lay)
        skipped += sk
        for b in batches:
            for c, dense in cpgs:
                plan.append((lay, lay.batch if b is None else b, c, dense))

    point = functools.partial(_sweep_point, dt=dt, pt=pt, ms=ms, gs=gs, curve=curve, bias=bias)
    per_point, how = run_points(point, plan, executor, progress=progress,
                                label=lambda job: f"{job[0].name} N{job[1]} cpg {job[2]}")
    rows: list[SweepRow] = [r for point_rows in per_point for r in point_rows]

    meta = {
        "dtype": dt, "partials": pt, "bias": bias,
        "channels_per_group": list(cpg_values),
        "batch": [b for b in batches],
        "layers": [dict(dataclasses.asdict(x)) for x in layers],
        "machines": [{"name": m.name, "n_tiles": m.n_tiles, "clock_ghz": m.clock_hz / 1e9,
                      "tile_bytes": m.tile_bytes,
                      "peak_tflops": m.peak_flops(dt, pt) / 1e12,
                      "exchange_tbps": m.exchange_bandwidth / 1e12} for m in ms],
        "gpus": [{"name": g.name, "peak_tflops": g.peak_flops(dt) / 1e12,
                  "hbm_gbps": g.hbm_bandwidth / 1e9} for g in gs],
        "gpu_curve": curve.name, "gpu_baseline": curve.baseline,
        "ratio": "IPU TFLOP/s / GPU TFLOP/s at the same (layer, batch, cpg)",
        "host_seconds": time.perf_counter() - t0,
        "executor": how,
    }
    return SweepResult(rows, skipped=skipped, meta=meta)


# =========================================================================== outputs
def _columns(rows: Sequence[SweepRow]) -> list[str]:
    extra: list[str] = []
    for r in rows:
        for other in r.ratios:
            k = f"ratio_vs_{other}"
            if k not in extra:
                extra.append(k)
    return _FIELDS + extra


def to_csv(rows: Sequence[SweepRow], path: str | Path | None = None) -> str:
    """Rows as CSV text (one line per row, ``ratio_vs_<device>`` columns at the end);
    written to ``path`` when given. Empty cells are fields that do not apply."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_columns(rows), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.to_dict().items()})
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text)
    return text


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Read a sweep CSV back: numbers as int/float, empty cells as None, bools as bool."""
    out = []
    with open(path, newline="") as f:
        for rec in csv.DictReader(f):
            out.append({k: _parse_cell(v) for k, v in rec.items()})
    return out


def _parse_cell(v: str) -> Any:
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def to_json(rows: Sequence[SweepRow], path: str | Path | None = None, *,
            indent: int | None = 1) -> str:
    """``{"meta": ..., "skipped": [...], "rows": [flat row dicts]}`` as JSON text; written
    to ``path`` when given."""
    from ._version import __version__, schema
    doc = {**schema("sweep"), "meta": getattr(rows, "meta", {}), "skipped": getattr(rows, "skipped", []),
           "rows": [r.to_dict() for r in rows]}
    doc["meta"] = dict(doc["meta"], ipukern_version=__version__)
    text = json.dumps(doc, indent=indent, default=_json_default)
    if path is not None:
        Path(path).write_text(text)
    return text


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):          # NumPy scalars
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _short_method(label: str | None) -> str:
    """``AMP 8u 16x8 half->float`` -> ``AMP 8u 16x8`` (the dtype pair is in the table's
    footer); ``AMP 8u 8x8 float->float F8`` -> ``AMP 8u 8x8 F8``."""
    if not label:
        return "-"
    return " ".join(t for t in label.split() if "->" not in t)


def _fmt_tf(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _sweep_cells(by_dev: dict[str, SweepRow], ipu_names: list[str], gpu_names: list[str],
                 pairs: list[tuple[str, str]], show_method: bool) -> list[str]:
    """One (layer, batch, cpg) line of :func:`format_table`."""
    any_row = next(iter(by_dev.values()))
    cpg = f"{any_row.channels_per_group}" + ("*" if any_row.dense else "")
    line = [any_row.layer, str(any_row.batch), cpg, str(any_row.groups), f"{any_row.flops / 1e9:.3g}"]
    for m in ipu_names:
        r = by_dev.get(m)
        if r is None:
            line += [MISSING, MISSING] + ([MISSING] if show_method else [])
            continue
        line += [_fmt_tf(r.tflops), f"{100 * r.utilisation:.0f}%"]
        if show_method:
            line.append(_short_method(r.method))
    for g in gpu_names:
        r = by_dev.get(g)
        line += [MISSING, MISSING] if r is None else [_fmt_tf(r.tflops), r.gpu_bound or MISSING]
    for m, g in pairs:
        r = by_dev.get(m)
        v = r.ratios.get(g) if r is not None else None
        line.append(MISSING if v is None else f"{v:.2f}x")
    return line


def format_table(rows: Sequence[SweepRow], *, show_method: bool = True) -> str:
    """Aligned text table, one line per (layer, batch, cpg).

    Columns: layer, batch, cpg, groups, GFLOP; per IPU machine its TFLOP/s, utilisation and
    (optionally) vertex method; per GPU its TFLOP/s and binding term; then one IPU/GPU
    ratio column per (machine, GPU) pair.
    """
    ipu_names: list[str] = []
    gpu_names: list[str] = []
    points: dict[tuple, dict[str, SweepRow]] = {}
    for r in rows:
        names = ipu_names if r.kind == "ipu" else gpu_names
        if r.device not in names:
            names.append(r.device)
        points.setdefault(r.key, {})[r.device] = r
    header = ["layer", "N", "cpg", "groups", "GFLOP"]
    align = "lrrrr"
    for m in ipu_names:
        header += [f"{m} TF/s", "util"] + (["method"] if show_method else [])
        align += "rr" + ("l" if show_method else "")
    for g in gpu_names:
        header += [f"{g} TF/s", "bound"]
        align += "rl"
    pairs = [(m, g) for m in ipu_names for g in gpu_names]
    for m, g in pairs:
        header.append("IPU/GPU" if len(pairs) == 1 else f"{m}/{g}")
        align += "r"
    body = [_sweep_cells(by_dev, ipu_names, gpu_names, pairs, show_method) for by_dev in points.values()]
    lines = format_text_table(header, body, align=align, rule=True).split("\n")
    out = lines[:2]
    for prev, b, text in zip([None] + body, body, lines[2:]):
        if prev is not None and b[0] != prev[0]:
            out.append("")                       # a blank line between layers
        out.append(text)
    dtype = rows[0].dtype if rows else "?"
    partials = rows[0].partials if rows else "?"
    out.append("")
    out.append(f"cpg = input channels per group (* = dense, groups 1); {dtype} inputs, IPU "
               f"partials {partials}; util = achieved / the device's own peak; "
               "IPU/GPU = IPU TFLOP/s / GPU TFLOP/s.")
    return "\n".join(out)


# =========================================================================== layer lists
LAYER_COLUMNS = ("name", "channels", "height", "width", "kernel", "stride", "padding",
                 "out_channels", "batch", "note")
_REQUIRED = ("name", "channels", "height", "width")


def read_layers(path: str | Path) -> list:
    """Read a layer list (CSV with a header; format in :mod:`ipukern.scaling`).

    Returns
    -------
    list of ConvLayer

    Raises
    ------
    ValueError
        Missing or unknown columns, a non-integer value, a duplicate name, an impossible
        layer, or an empty list; the message names the file and the line.
    """
    path = Path(path)
    text = read_input_text(path, "layer list")
    reader = csv.reader(io.StringIO(text))
    try:
        rows = [r for r in reader if r and not r[0].lstrip().startswith("#")]
    except csv.Error as e:     # e.g. a field over csv's 128 KiB limit, a NUL byte
        raise ValueError(f"layer list {path}: line {reader.line_num}: not a CSV file ({e})") from None
    if not rows:
        raise ValueError(f"layer list {path}: empty (expected a header row and one layer per row)")
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in _REQUIRED if c not in header]
    unknown = [c for c in header if c not in LAYER_COLUMNS]
    if missing or unknown:
        raise ValueError(f"layer list {path}: " + "; ".join(
            ([f"missing column(s) {', '.join(missing)}"] if missing else [])
            + ([f"unknown column(s) {', '.join(unknown)}"] if unknown else []))
            + f" (columns: {', '.join(LAYER_COLUMNS)}; the first row is the header)")
    layers, seen = [], set()
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) > len(header):
            raise ValueError(f"layer list {path} line {lineno}: {len(row)} values for "
                             f"{len(header)} columns")
        kw: dict[str, Any] = {}
        for col, val in zip(header, row):
            val = val.strip()
            if val == "":
                continue
            if col in ("name", "note"):
                kw[col] = val
                continue
            try:
                kw[col] = int(val)
            except ValueError:
                raise ValueError(f"layer list {path} line {lineno}: {col} must be an integer, "
                                 f"got {val!r}") from None
        if "name" not in kw:
            raise ValueError(f"layer list {path} line {lineno}: no name")
        if kw["name"] in seen:
            raise ValueError(f"layer list {path} line {lineno}: duplicate layer name {kw['name']!r}")
        seen.add(kw["name"])
        try:
            layers.append(ConvLayer(**kw))
        except (TypeError, ValueError) as e:
            raise ValueError(f"layer list {path} line {lineno}: {e}") from None
    if not layers:
        raise ValueError(f"layer list {path}: no layers after the header")
    return layers


def write_layers(layers: Iterable[Any], path: str | Path | None = None) -> str:
    """Write layers as a layer list (all columns); :func:`read_layers` reads it back."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LAYER_COLUMNS)
    for layer in layers:
        w.writerow([getattr(layer, c) for c in LAYER_COLUMNS])
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
