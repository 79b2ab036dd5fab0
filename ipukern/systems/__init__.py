"""Multi-IPU systems: specs and topology, cross-chip BSP, collectives, MPI execution.

Public names are re-exported from :mod:`ipukern`.
"""
from .bsp import (
    LinkExchange,
    SystemDevice,
    SystemProgram,
    SystemSuperstep,
    SystemTensor,
)
from .collectives import (
    CollectiveCost,
    all_gather,
    all_reduce,
    broadcast,
    collective_seconds,
    concurrent,
    concurrent_seconds,
    reduce_scatter,
)
from .config import TrainingConfig
from .views import diff_trainings, format_training_diff, training_schedule, training_trace
from .training import LayerCost, StageMemoryError, TrainingEstimate, estimate_training
from .tune import ChipComparison, TuneCandidate, TuneResult, compare_chips, on_chip, tune
from .train_run import TrainingRun, run_training_step
from .spec import (
    BOW_2000,
    BOW_POD16,
    BOW_POD64,
    IPU_M2000,
    IPU_POD16,
    IPU_POD64,
    SYSTEM_PRESETS,
    Link,
    System,
    SystemConfigError,
    get_system,
)

__all__ = [
    "BOW_2000", "BOW_POD16", "BOW_POD64", "IPU_M2000", "IPU_POD16", "IPU_POD64", "SYSTEM_PRESETS",
    "CollectiveCost", "Link", "LinkExchange", "System", "SystemConfigError", "SystemDevice",
    "SystemProgram", "SystemSuperstep", "SystemTensor", "all_gather", "all_reduce", "broadcast",
    "collective_seconds", "concurrent", "concurrent_seconds", "get_system", "reduce_scatter",
    "LayerCost", "StageMemoryError", "TrainingEstimate", "estimate_training",
    "TrainingRun", "run_training_step", "TrainingConfig", "TuneCandidate", "TuneResult", "tune",
    "compare_chips", "ChipComparison", "on_chip",
    "diff_trainings", "format_training_diff", "training_schedule", "training_trace",
]
