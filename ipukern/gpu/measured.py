"""NeuSight's measured single-kernel GPU latencies, as kernel launches the model can price.

The rows (``ipukern/gpu/data/neusight/kernels.csv``, provenance in that folder's README) are
FP32, TF32 off, timed with CUDA events around one eager PyTorch call. The events bracket the
host's dispatch of the op as well as the kernel, so a measured latency is modelled as::

    measured = eager_host_s + kernel time

with ``eager_host_s`` one fitted constant (:data:`ipukern.gpu.calibration.EAGER_HOST_S`), the
same that prices an op of the ``"pytorch-eager"`` stack.

Shapes follow NeuSight's conventions (README, "Shape conventions"): ``linear`` is
``nn.Linear(N, K)`` on ``(B, M, N)``; ``bmm`` is ``(B, M, N) @ (B, N, K)``; the vector ops act
on a ``(B, H)`` tensor; ``conv`` is ``nn.Conv2d(Cin, Cout, k, stride, pad)`` on ``(B, Cin, H, H)``.
"""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

from .calibration import EAGER_HOST_S, GemmCalibration, MemoryCalibration
from .kernels import KernelCall, conv_kernels, kernel_seconds
from .specs import GPUSpec, get_gpu

__all__ = ["MeasuredKernel", "load_measured_kernels", "predict_seconds", "OP_CLASSES"]

# NeuSight op -> (memory-kernel class, bytes moved per element of the (B, H) tensor)
_VECTOR = {
    "add": ("elementwise", 12), "mul": ("elementwise", 12), "div": ("elementwise", 12),
    "pow": ("elementwise", 12),
    "addu": ("elementwise", 8), "mulu": ("elementwise", 8), "divu": ("elementwise", 8),
    "powu": ("elementwise", 8), "relu": ("elementwise", 8), "gelu": ("elementwise", 8),
    "tanh": ("elementwise", 8),
    "ln": ("norm", 8), "softmax": ("softmax", 8),
}
#: NeuSight op -> the class the validation report groups it in
OP_CLASSES = {"linear": "linear", "bmm": "bmm", "conv": "conv", "ln": "layernorm",
              "softmax": "softmax", **{k: "elementwise" for k, (c, _) in _VECTOR.items()
                                       if c == "elementwise"}}


@dataclass(frozen=True)
class MeasuredKernel:
    """One measured row: the GPU, its split, the op and what it launches."""

    gpu: GPUSpec
    gpu_name: str          # NeuSight's device name
    split: str             # "train" or "test"
    op: str
    shape: str             # NeuSight's dimensions, for reports
    seconds: float         # measured
    calls: tuple[KernelCall, ...] | None   # None for conv: its algorithm is chosen when priced
    conv: object = None    # ConvParams for conv rows

    @property
    def op_class(self) -> str:
        return OP_CLASSES[self.op]


def _row(r: dict) -> MeasuredKernel:
    op = r["op"]
    gpu = get_gpu(r["gpu"])
    secs = float(r["latency_ms"]) * 1e-3

    def i(name: str) -> int:
        return int(r[name])

    if op == "linear":
        b, m, n, k = i("B"), i("M"), i("N"), i("K")
        calls = (KernelCall("gemm", "linear", m=b * m, n=k, k=n),)
        shape = f"B{b} M{m} N{n} K{k}"
        return MeasuredKernel(gpu, r["gpu"], r["split"], op, shape, secs, calls)
    if op == "bmm":
        b, m, n, k = i("B"), i("M"), i("N"), i("K")
        calls = (KernelCall("gemm", "bmm", m=m, n=k, k=n, batch=b),)
        return MeasuredKernel(gpu, r["gpu"], r["split"], op, f"B{b} M{m} N{n} K{k}", secs, calls)
    if op == "conv":
        from ..conv import ConvParams
        p = ConvParams(batch=i("B"), in_channels=i("Cin"), out_channels=i("Cout"), in_h=i("H"),
                       in_w=i("H"), kernel_h=i("kernel"), kernel_w=i("kernel"),
                       stride=(i("stride"),) * 2, padding=(i("pad"),) * 2)
        shape = f"B{i('B')} Cin{i('Cin')} Cout{i('Cout')} k{i('kernel')} H{i('H')} s{i('stride')}"
        return MeasuredKernel(gpu, r["gpu"], r["split"], op, shape, secs, None, p)
    kind, per = _VECTOR[op]
    b, h = i("B"), i("H")
    calls = (KernelCall(kind, op, nbytes=b * h * per),)
    return MeasuredKernel(gpu, r["gpu"], r["split"], op, f"B{b} H{h}", secs, calls)


@functools.lru_cache(maxsize=1)
def load_measured_kernels() -> tuple[MeasuredKernel, ...]:
    """Every row of ``kernels.csv`` (file order)."""
    ref = resources.files("ipukern.gpu").joinpath("data/neusight/kernels.csv")
    with ref.open("r", encoding="utf-8", newline="") as f:
        return tuple(_row(r) for r in csv.DictReader(f))


def predict_seconds(row: MeasuredKernel, *, gemm_calibration: GemmCalibration | None = None,
                    memory_calibration: MemoryCalibration | None = None,
                    eager_host_s: float = EAGER_HOST_S) -> float:
    """The model's figure for one measured row (same timing scope as the measurement)."""
    calls = row.calls
    kw = dict(gemm_calibration=gemm_calibration, memory_calibration=memory_calibration)
    if calls is None:
        calls = tuple(conv_kernels(row.conv, "forward", row.gpu, "float32", **kw))
    return eager_host_s + sum(kernel_seconds(c, row.gpu, "float32", **kw).seconds for c in calls)
