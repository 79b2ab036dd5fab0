"""Compiled kernels (Cython). Inputs are validated by the Python layer before any call.

Callers import these modules inside the functions that run a kernel, not at module level:
the package then imports (and estimate mode, the planners and the docs work) in a checkout
whose extensions are not built; only executing a program needs them. The planner's
compiled loops (``_plan``) are optional too: :func:`plan_kernels` is None without them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from types import ModuleType

import numpy as np

#: the conv planner's compiled loops (``_plan``) in use; tests turn this off to compare
#: them with the NumPy code they replace, which runs when the extensions are not built
USE_PLAN_KERNELS = True


def plan_kernels() -> ModuleType | None:
    """``ipukern._kernels._plan``, or None when ``USE_PLAN_KERNELS`` is off or the
    extensions are not built (then the planner scores candidates in NumPy, same results)."""
    return _load_plan() if USE_PLAN_KERNELS else None


@lru_cache(maxsize=1)
def _load_plan() -> ModuleType | None:
    # looked up once: a failing import searches the path at every call
    try:
        from . import _plan
    except ImportError:
        return None
    return _plan


def loop_columns(table: Mapping[str, np.ndarray], ints: Iterable[str],
                 flags: Iterable[str] = ()) -> tuple[np.ndarray, ...]:
    """Columns of a planner table as the compiled loops read them, in the order named:
    ``ints`` as contiguous int64, then ``flags`` (booleans) as contiguous uint8."""
    return (tuple(np.ascontiguousarray(table[k], dtype=np.int64) for k in ints)
            + tuple(np.ascontiguousarray(table[k], dtype=np.bool_).view(np.uint8) for k in flags))
