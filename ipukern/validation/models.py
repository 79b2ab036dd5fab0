"""How each kind of measurement is run through the model.

Every function takes the row's parameters and a machine and returns the model's value in the
row's unit. The functions use only the public estimators (``estimate_matmul``,
``estimate_conv2d``) and the vertex costs of :mod:`ipukern.core.cost`, so the validation
sees exactly what a user of the library sees.
"""
from __future__ import annotations

from collections.abc import Callable

from ..core.cost import elementwise_cycles
from ..dtypes import DTYPES, canonical_dtype
from ..machine import MachineSpec

__all__ = ["MODELLERS", "parse_params"]


def parse_params(text: str) -> dict[str, str]:
    """``"m=1024;k=64;dtype=float16"`` -> ``{"m": "1024", ...}`` (empty text -> {})."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad parameter {item!r} (expected key=value)")
        out[key.strip()] = value.strip()
    return out


def _int(p: dict[str, str], key: str) -> int:
    try:
        v = int(p[key])
    except KeyError:
        raise ValueError(f"missing parameter {key!r}") from None
    except ValueError:
        raise ValueError(f"parameter {key}={p[key]!r} is not an integer") from None
    if v <= 0:
        raise ValueError(f"parameter {key} must be positive, got {v}")
    return v


def matmul_tflops(p: dict[str, str], machine: MachineSpec) -> tuple[float, str]:
    """C[m,n] = A[m,k] @ B[k,n] through :func:`ipukern.estimate_matmul`: TFLOP/s (2mkn)."""
    from ..ops import estimate_matmul
    m, k, n = _int(p, "m"), _int(p, "k"), _int(p, "n")
    prof = estimate_matmul((m, k), (k, n), dtype=p.get("dtype", "float16"), machine=machine,
                           partials=p.get("partials", "float32"))
    return prof.tflops, str(prof.info.get("method", ""))


def stream_triad_gbs(p: dict[str, str], machine: MachineSpec) -> tuple[float, str]:
    """STREAM Triad ``a = b + s*c`` on every tile as PopLibs' element-wise vertex (two input
    streams, the store dual-issued) plus one BSP sync: GB/s over the three arrays."""
    dtype = canonical_dtype(p.get("dtype", "float32"))
    n = _int(p, "elems_per_tile")
    tiles = _int(p, "tiles") if "tiles" in p else machine.n_tiles
    if tiles > machine.n_tiles:
        raise ValueError(f"tiles={tiles} exceeds the machine's {machine.n_tiles}")
    cycles = elementwise_cycles(machine, n, dtype, n_inputs=2) + machine.sync_cycles
    nbytes = 3 * n * DTYPES[dtype].itemsize * tiles
    return nbytes / (cycles / machine.clock_hz) / 1e9, "element-wise vertex + sync"


def conv_vertex_cycles(p: dict[str, str], machine: MachineSpec) -> tuple[float, str]:
    """One conv (square output ``out``, ``kernel`` x ``kernel``, batch 1) on a one-tile
    machine: the cycles of its compute-category supersteps (the vertex estimate, zeroing
    included), which is what PopLibs' vertex estimator predicts."""
    from ..ops import estimate_conv2d
    out, k = _int(p, "out"), _int(p, "kernel")
    cin, cout = _int(p, "cin"), _int(p, "cout")
    one_tile = machine.replace(n_tiles=1, name=machine.name + "-1tile")
    size = out + k - 1
    prof = estimate_conv2d((1, cin, size, size), (cout, cin, k, k), dtype=p.get("dtype", "float16"),
                           partials=p.get("partials", "float32"), machine=one_tile)
    cycles = sum(s.compute_cycles for s in prof.supersteps if s.category == "compute")
    return float(cycles), str(prof.info.get("method", ""))


#: kind -> modeller(params, machine) -> (value in the row's unit, how the model did it)
MODELLERS: dict[str, Callable[[dict[str, str], MachineSpec], tuple[float, str]]] = {
    "matmul": matmul_tflops,
    "stream_triad": stream_triad_gbs,
    "conv_vertex": conv_vertex_cycles,
}
