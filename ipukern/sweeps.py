"""Sweeps of network and training estimates over lists of configurations, here or on any
``concurrent.futures.Executor`` (a process pool, a Dask ``Client.get_executor()``, an MPI
pool such as ``mpi4py.futures.MPIPoolExecutor``); by default (``executor="auto"``) a large
sweep moves to a process pool by itself (:mod:`ipukern._pool`).

Each configuration is a dict of keyword arguments of :func:`ipukern.estimate_network` or
:func:`ipukern.estimate_training`; its ``"net"`` is a :class:`~ipukern.nn.Network` or the name
of a zoo model (``ik.models.MODELS``; ``"model_kwargs"`` are passed to the model function,
e.g. ``{"image_size": 128}``), so a configuration pickles cheaply to a worker. Every
estimate is deterministic, so the results (their order and every number) are those of a
serial run whatever the executor. :func:`ipukern.scaling.grouped_conv_sweep` takes the same
``executor=``.
"""
from __future__ import annotations

import functools
import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from ._pool import run_points

__all__ = ["network_sweep", "training_sweep", "resolve_net"]


def resolve_net(net: Any, model_kwargs: Any = None) -> Any:
    """A Network as given, or the zoo model ``net`` names built with ``model_kwargs``."""
    from .nn.models import MODELS
    if isinstance(net, str):
        if net not in MODELS:
            raise ValueError(f"unknown model {net!r}; models are {sorted(MODELS)}")
        return MODELS[net](**(model_kwargs or {}))
    if model_kwargs:
        raise ValueError("model_kwargs apply to a zoo model name, not to a Network")
    return net


def _network_point(cfg: dict, max_batch: bool = False) -> Any:
    from .nn import estimate_network
    cfg = dict(cfg)
    net = resolve_net(cfg.pop("net"), cfg.pop("model_kwargs", None))
    prof = estimate_network(net, **cfg)
    if max_batch:
        _ = prof.memory["max_batch"]     # search here, in the worker (the profile caches it)
    # the lazy max-batch search is a closure over the network: it does not travel to another
    # process, so no sweep result carries it (serial or not: identical results)
    prof._max_batch_fn = None
    return prof


def _training_point(cfg: dict) -> Any:
    from .systems import estimate_training
    cfg = dict(cfg)
    net = cfg.pop("net", None)
    return estimate_training(resolve_net(net, cfg.pop("model_kwargs", None)), **cfg)


def _check(configs: Any, target: Callable) -> list[dict]:
    if isinstance(configs, (dict, str)) or not isinstance(configs, Iterable):
        raise TypeError("configs must be a list of dicts (keyword arguments, with 'net')")
    configs = list(configs)
    allowed = set(inspect.signature(target).parameters) | {"model_kwargs"}
    if "options" in allowed:           # a keyword layer over a record (TrainingConfig)
        from .systems import TrainingConfig
        allowed |= {f.name for f in dataclasses.fields(TrainingConfig)}
    for i, c in enumerate(configs):
        if not isinstance(c, dict):
            raise TypeError(f"config {i} must be a dict of keyword arguments, got {type(c).__name__}")
        bad = sorted(set(c) - allowed)
        if bad:
            raise TypeError(f"config {i}: {target.__name__} takes no argument(s) {bad}")
    return configs


def _label(cfg: dict) -> str:
    return str(cfg.get("net", ""))


def _cost(cfg: dict) -> float:
    """A point's cost proxy for the progress ETA: its layer count (planning them dominates;
    a zoo network is built here in a few ms, again in the worker)."""
    net = cfg.get("net")
    if net is None:
        return 1.0
    try:
        return float(len(resolve_net(net, cfg.get("model_kwargs")).layers))
    except (TypeError, ValueError, AttributeError):   # the point itself reports a bad config
        return 1.0


def network_sweep(configs: Iterable[dict], *, executor: Any = "auto",
                  progress: Callable[[int, int, str], None] | None = None,
                  max_batch: bool = False) -> list:
    """:func:`~ipukern.estimate_network` of every configuration, in order.

    Parameters
    ----------
    configs : list of dict
        Keyword arguments of ``estimate_network`` (``net`` a Network or zoo model name,
        optional ``model_kwargs``), e.g. ``[{"net": "resnet50", "batch": b} for b in (1, 8)]``.
    executor : "auto" (default), None, "process" or a concurrent.futures.Executor
        Where the points run: ``"auto"`` runs them here and moves the rest to a process
        pool once they are expected to take long enough for it to pay (a few seconds);
        None serially; ``"process"`` a process pool for the call; or your executor (a
        Dask ``Client.get_executor()``, an MPI pool). Results are identical either way
        (see :mod:`ipukern._pool`).
    progress : callable(done, total, label), optional
    max_batch : bool, default False
        Also search each point's largest batch that fits (``memory["max_batch"]``, where the
        point runs). The search compiles the network at about 2 log2(answer / batch) more
        batch sizes, so it is several times the cost of the estimate itself; without it
        ``memory["max_batch"]`` is None.

    Returns
    -------
    list of NetworkProfile
    """
    from .nn import estimate_network
    if not isinstance(max_batch, bool):
        raise TypeError(f"max_batch must be True or False, got {max_batch!r}")
    fn = functools.partial(_network_point, max_batch=True) if max_batch else _network_point
    return run_points(fn, _check(configs, estimate_network), executor, progress=progress,
                      label=_label, cost=_cost)[0]


def training_sweep(configs: Iterable[dict], *, executor: Any = "auto",
                   progress: Callable[[int, int, str], None] | None = None) -> list:
    """:func:`~ipukern.estimate_training` of every configuration, in order (``net`` a
    Network or zoo model name; ``system``, ``micro_batch`` ... as its keyword arguments).
    ``executor`` and ``progress`` as :func:`network_sweep`. Returns TrainingEstimates."""
    from .systems import estimate_training
    return run_points(_training_point, _check(configs, estimate_training), executor,
                      progress=progress, label=_label, cost=_cost)[0]
