"""ipukern: a Graphcore-IPU-class tile machine simulated on a CPU.

Runs grouped convolutions and matmuls tile by tile in Bulk-Synchronous-Parallel supersteps,
returns exact results and a cycle profile of what the real chip would take.
"""
from .dtypes import canonical_dtype
from .machine import BOW, GC2, GC200, PRESETS, MachineSpec, get_machine

__version__ = "0.1.0"

__all__ = ["MachineSpec", "GC2", "GC200", "BOW", "PRESETS", "get_machine", "canonical_dtype"]
