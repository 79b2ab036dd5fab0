"""The simulated BSP machine: tile memory, tensors, programs, the engine, cost and profiles.

Nothing here knows about convolutions; the conv pipeline and user graphs build on it (a
codelet's wing plugs into the host's fused path through
:class:`~ipukern.core.host.fused.FusableCodelet`). The model (what the IPU does and costs):

- ``memory``: tile memory, allocations and the host arena; ``tensor``: tensors over tiles;
- ``copies``: the copy table every exchange, rearrangement and host transfer runs;
- ``program``: Exchange, ComputeSet, Superstep, Program (data, validated, costed);
- ``cost`` and ``vertices``: cycle formulas and the popops-like vertices;
- ``engine``: the Device that validates, runs and estimates programs;
- ``profile``, ``views``, ``collectives``: what a program cost, and views of it.

How the host runs a program fast (same bytes, same cycles) is in :mod:`.host`.
This face names what the layers above use.
"""
from .copies import CopyTable, copy_runs
from .engine import Device, get_num_threads, run_program, set_num_threads
from .memory import Arena, MemoryReport, TileMemory, TileMemoryError
from .profile import Profile, SuperstepRecord
from .program import Codelet, ComputeSet, Exchange, ExchangeError, Program, Superstep, VertexBatch
from .tensor import TileMapping, TileTensor, expand, split_bounds
from .threads import MAX_THREADS, check_num_threads
from .views import DeltaSection, TraceEvents, delta, diff_keyed, format_delta_sections

__all__ = ["CopyTable", "copy_runs", "Device", "run_program", "get_num_threads", "set_num_threads",
           "MAX_THREADS", "check_num_threads", "Arena", "MemoryReport", "TileMemory", "TileMemoryError",
           "Profile", "SuperstepRecord", "Codelet", "ComputeSet", "Exchange", "ExchangeError",
           "Program", "Superstep", "VertexBatch", "TileMapping", "TileTensor", "expand",
           "split_bounds", "DeltaSection", "TraceEvents", "delta", "diff_keyed", "format_delta_sections"]
