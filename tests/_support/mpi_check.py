"""Run collectives on 4 simulated IPUs, in one process or under ``mpiexec -n K``; print a
JSON line (on rank 0) with a hash of every output and the cycles. tests/systems/test_mpi.py
compares runs (``python -m tests._support.mpi_check [--mpi]`` from the tree's root)."""
import hashlib
import json
import sys

import numpy as np

import ipukern as ik
from ipukern.systems.mpi import comm_world

CHIP = ik.GC200.replace(n_tiles=16, name="GC200-16")


def run(comm=None) -> dict:
    out = {}
    for label, build, n, dtype in [("all_reduce", ik.all_reduce, 4, "float32"),
                                   ("all_reduce_f16", ik.all_reduce, 4, "float16"),
                                   ("hier", ik.all_reduce, 8, "float32"),
                                   ("broadcast", lambda d, t: ik.broadcast(d, t, root=1), 4, "float32"),
                                   ("all_gather", ik.all_gather, 4, "float32")]:
        system = ik.System.pod(n, CHIP, domain_ipus=4)
        dev = ik.SystemDevice(system, comm=comm)
        e = 1237
        t = dev.add_tensor("g", (e,), dtype, ik.TileMapping.linear(e, 16))
        rng = np.random.default_rng(7)
        for i in range(n):
            dev.write(t, i, rng.standard_normal(e).astype(dtype))
        prof = dev.run(build(dev, t))
        h = hashlib.sha256()
        for i in range(n):
            h.update(dev.read(t, i).tobytes())
        out[label] = {"sha": h.hexdigest(), "cycles": prof.total_cycles,
                      "steps": [r.total_cycles for r in prof.supersteps]}
    return out


def main(run) -> None:
    """``run(comm)`` in one process, or under MPI with ``--mpi``; rank 0 prints its JSON."""
    comm = comm_world() if "--mpi" in sys.argv else None
    res = run(comm)
    if comm is None or comm.Get_rank() == 0:
        print(json.dumps(res, sort_keys=True))


if __name__ == "__main__":
    main(run)
