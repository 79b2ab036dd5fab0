"""Plan convs in a forked worker process while this one builds the programs.

A cold network estimate plans every distinct conv and matmul pass (a third of its time)
and builds each one's program, one after the other. Planning is a pure function of
(params, machine, bias, availableMemoryProportion) with no compiled kernels, so a worker
forked at the start of the estimate can plan the passes ahead of the caller, in the order
the caller will need them, and send each plan back (pickled, the machine by reference).
The caller never waits for the worker: :func:`take` hands over a plan the worker has
already sent, or None, and the caller then plans that pass itself (and marks it, so the
worker skips it). Plans are equal whoever computes them, so the result is identical to a
serial run, bit for bit; the worker only moves planning onto the second core.

Passes whose program the caller only costs (a network's backward-data and weight-update
convs: :func:`ipukern.nn.convops.pass_program`) are also *built* by the worker, which
then sends the plan with the program's superstep records and per-tile memory
(:class:`BuiltPass`): the caller's program cache would hold the same figures.

The worker is used only where it is safe and pays: ``os.fork`` available, at least two
CPUs in this process's affinity set, one of them idle (the load average; see
:func:`spare_core`), enough passes still to plan (:data:`MIN_PLANS`), not under MPI, not
inside a worker. ``IPUKERN_PLAN_WORKER=0`` turns it off, ``=1`` uses it whatever the load. The worker is
killed when the estimate ends (normally or by an exception); a worker that fails or hangs
only costs the caller the planning it would have done anyway.
"""
from __future__ import annotations

import io
import mmap
import os
import pickle
import signal
import struct
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from ... import _settings
from ..._pool import worker_count
from ...machine import MachineSpec
from ..compile import build_conv_program, plan_conv
from ..params import ConvParams
from ..planner import ConvPlan

__all__ = ["BuiltPass", "MIN_PLANS", "PlanKey", "plan_worker", "spare_core", "take",
           "take_built", "worker_enabled"]

#: a plan key: (params, machine, bias, available_memory_proportion)
PlanKey = tuple[ConvParams, MachineSpec, bool, "float | None"]
#: fewer passes left to plan than this: not worth a fork (a few ms)
MIN_PLANS = 8



class BuiltPass(NamedTuple):
    """What costing a built conv pass needs: its plan, the program's superstep records and
    the device's per-tile bytes in use."""

    plan: ConvPlan
    records: tuple
    memory_used: np.ndarray


_ACTIVE: list[_Worker] = []
_ACTIVE_LOCK = threading.Lock()
_IN_WORKER = False
_HEADER = struct.Struct("<II")      # key index, pickle length


def worker_enabled() -> bool:
    """Whether :func:`plan_worker` may fork a worker in this process: ``os.fork``, two
    CPUs, not under MPI, not inside a worker, and ``IPUKERN_PLAN_WORKER`` not ``0``."""
    if _IN_WORKER or not hasattr(os, "fork") or _settings.plan_worker() is False:
        return False
    if "mpi4py.MPI" in sys.modules:    # forking an MPI rank is unsafe
        return False
    return worker_count() >= 2


def spare_core() -> bool:
    """Whether a worker would find a core to itself: ``IPUKERN_PLAN_WORKER=1`` says yes;
    unset, the 1-minute load average must leave about one CPU idle (below CPUs - 0.5,
    this process included; back-to-back estimates alone keep it near 1.3 on 2 CPUs). On
    a loaded machine the worker would only compete with the caller and other jobs, and
    planning twice (a pass the worker has not sent yet is planned by the caller too)
    would cost more than it saves."""
    if _settings.plan_worker():
        return True
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return False
    return load < worker_count() - 0.5


def take(params: ConvParams, machine: MachineSpec, bias: bool, amp: float | None) -> ConvPlan | None:
    """The plan of this conv if a running worker has already sent it, else None (then the
    caller plans it and the worker will skip it)."""
    got = _take((params, machine, bias, amp))
    return got.plan if isinstance(got, BuiltPass) else got


def take_built(params: ConvParams, machine: MachineSpec, amp: float | None) -> BuiltPass | None:
    """The built pass (no bias) if a running worker has already sent it, else None."""
    got = _take((params, machine, False, amp))
    return got if isinstance(got, BuiltPass) else None


def _take(key: PlanKey) -> ConvPlan | BuiltPass | None:
    for w in tuple(_ACTIVE):
        got = w.take(key)
        if got is not None:
            return got
    return None


class _Worker:
    """One forked planning worker and the thread that receives its plans."""

    def __init__(self, keys: Sequence[PlanKey], machine: MachineSpec, build: frozenset):
        self.index = {k: i for i, k in enumerate(keys)}
        self.plans: dict[PlanKey, ConvPlan | BuiltPass] = {}
        self.claimed = mmap.mmap(-1, len(keys))      # shared: 1 = the caller plans it itself
        r, w = os.pipe()
        with warnings.catch_warnings():             # Python >= 3.12 warns about threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:                                # the worker: plan, send, never return
            code = 0
            try:
                os.close(r)
                _serve(keys, machine, build, self.claimed, w)
            except BaseException:                   # noqa: BLE001 - the caller plans instead
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self.machine = machine
        self.reader = threading.Thread(target=self._receive, args=(r,), daemon=True,
                                       name="ipukern-plan-receiver")
        self.reader.start()

    def take(self, key: PlanKey) -> ConvPlan | BuiltPass | None:
        i = self.index.get(key)
        if i is None:
            return None
        plan = self.plans.get(key)
        if plan is None:
            self.claimed[i] = 1
        return plan

    def _receive(self, fd: int) -> None:
        keys = list(self.index)
        with os.fdopen(fd, "rb") as f:
            while True:
                head = f.read(_HEADER.size)
                if len(head) < _HEADER.size:
                    return
                i, n = _HEADER.unpack(head)
                body = f.read(n)
                if len(body) < n:
                    return
                u = pickle.Unpickler(io.BytesIO(body))
                u.persistent_load = lambda _pid: self.machine
                self.plans[keys[i]] = u.load()

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.reader.join()
        self.claimed.close()


def _serve(keys: Sequence[PlanKey], machine: MachineSpec, build: frozenset, claimed: mmap.mmap,
           fd: int) -> None:
    """The worker's loop: plan (and build, for keys in ``build``) each key the caller has
    not claimed, and send the result."""
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for i, key in enumerate(keys):
        if claimed[i]:
            continue
        params, _m, bias, amp = key
        try:
            out = plan_conv(params, machine, bias=bias, available_memory_proportion=amp)
            if key in build:
                prog = build_conv_program(out)
                out = BuiltPass(out, tuple(prog.program.records), prog.device.memory.used)
        except Exception:                           # noqa: BLE001 - the caller raises it
            continue
        buf = io.BytesIO()
        p = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        p.persistent_id = lambda o: "machine" if o is machine else None
        p.dump(out)
        body = buf.getvalue()
        data = _HEADER.pack(i, len(body)) + body
        while data:
            data = data[os.write(fd, data):]


@contextmanager
def plan_worker(keys: Sequence[PlanKey], build: Sequence[PlanKey] = ()) -> Iterator[None]:
    """Plan ``keys`` (in the order the caller will need them) in a forked worker for the
    duration of the block; :func:`take` hands the plans over, and :func:`take_built` the
    passes of ``build`` (keys without bias, also listed in ``keys``), which the worker
    builds too. Does nothing when :func:`worker_enabled` or :func:`spare_core` says no,
    when a worker is already running, or when fewer than :data:`MIN_PLANS` keys remain.
    Every key must share one machine."""
    keys = list(dict.fromkeys(keys))
    worker = None
    with _ACTIVE_LOCK:
        if not _ACTIVE and len(keys) >= MIN_PLANS and worker_enabled() and spare_core():
            machines = {id(k[1]) for k in keys}
            if len(machines) == 1:
                worker = _Worker(keys, keys[0][1], frozenset(build))
                _ACTIVE.append(worker)
    try:
        yield
    finally:
        if worker is not None:
            with _ACTIVE_LOCK:
                _ACTIVE.remove(worker)
            worker.close()
