"""Running a sweep's independent points serially or on an executor; the ``"auto"`` default.

Every sweep (:func:`~ipukern.scaling.grouped_conv_sweep`, :func:`~ipukern.network_sweep`,
:func:`~ipukern.training_sweep`) hands its points to :func:`run_points`. ``executor`` is

- ``"auto"`` (default): run the points here, one by one, timing them; as soon as the
  remaining points are expected to take long enough that a process pool saves more than
  :data:`AUTO_MARGIN` times its start-up, the rest go to one (:func:`process_pool`);
- ``None``: serially, here;
- ``"process"``: a :func:`process_pool` made (and shut down) for the call;
- any ``concurrent.futures.Executor`` (a pool of yours, a Dask ``Client.get_executor()``,
  ``mpi4py.futures.MPIPoolExecutor``...), left running afterwards.

Every point is deterministic and results are gathered in submission order, so the results
(their order and every bit) are those of a serial run whatever runs them. A point's
exception is raised as it would be serially, once, after the points not yet started are
cancelled; a pool made here is always shut down.

Start method. Workers come from a ``"forkserver"`` (``"spawn"`` where there is none), never
from ``fork``: the compiled kernels run OpenMP teams, and a child forked from a process whose
OpenMP (or PyTorch) thread pool has started can hang at its next parallel region. The fork
server is started once per process with ``ipukern`` preloaded, so a pool's workers fork from
a process that has imported ipukern but never run a kernel, and later pools start in
milliseconds. Workers import ipukern afresh: module-level settings changed in the calling
process (a planner constant patched for an experiment) do not reach them; pass
``executor=None`` after changing any.

Ctrl-C. A pool's workers are launched (the fork server started, each worker's request sent
and its process data written) with SIGINT deferred in this process and blocked in the
processes it starts: an interrupt that cut a launch short would leave the fork server or a
half-started worker reading a closed pipe, printing a traceback of its own after the
caller's one-line message (seen under load, where launches take seconds). The deferred
interrupt is raised as soon as the launch is complete. The fork server keeps SIGINT blocked
(it ignores it anyway once started); a worker ignores SIGINT and then unblocks it before its
first point; the caller ends the workers. CPython starts its resource tracker the same way
(bpo-33613). So the fork server ipukern starts forks other pools' workers with SIGINT
blocked too.

Measured start-up (AMD EPYC, 2 cores, Python 3.11, load average ~1, 2 workers, time to the
first results of a trivial ipukern call): spawn 1.3-1.4 s per pool; forkserver without
preload 1.2 s per pool; forkserver with ipukern preloaded 0.8 s for the first pool of a
process (server start + import), 0.03 s for every later one. The default
``ipukern scaling`` sweep (70 points, GC200 vs A100) takes 3.1 s serially from a cold plan
cache (44 ms a point), 0.6 s warm.
"""
from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import multiprocessing
import os
import pickle
import pickletools
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import _memo, _settings

__all__ = ["AUTO_MARGIN", "check_executor", "pays", "process_pool", "run_points", "worker_count"]

#: a pool is used by ``"auto"`` when the serial time it saves, estimated from the points
#: run so far, exceeds this many times its start-up cost (variance of points, load)
AUTO_MARGIN = 2.0
#: start-up of the first pool of a process (fork server + import of ipukern), seconds:
#: measured 0.8 s at load ~1 on 2 cores, rounded up for a loaded or slower machine
STARTUP_FIRST_S = 1.0
#: start-up of a later pool: 0.03 s to fork the workers from the running, preloaded server,
#: plus ~0.2 s of one-time work in each worker's first point (lazy imports and tables)
STARTUP_LATER_S = 0.3
#: a process's first point alone decides only when at least this long (its one-time
#: imports and tables, ~0.2 s, are then a small part); else the mean of the later points
FIRST_POINT_TRUSTED_S = 1.0
_PRELOAD = ["ipukern", "ipukern.scaling", "ipukern.sweeps"]
_STATE = {"server": False}
#: the ``__main__`` guard lines of scripts, by (path, mtime)
_GUARD_CACHE = _memo.register(_memo.LruCache("pool.main_guards", maxsize=64))


def check_executor(executor: Any) -> None:
    """TypeError unless ``executor`` is "auto", "process", None or an Executor."""
    if executor is None or isinstance(executor, concurrent.futures.Executor):
        return
    if isinstance(executor, str) and executor in ("auto", "process"):
        return
    raise TypeError("executor must be 'auto', 'process', None or a concurrent.futures.Executor, "
                    f"got {executor!r}")


def worker_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), at most
    ``os.cpu_count()``."""
    n = os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        n = min(n, len(os.sched_getaffinity(0)))
    return max(1, n)


class ProcessPoolExecutor(concurrent.futures.ProcessPoolExecutor):
    """concurrent.futures.ProcessPoolExecutor whose ``submit`` (which launches the workers) is not cut short
    by Ctrl-C (see the module docstring)."""

    def submit(self, fn, /, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003 - as the base
        with _sigint_deferred():
            return super().submit(fn, *args, **kwargs)


@contextlib.contextmanager
def _sigint_deferred():
    """SIGINT blocked in the calling (main) thread, so the processes started inside inherit
    it blocked, and a Python-level SIGINT (arriving through another thread) recorded instead
    of raised; the original handler runs with it on the way out."""
    old = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread() or old is None
            or not hasattr(signal, "pthread_sigmask")):
        yield                                    # signals only reach the main thread's code
        return
    got: list = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(frame))
    try:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)   # runs a pending one: recorded
    finally:
        signal.signal(signal.SIGINT, old)
    if got:
        if callable(old):
            old(signal.SIGINT, got[0])           # default: raises KeyboardInterrupt
        elif old == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


def process_pool(max_workers: int | None = None) -> concurrent.futures.ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` safe with the compiled kernels' threads: its workers fork
    from a fork server that has imported ipukern (``spawn`` where there is no fork server).

    Parameters
    ----------
    max_workers : int, optional
        Worker processes; default :func:`worker_count`. The caller shuts the pool down
        (``with process_pool(2) as ex: ...``).
    """
    if max_workers is None:
        max_workers = worker_count()
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be an int >= 1, got {max_workers!r}")
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        if not _STATE["server"]:
            # add ours to whatever the process preloads already (default ['__main__'])
            from multiprocessing import forkserver
            have = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
            ctx.set_forkserver_preload(have + [m for m in _PRELOAD if m not in have])
    else:                                         # pragma: no cover - Windows
        ctx = multiprocessing.get_context("spawn")
    _STATE["server"] = True
    return ProcessPoolExecutor(max_workers, mp_context=ctx, initializer=_ignore_sigint)


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the sweep and ends the
    # workers; a worker's own KeyboardInterrupt would only print a traceback. Launched
    # with SIGINT blocked (_sigint_deferred): ignored first, then unblocked.
    # The parent draws the sweep's progress line; a worker's own (a library step such as a
    # max-batch search) would garble it on the same terminal.
    _settings.silence_progress()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_points(fn: Callable[[Any], Any], items: Sequence[Any], executor: Any = "auto", *,
               progress: Callable[[int, int, str], None] | None = None,
               label: Callable[[Any], str] = str,
               cost: Callable[[Any], float] | None = None) -> tuple[list, str]:
    """``[fn(x) for x in items]`` serially or on ``executor`` (see the module docstring).

    ``progress(done, total, label)`` is called as each point finishes, in order; ``cost``
    (a per-item proxy of its host time) is handed to a progress object that takes it
    (:meth:`ipukern._progress.Progress.set_costs`), so its ETA weighs items that differ a lot.

    Returns
    -------
    results : list
        In the order of ``items``.
    how : str
        What ran the points, e.g. ``"serial"`` or ``"process pool (2 workers) after 3
        serial points"``.
    """
    check_executor(executor)
    items = list(items)
    out: list = []
    if cost is not None and hasattr(progress, "set_costs"):
        progress.set_costs([cost(x) for x in items])
    if executor is None or not items:
        _serial(fn, items, out, progress, label, stop=None)
        return out, "serial"
    if isinstance(executor, concurrent.futures.Executor):
        _on(executor, fn, items, out, progress, label)
        return out, f"executor {type(executor).__name__}"
    if executor == "process":
        workers = max(1, min(worker_count(), len(items)))
        _on_own_pool(workers, fn, items, out, progress, label)
        return out, f"process pool ({workers} workers)"
    # "auto": serially while the rest looks cheap (see pays), then a pool for the rest
    stamps: list[float] = []                     # time at the start of each serial point
    pool_ok: list[bool] = []                     # decided once, lazily (pickling costs)
    cpus = worker_count()

    def go_parallel(done: int) -> bool:
        stamps.append(time.perf_counter())
        if done == 0:
            return False
        if done == 1:
            # a process's first point also pays one-time imports and tables (~0.2 s):
            # trusted alone only when it is long anyway
            per_point = stamps[1] - stamps[0]
            if per_point < FIRST_POINT_TRUSTED_S:
                return False
        else:
            per_point = (stamps[-1] - stamps[1]) / (done - 1)
        if not pays(per_point, len(items) - done, cpus):
            return False
        if not pool_ok:
            pool_ok.append(_pool_safe(fn, items[done:]))
        return pool_ok[0]

    _serial(fn, items, out, progress, label, stop=go_parallel)
    done = len(out)
    if done == len(items):
        return out, "serial"
    workers = min(cpus, len(items) - done)
    _on_own_pool(workers, fn, items, out, progress, label)
    return out, f"process pool ({workers} workers) after {done} serial point{'s' * (done != 1)}"


def pays(per_point: float, rest: int, cpus: int | None = None) -> bool:
    """Whether a process pool is expected to finish ``rest`` more points of ``per_point``
    seconds each (as measured here) sooner than this process, by more than
    :data:`AUTO_MARGIN` times its start-up. The pool's speed-up is its worker count (at
    most ``cpus``, default :func:`worker_count`), but no more than the CPUs the load average
    leaves idle, plus this process's own: on a busy machine extra processes only take CPU
    time from the others (and this process's own work counted in the load makes the
    estimate err towards serial)."""
    cpus = worker_count() if cpus is None else cpus
    workers = min(cpus, rest)
    if workers < 2:
        return False
    work = per_point * rest
    need = AUTO_MARGIN * (STARTUP_LATER_S if _STATE["server"] else STARTUP_FIRST_S)
    if work * (1 - 1 / workers) <= need:        # not even with every CPU idle (no syscall)
        return False
    speedup = min(float(workers), 1.0 + max(0.0, cpus - _load()))
    return speedup >= 1.2 and work * (1 - 1 / speedup) > need


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):            # pragma: no cover - Windows
        return 0.0


def _serial(fn: Callable, items: list, out: list, progress: Any, label: Callable,
            stop: Callable[[int], bool] | None) -> None:
    for i in range(len(out), len(items)):
        if stop is not None and stop(i):
            return
        out.append(fn(items[i]))
        if progress is not None:
            progress(i + 1, len(items), label(items[i]))


def _on(executor: concurrent.futures.Executor, fn: Callable, items: list, out: list,
        progress: Any, label: Callable) -> None:
    """The points from ``len(out)`` on, on ``executor``, gathered in order; on any error
    the futures not yet started are cancelled before it propagates."""
    start = len(out)
    futures = [executor.submit(fn, x) for x in items[start:]]
    try:
        for i, f in enumerate(futures, start):
            out.append(f.result())
            if progress is not None:
                progress(i + 1, len(items), label(items[i]))
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def _on_own_pool(workers: int, fn: Callable, items: list, out: list, progress: Any,
                 label: Callable) -> None:
    pool = process_pool(workers)
    try:
        _on(pool, fn, items, out, progress, label)
    except concurrent.futures.process.BrokenProcessPool as e:
        raise RuntimeError(
            "a sweep worker process died before returning its point (killed, out of memory, "
            "or a script that starts the sweep at its top level without an "
            "`if __name__ == '__main__':` guard: workers re-import the main module); "
            "executor=None runs the sweep in this process") from e
    except KeyboardInterrupt:
        # do not wait for the points running in the workers: end them now
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------ is a pool safe here?
def _pool_safe(fn: Callable, rest: list) -> bool:
    """Whether ``"auto"`` may hand ``rest`` to a process pool: not inside a worker or an MPI
    rank (no nested pools), the work pickles, it names nothing a worker could not import,
    and starting workers will not re-run the main script's top level."""
    # a worker, or a child still importing the main script (multiprocessing's own test)
    if (multiprocessing.parent_process() is not None or _mpi_world_size() > 1
            or getattr(multiprocessing.current_process(), "_inheriting", False)):
        return False
    try:
        data = pickle.dumps((fn, rest), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:                            # lambdas, open files, locks...
        return False
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) is None:
        # interactive or notebook: nothing is re-imported, but nothing defined there either
        return not any(arg == "__main__" for _, arg, _ in pickletools.genops(data))
    return _main_reimport_safe(main)


def _mpi_world_size() -> int:
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return int(mpi.COMM_WORLD.Get_size()) if mpi is not None else 1
    except Exception:                            # pragma: no cover - a broken MPI
        return 1


def _main_reimport_safe(main: Any) -> bool:
    """True when workers importing the main module will not re-run the sweep: it is a
    package's ``__main__`` (``python -m ipukern``, not re-imported), or this call comes from
    inside its ``if __name__ == "__main__":`` block."""
    name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if name == "__main__" or name.endswith(".__main__"):
        return True
    frame = sys._getframe()
    while frame is not None and not (frame.f_globals is main.__dict__
                                     and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return False                             # not called from the script's top level
    line = frame.f_lineno
    return any(a <= line <= b for a, b in _guard_lines(main.__file__))


def _guard_lines(path: str) -> list[tuple[int, int]]:
    """Line ranges of the top-level ``if __name__ == "__main__":`` blocks of a script."""
    try:
        key = (path, os.stat(path).st_mtime)
        hit = _GUARD_CACHE.get(key)
        if hit is None:
            with open(path, "rb") as f:
                tree = ast.parse(f.read(), path)
            hit = _GUARD_CACHE.put(key, [(n.lineno, n.end_lineno or n.lineno) for n in tree.body
                                         if isinstance(n, ast.If) and _is_main_test(n.test)])
        return hit
    except (OSError, SyntaxError, ValueError):
        return []


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))
