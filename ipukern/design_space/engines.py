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

Points run grouped by machine variant (:func:`by_variant`; on Dask a group per worker at a
time) and their records are gathered as they finish; every record is written to the stream
file (:class:`~ipukern.design_space.store.Store`) at once. Results do
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

__all__ = ["SCHEDULERS", "by_variant", "engine", "run_points", "dask_available"]

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


def by_variant(points: Sequence[Point]) -> list[list[Point]]:
    """The points grouped by machine variant, in order of first appearance. A point reuses
    what an earlier point on the same machine left in the caches (a MobileNet-V2 point after
    an EfficientNet-B0 one on the same variant: 143 cache misses and 0.62 s instead of 518
    and 0.84 s; docs/explore.rst), so each group runs together, serially as on a worker."""
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(p.variant, []).append(p)
    return list(groups.values())


def _lanes(executor: Any) -> list[Any]:
    """One executor per Dask worker (its tasks prefer that worker, and go elsewhere if it
    leaves), or ``[executor]`` for an executor that cannot place tasks."""
    client = getattr(executor, "_client", None)
    if not _is_client(client):
        return [executor]
    workers = sorted(client.scheduler_info().get("workers", {}))
    if not workers:
        return [executor]
    return [client.get_executor(pure=False, workers=[w], allow_other_workers=True) for w in workers]


def _run_lanes(groups: list[list[Point]], lanes: list[Any], store: Store,
               lost: list[tuple[Point, str]], done: Callable[[Point], None]) -> None:
    """Run ``groups`` on ``lanes`` (one executor per worker): a lane takes the next group
    when it starts on its current group's last point."""
    if len(lanes) == 1:                 # no placement: every point at once, in group order
        groups = [[p for g in groups for p in g]]
    queue = list(reversed(groups))
    futures: dict[concurrent.futures.Future, tuple[Point, int]] = {}
    pending = [0] * len(lanes)

    def feed(lane: int) -> None:
        for p in queue.pop():
            futures[lanes[lane].submit(evaluate, p)] = (p, lane)
            pending[lane] += 1

    try:
        for lane in range(len(lanes)):
            if queue:
                feed(lane)
        while futures:
            finished, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
            for f in finished:
                p, lane = futures.pop(f)
                pending[lane] -= 1
                try:
                    store.add(f.result())
                except Exception as e:   # noqa: BLE001 - the engine lost it: report, go on
                    lost.append((p, f"{type(e).__name__}: {e}"))
                done(p)
                if pending[lane] <= 1 and queue:
                    feed(lane)
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def run_points(points: Sequence[Point], executor: Any, store: Store,
               progress: Callable[[int, int, str], None] | None = None) -> list[tuple[Point, str]]:
    """Evaluate ``points`` on ``executor`` (None: here), adding each record to ``store`` as
    it finishes. Returns the points the engine lost, with why.

    Each machine variant's points run together (:func:`by_variant`): here one group after
    the other; on Dask each worker takes the next group when it starts on the last point of
    its current one, so a worker keeps its group's caches. Every point is still one task,
    streamed to ``store`` when it finishes."""
    lost: list[tuple[Point, str]] = []
    total = len(points)
    groups = by_variant(points)
    n_done = 0

    def done(p: Point) -> None:
        nonlocal n_done
        n_done += 1
        if progress is not None:
            progress(n_done, total, f"{p.network} on {p.variant}")

    if executor is None:
        for p in (p for g in groups for p in g):
            try:
                store.add(evaluate(p))
            except Exception as e:   # noqa: BLE001 - as a worker's failure would be
                lost.append((p, f"{type(e).__name__}: {e}"))
            done(p)
        return lost
    _run_lanes(groups, _lanes(executor), store, lost, done)
    return sorted(lost, key=lambda pl: pl[0].index)
