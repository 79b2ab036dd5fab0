"""Every ``IPUKERN_*`` environment variable, in one place.

Each run-time setting is read when it is used (not frozen at import), so a process can change
it between calls; a bad value raises a :class:`ValueError` naming the variable. None of them
changes a simulated cycle or a result bit: they steer host speed, host memory and where files
go. The build-time variables are read by ``setup.py`` (which cannot import the package before
it is built); they are listed here so that :data:`SETTINGS` is the one table of them all.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["SETTINGS", "Setting", "cache_dir", "check_built_programs", "fused_exchange",
           "num_threads", "plan_cache_bytes", "plan_worker", "progress", "silence_progress",
           "describe"]


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, when it is read, its default and what it does."""

    name: str
    when: str          # "run" (read at use) or "build" (read by setup.py)
    default: str
    meaning: str


#: default bound of the conv programs' host arena bytes
DEFAULT_PLAN_CACHE_BYTES = 512 * 2**20

SETTINGS: tuple[Setting, ...] = (
    Setting("IPUKERN_NUM_THREADS", "run", "all cores",
            "host threads of the compiled kernels (ik.set_num_threads overrides it); results "
            "never depend on it"),
    Setting("IPUKERN_PLAN_CACHE_BYTES", "run", str(DEFAULT_PLAN_CACHE_BYTES),
            "bound on the host bytes held by cached conv programs' arenas "
            "(ik.set_plan_cache_limit overrides it)"),
    Setting("IPUKERN_PLAN_WORKER", "run", "auto",
            "0: never fork the network planning worker; 1: fork it whatever the load; "
            "unset: fork it when a core is idle"),
    Setting("IPUKERN_FUSED_EXCHANGE", "run", "1",
            "0: run every exchange and compute set apart (no fused host path); for "
            "debugging a fused step, the cycles are the same"),
    Setting("IPUKERN_CHECK_BUILT_PROGRAMS", "run", "0",
            "1: validate even the exchanges ipukern's own builders mark as trusted (slow; "
            "for checking a builder)"),
    Setting("IPUKERN_PROGRESS", "run", "on a terminal",
            "1: progress lines on stderr for long work even when stderr is not a terminal; 0: "
            "never (the CLI's --progress / --no-progress override it)"),
    Setting("IPUKERN_CACHE_DIR", "run", "$XDG_CACHE_HOME/ipukern/tilefn",
            "where generated tile-function drivers and Numba's cache of them live; network "
            "copy tables go to its tables/ subdirectory (default $XDG_CACHE_HOME/ipukern/tables)"),
    Setting("IPUKERN_TABLE_CACHE_BYTES", "run", "4294967296",
            "bytes the on-disk cache of network copy tables ($IPUKERN_CACHE_DIR/tables) may "
            "hold; least recently used entries are removed beyond it"),
    Setting("IPUKERN_NO_OPENMP", "build", "0", "1: build the kernels without OpenMP (serial)"),
    Setting("IPUKERN_NATIVE", "build", "0", "1: compile the kernels with -march=native"),
    Setting("IPUKERN_CYTHON_DEBUG", "build", "0",
            "1: build with -O0 -g and Cython bounds and wraparound checks (slow; for debugging)"),
)


def _get(name: str) -> str:
    return os.environ.get(name, "").strip()


def _flag(name: str, default: bool) -> bool:
    v = _get(name)
    if not v:
        return default
    if v not in ("0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {v!r}")
    return v == "1"


def num_threads() -> int | None:
    """``IPUKERN_NUM_THREADS`` as an int, or None when unset (range checks are the caller's)."""
    v = _get("IPUKERN_NUM_THREADS")
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"IPUKERN_NUM_THREADS must be an integer, got {v!r}") from None


def plan_cache_bytes() -> int:
    """``IPUKERN_PLAN_CACHE_BYTES`` (default :data:`DEFAULT_PLAN_CACHE_BYTES`)."""
    v = _get("IPUKERN_PLAN_CACHE_BYTES")
    if not v:
        return DEFAULT_PLAN_CACHE_BYTES
    if not v.isdigit():
        raise ValueError(f"IPUKERN_PLAN_CACHE_BYTES must be a number of bytes, got {v!r}")
    return int(v)


def plan_worker() -> bool | None:
    """``IPUKERN_PLAN_WORKER``: False (``0``), True (``1``) or None (unset: decide by load)."""
    v = _get("IPUKERN_PLAN_WORKER")
    if not v:
        return None
    if v not in ("0", "1"):
        raise ValueError(f"IPUKERN_PLAN_WORKER must be 0 or 1, got {v!r}")
    return v == "1"


def progress() -> bool | None:
    """``IPUKERN_PROGRESS``: True (``1``), False (``0``) or None (unset: stderr a terminal decides)."""
    v = _get("IPUKERN_PROGRESS")
    if not v:
        return None
    return _flag("IPUKERN_PROGRESS", False)


def silence_progress() -> None:
    """Set ``IPUKERN_PROGRESS=0`` in this process (a sweep's worker: the parent draws the line)."""
    os.environ["IPUKERN_PROGRESS"] = "0"


def fused_exchange() -> bool:
    """``IPUKERN_FUSED_EXCHANGE`` (default on)."""
    return _flag("IPUKERN_FUSED_EXCHANGE", True)


def check_built_programs() -> bool:
    """``IPUKERN_CHECK_BUILT_PROGRAMS`` (default off)."""
    return _flag("IPUKERN_CHECK_BUILT_PROGRAMS", False)


def table_cache_bytes() -> int | None:
    """``IPUKERN_TABLE_CACHE_BYTES``, or None when unset (the cache's default applies)."""
    v = _get("IPUKERN_TABLE_CACHE_BYTES")
    if not v:
        return None
    if not v.isdigit():
        raise ValueError(f"IPUKERN_TABLE_CACHE_BYTES must be a number of bytes, got {v!r}")
    return int(v)


def cache_dir() -> str | None:
    """``IPUKERN_CACHE_DIR``, or None when unset (the caller picks the default)."""
    return _get("IPUKERN_CACHE_DIR") or None


def describe() -> str:
    """The table of settings with their current values, one line each (for ``ipukern info``)."""
    rows = []
    for s in SETTINGS:
        now = os.environ.get(s.name)
        rows.append(f"{s.name:30s} {s.when:5s} {now if now is not None else '(' + s.default + ')'}"
                    f"  {s.meaning}")
    return "\n".join(rows)
