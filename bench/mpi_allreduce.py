"""Under ``mpiexec -n R``: ipukern's all-reduce of an fp32 gradient (one simulated GC200 per
rank, the tensor spread over all 1472 tiles) vs a bare ``MPI_Allreduce`` of the same buffer,
in the same run. Prints one JSON line on rank 0 (bench/test_bench_systems.py reads it)."""
import argparse
import json
import time

import numpy as np

import ipukern as ik
from ipukern.systems.mpi import comm_world


def best(fn, comm, repeat):
    fn()                                   # warm-up: page faults, buffers
    out = float("inf")
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        comm.Barrier()
        out = min(out, time.perf_counter() - t0)
    return comm.allreduce(out, op=__import__("mpi4py").MPI.MAX)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elems", type=int, default=25_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    comm = comm_world()
    n = comm.Get_size()
    dev = ik.SystemDevice(ik.System.pod(n if n <= 2 else 4 * -(-n // 4)), n, comm=comm)
    e = args.elems
    t = dev.add_tensor("grad", (e,), "float32", ik.TileMapping.linear(e, ik.GC200.n_tiles))
    x = np.random.default_rng(comm.Get_rank()).standard_normal(e).astype(np.float32)
    for i in dev.local_ipus:
        dev.write(t, i, x)
    prog = ik.all_reduce(dev, t)

    def ours():
        dev.run(prog)

    recv = np.empty_like(x)

    def bare():
        comm.Allreduce(x, recv)

    t_ours = best(ours, comm, args.repeat)
    t_mpi = best(bare, comm, args.repeat)
    # check: after warm-up + repeat runs the tensor was all-reduced 1 + repeat times, so
    # compare one fresh run against MPI's sum
    for i in dev.local_ipus:
        dev.write(t, i, x)
    ours()
    comm.Allreduce(x, recv)
    i = dev.local_ipus[0]
    got = dev.devices[i].read(t.on(i))   # this rank's IPU (SystemDevice.read is collective)
    ok = bool(np.allclose(got, recv, rtol=1e-4, atol=1e-4))
    prof = dev.run(prog, "estimate")
    if comm.Get_rank() == 0:
        print(json.dumps({"ranks": n, "elems": e, "bytes": 4 * e, "ipukern_s": t_ours,
                          "mpi_allreduce_s": t_mpi,
                          "ratio_vs_mpi": t_mpi / t_ours, "matches_mpi": ok,
                          "simulated_cycles": prof.total_cycles, "simulated_s": prof.seconds}))


if __name__ == "__main__":
    main()
