"""A data-parallel training step of a small CNN (ResNet-8, 4 replicas of one simulated IPU
each on an IPU-M2000) in one process or under ``mpiexec -n R``: prints one JSON line (rank 0)
with the best wall time, the simulated cycles and a hash of the updated parameters
(bench/test_bench_systems.py compares it with the in-process run)."""
import argparse
import hashlib
import json
import time

import numpy as np

import ipukern as ik


def setup(image_size: int, tiles: int | None, micro_batch: int):
    system = ik.get_system("M2000")
    if tiles:
        system = system.replace(chip=system.chip.replace(n_tiles=tiles, name=f"GC200-{tiles}t"))
    net = ik.models.resnet8(image_size=image_size, num_classes=10)
    n = 4 * micro_batch
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 3, image_size, image_size), dtype=np.float32)
    labels = rng.integers(0, 10, n)
    return net, x, labels, net.init_params(0), system


def step(net, x, labels, params, system, comm=None):
    return ik.run_training_step(net, x, labels, params, system=system, replicas=4,
                                optimizer="sgd_momentum", comm=comm)


def digest(run) -> str:
    h = hashlib.sha256()
    for k in sorted(run.params):
        h.update(run.params[k].tobytes())
    return h.hexdigest()


def main():
    from ipukern.systems.mpi import comm_world
    ap = argparse.ArgumentParser()
    ap.add_argument("--image-size", type=int, default=16)
    ap.add_argument("--tiles", type=int, default=0)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="timed steps after the warm-up (0: none)")
    args = ap.parse_args()
    comm = comm_world()
    case = setup(args.image_size, args.tiles or None, args.micro_batch)
    run = step(*case, comm=comm)                  # warm-up: plans, numba, page faults
    best = float("inf")
    for _ in range(args.repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        run = step(*case, comm=comm)
        comm.Barrier()
        best = min(best, time.perf_counter() - t0)
    best = comm.allreduce(best, op=__import__("mpi4py").MPI.MAX) if args.repeat else None
    if comm.Get_rank() == 0:
        print(json.dumps({"ranks": comm.Get_size(), "seconds": best, "cycles": run.cycles,
                          "loss": run.loss, "sha": digest(run)}))


if __name__ == "__main__":
    main()
