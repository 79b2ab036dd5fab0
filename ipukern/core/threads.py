"""Host threads used by the compiled kernels: one validated setting for the whole package.

Results and cycles never depend on the thread count, only host speed does. The count is
bounded by :data:`MAX_THREADS` because OpenMP cannot report a failure to start threads: when
it cannot create them (a memory limit, a thread limit) it prints a message and ends the
process, so an absurd request must be refused before any kernel runs.
"""
from __future__ import annotations

import numbers
import os

from .. import _settings

__all__ = ["MAX_THREADS", "check_num_threads", "set_num_threads", "get_num_threads"]

#: Upper bound on host threads: 4 per CPU of this host, at most 256.
MAX_THREADS = min(256, 4 * (os.cpu_count() or 1))

_NUM_THREADS: int | None = None


def check_num_threads(n: object, what: str = "number of threads") -> int:
    """Return ``n`` as an int in ``1..MAX_THREADS``; ValueError/TypeError otherwise."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {n!r}")
    n = int(n)
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"{what} must be in 1..{MAX_THREADS} (4 per CPU of this host, at most "
                         f"256), got {n}")
    return n


def set_num_threads(n: int | None) -> None:
    """Host threads used by the kernels (None: ``IPUKERN_NUM_THREADS`` or all cores).

    Parameters
    ----------
    n : int or None
        1..:data:`MAX_THREADS`. Results do not depend on it; only host speed does.

    Raises
    ------
    TypeError, ValueError
        For a non-integer (bool and float included) or a count outside 1..MAX_THREADS.
    """
    global _NUM_THREADS
    _NUM_THREADS = None if n is None else check_num_threads(n)


def get_num_threads() -> int:
    """Host threads the kernels use now (see :func:`set_num_threads`)."""
    if _NUM_THREADS is not None:
        return _NUM_THREADS
    value = _settings.num_threads()
    if value is not None:
        return check_num_threads(value, "IPUKERN_NUM_THREADS")
    from .._kernels import _exchange
    # OMP_NUM_THREADS may ask for more than is safe: clamp rather than fail
    return max(1, min(_exchange.max_threads(), MAX_THREADS))
