"""Compiled kernels (Cython). Inputs are validated by the Python layer before any call.

Callers import these modules inside the functions that run a kernel, not at module level:
the package then imports (and estimate mode, the planners and the docs work) in a checkout
whose extensions are not built; only executing a program needs them. The planner's
compiled loops (``_plan``) are optional too: :func:`plan_kernels` is None without them.
"""
from __future__ import annotations

from functools import lru_cache
from types import ModuleType

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
