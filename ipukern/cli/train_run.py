"""``ipukern train MODEL --execute``: run one real training step on a simulated system.

The step is :func:`ipukern.run_training_step` on random data: ``replicas x micro_batch x
gradient_accumulation`` images of ``3 x S x S`` (``--image-size S``, default 32) drawn from
a standard normal with ``--seed`` (default 0) and labels uniform in ``0 .. --classes - 1``
(default 10), the model built with that image size and class count, its parameters from
``init_params(seed)``. Execution is float32 with float partials (``--dtype`` and
``--partials`` apply to estimates only).
``--tiles N`` cuts every chip of the system to N tiles (a smaller, faster what-if chip;
cycles are then that chip's).

Under ``mpiexec -n K`` (an MPI launcher sets ``PMI_SIZE`` / ``OMPI_COMM_WORLD_SIZE``) the
IPUs are spread over the K ranks, every rank computes its own IPUs, and rank 0 prints;
the printed loss and cycles are bitwise those of the same command in one process.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

from ..systems import get_system, run_training_step
from ._common import Progress, UsageError, progress_enabled

_MPI_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def _comm() -> Any:
    """MPI.COMM_WORLD when launched by mpiexec with more than one rank, else None."""
    if not any(int(os.environ.get(k, "1") or 1) > 1 for k in _MPI_ENV):
        return None
    from ..systems.mpi import comm_world
    comm = comm_world()
    return comm if comm.Get_size() > 1 else None


def _network(args: argparse.Namespace) -> Any:
    from ..nn.models import MODELS
    if args.model is None:
        raise ValueError("--execute needs a MODEL (not --costs)")
    if args.model not in MODELS:
        raise UsageError(f"unknown model {args.model!r}; models are {sorted(MODELS)}")
    try:
        return MODELS[args.model](image_size=args.image_size, num_classes=args.classes)
    except TypeError:
        raise ValueError(f"--execute runs image classifiers; {args.model!r} takes no image size") from None


def execute(args: argparse.Namespace) -> int:
    """The ``--execute`` path of ``ipukern train``."""
    for flag, v in (("--image-size", args.image_size), ("--classes", args.classes)):
        if v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    if args.epochs is not None:
        raise ValueError("--epochs applies to estimates, not to --execute")
    if getattr(args, "optimizer_state_dtype", "float32") != "float32":
        raise ValueError("--optimizer-state-dtype applies to estimates: --execute keeps float32 "
                         "optimizer state")
    system = get_system(args.system)
    if args.tiles is not None:
        if args.tiles < 1:
            raise ValueError(f"--tiles must be >= 1, got {args.tiles}")
        chip = system.chip.replace(n_tiles=args.tiles, name=f"{system.chip.name}-{args.tiles}t")
        system = system.replace(chip=chip, name=f"{system.name}-{args.tiles}t")
    net = _network(args)
    reps = system.n_ipus // args.ipus_per_replica if args.replicas is None else args.replicas
    n = reps * args.micro_batch * args.gradient_accumulation
    if n < 1 or n > 1 << 20:
        raise ValueError(f"a step of {n} samples is out of range (1 .. {1 << 20})")
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((n, 3, args.image_size, args.image_size), dtype=np.float32)
    labels = rng.integers(0, args.classes, n)
    pipeline = args.pipeline
    if pipeline not in (None, "auto"):
        pipeline = [s for s in pipeline.split(",") if s]
    comm = _comm()
    rank = 0 if comm is None else comm.Get_rank()
    # one line for the job: rank 0's (the other ranks' would garble the same terminal)
    bar = Progress(f"train --execute {args.model}", enabled=rank == 0 and progress_enabled(args))
    try:
        with bar:
            run = run_training_step(net, x, labels, net.init_params(args.seed), system=system, replicas=reps,
                                    ipus_per_replica=args.ipus_per_replica, pipeline=pipeline,
                                    gradient_accumulation=args.gradient_accumulation,
                                    micro_batch=args.micro_batch, optimizer=args.optimizer,
                                    comm=comm, bn_replica_group=args.bn_group)
    except Exception:
        if rank:
            return 1                       # rank 0 reports the (same) error in one line
        raise
    if rank == 0:
        ranks = 1 if comm is None else comm.Get_size()
        print(f"{args.model} ({args.image_size}x{args.image_size}, {args.classes} classes), {n} random "
              f"samples (seed {args.seed}), {ranks} process(es)")
        print(run.summary())
    return 0


def register_flags(t: argparse.ArgumentParser) -> None:
    """The execute-mode options of ``ipukern train``."""
    t.add_argument("--execute", action="store_true",
                   help="run one real training step on random data (float32) instead of estimating; "
                        "works under mpiexec -n K")
    t.add_argument("--image-size", type=int, default=32, help="with --execute: image side (default 32)")
    t.add_argument("--classes", type=int, default=10, help="with --execute: classes (default 10)")
    t.add_argument("--seed", type=int, default=0, help="with --execute: data and parameter seed (default 0)")
    t.add_argument("--tiles", type=int, default=None,
                   help="with --execute: cut every chip to this many tiles (faster what-if chip)")
