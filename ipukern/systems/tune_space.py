"""What :func:`ipukern.tune` is asked to search: the searched options a call fixes (validated,
each bad one a ValueError naming it) and the (IPUs per replica, replicas) layouts of a
system it searches. Its own module so that :mod:`.tune` stays the search."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._checks import as_int
from .config import GCL_REPLICA_SIZES, TrainingConfig
from .spec import System
from .training import _split

__all__: list[str] = []


def _as_list(v: Any, default: tuple, name: str) -> list:
    """A searched option: None -> the defaults, a tuple -> those candidates, else one value."""
    if v is None:
        return list(default)
    if isinstance(v, tuple) and name != "recompute":
        return list(v)
    return [v]


#: the searched options that :func:`tune` fixes when given (TrainingConfig fields)
_FIXABLE = ("micro_batch", "gradient_accumulation", "replicas", "ipus_per_replica", "pipeline",
            "recompute", "available_memory_proportion")


@dataclass
class _Fixed:
    """The searched options a :func:`tune` call fixed, validated (None: searched)."""

    micro_batch: int | None = None
    gradient_accumulation: int | None = None
    replicas: int | None = None
    ipus_per_replica: int | None = None
    pipeline: Any = None
    recompute: Any = None
    available_memory_proportion: Any = None


def _fixed_options(options: dict, names: list[str]) -> tuple[_Fixed, dict]:
    """Split ``options`` into the fixed searched ones (validated) and the pass-through rest."""
    if "allow_overflow" in options:
        raise TypeError("tune does not take allow_overflow=")
    fx = _Fixed(**{k: options.pop(k) for k in _FIXABLE if k in options})
    for k in ("micro_batch", "gradient_accumulation"):
        if getattr(fx, k) is not None:
            setattr(fx, k, as_int(getattr(fx, k), k, minimum=1))
    p = fx.pipeline
    if p is not None and not (isinstance(p, str) and p == "auto"):
        if isinstance(p, str) or not isinstance(p, (list, tuple)):
            raise ValueError(f"pipeline must be 'auto' or a list of split layers or stage lists, got {p!r}")
        stages = len(p) if p and all(isinstance(x, (list, tuple)) for x in p) else len(p) + 1
        if fx.ipus_per_replica is not None and fx.ipus_per_replica != stages:
            raise ValueError(f"pipeline has {stages} stages but ipus_per_replica is {fx.ipus_per_replica}")
        _split(names, p, stages)                         # ValueError naming an unknown layer
        fx.ipus_per_replica = stages
    elif p is not None:
        fx.pipeline = None                               # "auto" is what every pipelined layout gets
    if fx.ipus_per_replica is not None:
        fx.ipus_per_replica = as_int(fx.ipus_per_replica, "ipus_per_replica", minimum=1)
        if fx.ipus_per_replica not in GCL_REPLICA_SIZES:
            raise ValueError(f"ipus_per_replica must be one of {GCL_REPLICA_SIZES} (GCL replica sizes), "
                             f"got {fx.ipus_per_replica}")
    if fx.replicas is not None:
        fx.replicas = as_int(fx.replicas, "replicas", minimum=1)
    return fx, options


def _layouts(system: System, fx: _Fixed, base: TrainingConfig, n_layers: int) -> list[tuple[int, int]]:
    """The (IPUs per replica, replicas) layouts searched."""
    n = system.n_ipus
    if fx.replicas is not None and fx.ipus_per_replica is None and \
            (n % fx.replicas or n // fx.replicas not in GCL_REPLICA_SIZES):
        ok = [n // s for s in GCL_REPLICA_SIZES if n % s == 0]
        raise ValueError(f"replicas={fx.replicas} does not divide {system.name}'s {n} IPUs into GCL replica "
                         f"sizes {GCL_REPLICA_SIZES}; give one of {ok}")
    layouts = []
    for s in GCL_REPLICA_SIZES:
        if fx.ipus_per_replica is not None and s != fx.ipus_per_replica:
            continue
        r = fx.replicas if fx.replicas is not None else n // s
        if r * s > n or (fx.replicas is None and n % s):
            if fx.ipus_per_replica is not None:
                raise ValueError(f"ipus_per_replica={s} x replicas={r} needs {r * s} IPUs; "
                                 f"{system.name} has {n}")
            continue
        if r % base.bn_replica_group:
            if fx.ipus_per_replica is not None or fx.replicas is not None:
                raise ValueError(f"bn_replica_group={base.bn_replica_group} must divide the {r} replicas")
            continue
        if s <= n_layers:
            layouts.append((s, r))
    if not layouts:
        raise ValueError(f"no layout of {system.name}'s {n} IPUs fits the given replicas / ipus_per_replica "
                         f"/ bn_replica_group")
    return layouts
