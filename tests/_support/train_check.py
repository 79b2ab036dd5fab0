"""Multi-IPU training steps on a small CNN and a 4-IPU system of 16-tile chips, in one
process or under ``mpiexec -n K``: prints (rank 0) a JSON line with a hash of the updated
parameters and gradients, the loss and every cycle count. tests/systems/test_train_run.py
compares runs (``python -m tests._support.train_check [--mpi]`` from the tree's root)."""
import hashlib

import numpy as np

import ipukern as ik
from tests._support.mpi_check import main
from tests._support.nets import data, tiny_cnn

CHIP = ik.GC200.replace(n_tiles=16, name="GC200-16")
SYSTEM = ik.System.pod(4, CHIP)
#: (label, replicas, ipus_per_replica, gradient_accumulation, pipeline, batch-norm replica group,
#: recompute)
CONFIGS = [("dp4", 4, 1, 1, None, 1, None), ("dp2_pp2", 2, 2, 2, ["pool"], 1, None),
           ("pp4", 1, 4, 3, ["relu1", "res", "conv3"], 1, None),
           ("dp4_bn2", 4, 1, 1, None, 2, None), ("dp2_pp2_bn2", 2, 2, 2, ["pool"], 2, None),
           ("dp2_pp2_bn2_recompute", 2, 2, 2, ["pool"], 2, True)]


def digest(run) -> dict:
    h = hashlib.sha256()
    for d in (run.params, run.grads):
        for k in sorted(d):
            h.update(k.encode())
            h.update(np.ascontiguousarray(d[k]).tobytes())
    for k in sorted(run.state):
        for nm in sorted(run.state[k]):
            h.update(run.state[k][nm].tobytes())
    return {"sha": h.hexdigest(), "loss": run.loss.hex(), "cycles": run.cycles, "phases": run.phases,
            "stages": [[r["compute_cycles"], r["all_reduce_cycles"], r["optimizer_cycles"]]
                       for r in run.stages],
            "schedule": [[r["compute_cycles"], r["link_cycles"], r["sync_cycles"], r["bn_all_reduce_cycles"]]
                         for r in run.schedule]}


def run(comm=None) -> dict:
    net = tiny_cnn(bn=True)
    params = net.init_params(seed=1)
    x, labels = data(12)
    out = {}
    for label, reps, ipr, acc, pipe, bn, rc in CONFIGS:
        r = ik.run_training_step(net, x[:reps * acc * 2], labels[:reps * acc * 2], params, system=SYSTEM,
                                 replicas=reps, ipus_per_replica=ipr, gradient_accumulation=acc,
                                 pipeline=pipe, optimizer=ik.Optimizer("sgd_momentum", lr=0.05),
                                 comm=comm, bn_replica_group=bn, recompute=rc)
        out[label] = digest(r)
    # PopLibs' stable batch-norm statistics: two forward group all-reduces per batch norm
    stable = tiny_cnn(bn=True, bn_stable=True)
    r = ik.run_training_step(stable, x[:8], labels[:8], params, system=SYSTEM, replicas=4,
                             optimizer=ik.Optimizer("sgd_momentum", lr=0.05), comm=comm, bn_replica_group=2)
    out["dp4_bn2_stable"] = digest(r)
    return out


if __name__ == "__main__":
    main(run)
