"""Where a sweep's points run: Dask distributed, a process pool, or here.

``scheduler`` is

- None (default): a Dask ``LocalCluster`` of ``n_workers`` processes (one thread each) made
  for the call, when ``dask.distributed`` is installed (``pip install "ipukern[dask]"``);
  without it an ipukern process pool (:func:`ipukern._pool.process_pool`), or here when
  there is one CPU or one point;
- a scheduler address (``"tcp://host:8786"``) or a ``distributed.Client``: that cluster
  (its workers need ipukern importable; an address's client is closed afterwards, a
  Client of yours is left running);
- ``"local"``: a LocalCluster (an ImportError naming the extra without Dask);
- ``"process"``: the process pool; ``"serial"``: here, one point after the other;
- any ``concurrent.futures.Executor``.

Points are submitted in order and their records gathered as they finish; every record is
written to the stream file (:class:`~ipukern.design_space.store.Store`) at once. Results do
not depend on the engine: each point is deterministic and the table is put back in point
order. A point the engine loses (its worker killed, the cluster gone) is reported with its
configuration and not written, so a later run computes it again.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._pool import process_pool, worker_count
from .points import Point, evaluate
from .store import Store

__all__ = ["SCHEDULERS", "engine", "run_points", "dask_available"]

#: the named schedulers (besides an address, a Client and an Executor)
SCHEDULERS = ("local", "process", "serial")
#: seconds to wait for a scheduler address to answer
CONNECT_TIMEOUT_S = 30
#: variables of Dask's default worker environment the LocalCluster made here does not set
WORKER_ENV_UNSET = ("MALLOC_TRIM_THRESHOLD_",)
#: Dask settings of the LocalCluster made here (its workers, nannies and scheduler): no
#: statistical profiler (a thread that takes the GIL every 10 ms to walk the running
#: point's stack; nothing here reads its profiles, there is no dashboard) and the monitors
#: polled every second rather than every 20-500 ms (their figures serve Dask's memory
#: limits and dashboard, which one-thread estimate points do not approach). Measured:
#: docs/explore.rst.
CLUSTER_CONFIG = {"distributed.worker.profile.enabled": False,
                  "distributed.worker.memory.monitor-interval": "1s",
                  "distributed.admin.system-monitor.interval": "5s",
                  "distributed.admin.tick.interval": "500ms"}


def dask_available() -> bool:
    """Whether ``dask.distributed`` can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def _is_client(obj: Any) -> bool:
    return type(obj).__module__.startswith("distributed") and hasattr(obj, "get_executor")


def check_scheduler(scheduler: Any, n_workers: Any) -> None:
    """TypeError / ValueError for a scheduler or worker count no engine takes."""
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int)
                                  or n_workers < 1):
        raise ValueError(f"n_workers must be an int >= 1, got {n_workers!r}")
    if scheduler is None or _is_client(scheduler) or isinstance(scheduler, concurrent.futures.Executor):
        return
    if isinstance(scheduler, str):
        if scheduler in SCHEDULERS or "://" in scheduler:
            return
        raise ValueError(f"scheduler must be a Dask address such as 'tcp://host:8786' or one of "
                         f"{', '.join(SCHEDULERS)}, got {scheduler!r}")
    raise TypeError("scheduler must be None, an address, 'local', 'process', 'serial', a "
                    f"distributed.Client or a concurrent.futures.Executor, got {type(scheduler).__name__}")


@contextlib.contextmanager
def _environ_kept() -> Iterator[None]:
    """Undo, on the way out, what a Nanny writes into this process's environment: it sets
    its ``pre-spawn-environ`` (OMP_NUM_THREADS=1 ...) here before spawning a worker, and a
    kernel of this process whose OpenMP starts later would run one thread."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _local_cluster(n_workers: int) -> Iterator[tuple[Any, str]]:
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise ImportError('scheduler="local" needs Dask distributed: pip install "ipukern[dask]"') from None
    # one thread per worker: the estimates are single-threaded Python, and a worker's GIL
    # would serialise its threads anyway; no dashboard (no port to bind, no bokeh).
    # Dask's default worker environment sets MALLOC_TRIM_THRESHOLD_=65536, which fixes
    # glibc's mmap threshold at 128 KiB: every large array of a plan is then a fresh mmap,
    # page-faulted anew (measured: 6-7x the page faults, +50% CPU a ResNet-50 point;
    # docs/explore.rst); the workers keep glibc's adaptive default instead.
    key = "distributed.nanny.pre-spawn-environ"
    env = {**dask.config.get(key, {}), **dict.fromkeys(WORKER_ENV_UNSET)}   # None: not set
    with dask.config.set({key: env, **CLUSTER_CONFIG}), _environ_kept(), \
            LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                         dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client.get_executor(pure=False), f"Dask LocalCluster ({n_workers} workers)"


@contextlib.contextmanager
def _address(address: str) -> Iterator[tuple[Any, str]]:
    try:
        from distributed import Client
    except ImportError:
        raise ImportError(f"scheduler {address!r} needs Dask distributed: "
                          'pip install "ipukern[dask]"') from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except OSError as e:
        raise RuntimeError(f"scheduler {address!r}: cannot connect ({e})") from None
    with client:
        yield client.get_executor(pure=False), f"Dask scheduler {address}"


@contextlib.contextmanager
def engine(scheduler: Any, n_workers: int | None, n_points: int) -> Iterator[tuple[Any, str]]:
    """``(executor or None for here, description)`` for ``scheduler`` (module docstring);
    what it made is shut down on the way out."""
    workers = n_workers or worker_count()
    if scheduler is None:
        if dask_available():
            scheduler = "local"
        elif workers > 1 and n_points > 1:
            scheduler = "process"
        else:
            scheduler = "serial"
    if scheduler == "serial":
        yield None, "serial"
    elif scheduler == "process":
        with process_pool(max(1, min(workers, n_points))) as pool:
            yield pool, f"process pool ({pool._max_workers} workers)"
    elif scheduler == "local":
        with _local_cluster(workers) as got:
            yield got
    elif isinstance(scheduler, str):
        with _address(scheduler) as got:
            yield got
    elif _is_client(scheduler):
        yield scheduler.get_executor(pure=False), f"Dask client {getattr(scheduler, 'scheduler', '')}"
    else:
        yield scheduler, f"executor {type(scheduler).__name__}"


def run_points(points: Sequence[Point], executor: Any, store: Store,
               progress: Callable[[int, int, str], None] | None = None) -> list[tuple[Point, str]]:
    """Evaluate ``points`` on ``executor`` (None: here), adding each record to ``store`` as
    it finishes. Returns the points the engine lost, with why."""
    lost: list[tuple[Point, str]] = []
    total = len(points)

    def done(i: int, p: Point) -> None:
        if progress is not None:
            progress(i, total, f"{p.network} on {p.variant}")

    if executor is None:
        for i, p in enumerate(points, 1):
            try:
                store.add(evaluate(p))
            except Exception as e:   # noqa: BLE001 - as a worker's failure would be
                lost.append((p, f"{type(e).__name__}: {e}"))
            done(i, p)
        return lost
    futures = {executor.submit(evaluate, p): p for p in points}
    try:
        for i, f in enumerate(concurrent.futures.as_completed(futures), 1):
            p = futures[f]
            try:
                store.add(f.result())
            except Exception as e:   # noqa: BLE001 - the engine lost it: report, go on
                lost.append((p, f"{type(e).__name__}: {e}"))
            done(i, p)
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    return sorted(lost, key=lambda pl: pl[0].index)
