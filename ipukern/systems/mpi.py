"""Off-chip exchanges between MPI ranks (mpi4py; ``pip install ipukern[mpi]`` brings an MPI).

Every rank holds the whole program; a :class:`~ipukern.systems.bsp.LinkExchange` is a list of
segments, one per (source IPU, destination IPU) pair, each a run of copies in a fixed order.
A segment whose two IPUs live on different ranks becomes one message: the sender packs the
segment's source bytes in table order into a contiguous buffer, the receiver unpacks them in
the same order. Receives are posted before sends, so no ordering between ranks can deadlock.
Buffers are allocated once per exchange and reused (memory is touched once).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import CopyTable

if TYPE_CHECKING:
    from .bsp import LinkExchange, SystemDevice

__all__ = ["abort_on_failure", "comm_world", "run_link_exchange"]


def comm_world() -> Any:
    """``MPI.COMM_WORLD``, or a clear error naming the extra to install. In a job of more
    than one rank, a rank that fails from now on aborts the whole job
    (:func:`abort_on_failure`)."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("MPI execution needs mpi4py and an MPI: pip install 'ipukern[mpi]'") from e
    comm = MPI.COMM_WORLD
    abort_on_failure(comm)
    return comm


_ABORT: dict[str, Any] = {}


def abort_on_failure(comm: Any) -> None:
    """Make a failing rank end the whole job (``comm.Abort(1)``) instead of leaving the other
    ranks blocked forever in a receive: an uncaught exception (its traceback printed first,
    prefixed by the rank) or ``sys.exit`` with a non-zero status (the rank's message
    printed). Installed once per process, for jobs of more than one rank; a rank that ends
    normally is not affected."""
    if _ABORT or comm is None or comm.Get_size() < 2:
        return
    import atexit
    import sys
    import traceback

    rank = comm.Get_rank()
    _ABORT.update(comm=comm, status=0)
    previous_hook, previous_exit = sys.excepthook, sys.exit

    def _abort(code: int) -> None:
        sys.stderr.flush()
        sys.stdout.flush()
        _ABORT["comm"].Abort(code)

    def excepthook(kind, value, tb):
        text = "".join(traceback.format_exception(kind, value, tb))
        sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.rstrip().split("\n")))
        sys.stderr.write(f"[rank {rank}] aborting the MPI job: this rank raised "
                         f"{kind.__name__}\n")
        _abort(1)

    def exit(status: Any = None) -> None:
        if status not in (None, 0):
            _ABORT["status"] = status
        previous_exit(status)

    def at_exit() -> None:
        status = _ABORT.get("status")
        if status in (None, 0):
            return
        if not isinstance(status, int):
            sys.stderr.write(f"[rank {rank}] {status}\n")
        sys.stderr.write(f"[rank {rank}] aborting the MPI job: this rank exited with status "
                         f"{status!r}\n")
        _abort(status if isinstance(status, int) and 0 < status < 256 else 1)

    sys.excepthook = excepthook
    sys.exit = exit
    atexit.register(at_exit)
    _ABORT["previous"] = (previous_hook, previous_exit)


def _buffers(lx: LinkExchange, dev: SystemDevice) -> dict[int, tuple[np.ndarray, CopyTable, CopyTable]]:
    """Per remote segment: (staging bytes, the table packing the segment's source bytes into
    them, the table unpacking them into the destinations), cached on the exchange per device."""
    cache = lx.__dict__.setdefault("_mpi_buffers", {})
    key = id(dev)
    if key not in cache:
        bufs = {}
        for k, (s, d, a, b) in enumerate(lx.segments):
            if dev.is_local(s) != dev.is_local(d):
                nb = lx.nbytes[a:b]
                rows = np.zeros(b - a, dtype=np.int32)
                pos = (np.cumsum(nb) - nb).astype(np.int64)
                bufs[k] = (np.empty((1, max(1, int(nb.sum()))), dtype=np.uint8),
                           CopyTable(lx.src_tile[a:b], lx.src_offset[a:b], rows, pos, nb,
                                     host_order="given"),
                           CopyTable(rows, pos, lx.dst_tile[a:b], lx.dst_offset[a:b], nb,
                                     host_order="given"))
        cache[key] = bufs
    return cache[key]


def run_link_exchange(dev: SystemDevice, lx: LinkExchange, n_threads: int) -> None:
    """Execute ``lx`` on this rank: local segments copy directly, remote ones are messages."""
    comm = dev.comm
    bufs = _buffers(lx, dev)
    recvs, sends = [], []
    for k, (s, d, _a, _b) in enumerate(lx.segments):
        if dev.is_local(d) and not dev.is_local(s):
            recvs.append((k, comm.Irecv(bufs[k][0], source=int(dev.owner[s]), tag=k)))
    for k, (s, d, _a, _b) in enumerate(lx.segments):
        if dev.is_local(s) and not dev.is_local(d):
            buf, pack, _ = bufs[k]
            pack.run(buf, dev.devices[s].arena.data, n_threads, check=True)
            sends.append(comm.Isend(buf, dest=int(dev.owner[d]), tag=k))
        elif dev.is_local(s) and dev.is_local(d):
            lx.tables[k].run(dev.devices[d].arena.data, dev.devices[s].arena.data, n_threads,
                             check=True)
    for k, req in recvs:
        req.Wait()
        d = lx.segments[k][1]
        buf, _, unpack = bufs[k]
        unpack.run(dev.devices[d].arena.data, buf, n_threads, check=True)
    for req in sends:
        req.Wait()
