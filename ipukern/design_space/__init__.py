"""Design-space exploration: networks x machine / system variants x settings.

:func:`explore` builds the variants from ranges of constants (:mod:`.variants`), one point
per network, variant and setting combination (:mod:`.points`), runs them on Dask
distributed, a process pool or here (:mod:`.engines`), streams each record to a JSON-lines
file so an interrupted sweep resumes (:mod:`.store`), and returns an :class:`ExploreResult`:
the table (CSV, Parquet, pandas), Pareto fronts and plots (:mod:`.pareto`) and each
network's sensitivity to each constant (:mod:`.sensitivity`).
"""
from .api import ExploreResult, explore
from .engines import SCHEDULERS, dask_available
from .pareto import DEFAULT_COSTS, pareto_front, plot_pareto
from .sensitivity import Sensitivity, sensitivity
from .variants import (MACHINE_CONSTANTS, SYSTEM_CONSTANTS, Variant, machine_variants, one_at_a_time,
                       system_variants)

__all__ = ["explore", "ExploreResult", "SCHEDULERS", "dask_available", "DEFAULT_COSTS", "pareto_front",
           "plot_pareto", "Sensitivity", "sensitivity", "MACHINE_CONSTANTS", "SYSTEM_CONSTANTS", "Variant",
           "machine_variants", "one_at_a_time", "system_variants"]
