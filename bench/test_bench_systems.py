"""Group ``systems``: all-reduce of a 25 M-element fp32 gradient across 4 MPI ranks (one
simulated GC200 each) vs a bare ``MPI_Allreduce`` of the same buffer in the same run; and the
host time of ``estimate_training(resnet50, "POD64")``, cold and warm.

Targets (issue 12): ratio_vs_mpi >= 0.5; estimate_training(resnet50, POD64) cold <= 3 s,
warm <= 100 ms (the 64 replicas share one plan). The MPI work runs in ``mpiexec -n 4`` (script
``bench/mpi_allreduce.py``); with benchmarks disabled (the CI smoke run) the gradient is
1 M elements so the smoke run stays short.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ipukern as ik

from timing import measured_seconds

HERE = Path(__file__).parent


def _mpiexec():
    cand = Path(sys.executable).parent / "mpiexec"
    return str(cand) if cand.exists() else shutil.which("mpiexec")


@pytest.mark.benchmark(group="systems")
def test_allreduce_4_ranks_vs_mpi_allreduce(benchmark):
    pytest.importorskip("mpi4py", reason="the all-reduce benchmark needs the mpi extra")
    exe = _mpiexec()
    if exe is None:
        pytest.skip("no mpiexec (pip install 'ipukern[mpi]')")
    elems = 1_000_000 if getattr(benchmark, "disabled", False) else 25_000_000
    env = dict(os.environ, IPUKERN_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    cmd = [exe, "-n", "4", sys.executable, str(HERE / "mpi_allreduce.py"), "--elems", str(elems)]
    out = {}

    def run():
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        out.update(json.loads(res.stdout.strip().splitlines()[-1]))

    benchmark.pedantic(run, rounds=1, iterations=1)
    assert out["matches_mpi"]
    benchmark.extra_info.update(out, baseline="bare MPI_Allreduce of the same buffer, same run",
                                target_ratio=0.5)


@pytest.mark.benchmark(group="systems")
def test_estimate_training_resnet50_pod64(benchmark):
    """Cold (empty plan caches) and warm ``estimate_training``: micro-batch 20, 6 micro-batches
    accumulated (the configuration of the CLI example), with recomputation (without it the
    model's stash of 20 images does not fit one IPU). Same-run baseline: the one-chip
    ``estimate_network(training=True)`` it is composed from, cold."""
    size, mb = (224, 20) if not benchmark.disabled else (32, 1)
    net = ik.models.resnet50(image_size=size)

    def estimate():
        # allow_overflow: the one-chip per-tile memory model says micro-batch 20 does not fit a
        # GC200 even with recomputation (docs/systems.rst); the timing is the same
        return ik.estimate_training(net, "POD64", micro_batch=mb, gradient_accumulation=6,
                                    recompute=True, allow_overflow=True)

    def cold():
        ik.nn.clear_network_caches()
        ik.clear_plan_cache()
        t0 = time.perf_counter()
        out = estimate()
        return out, time.perf_counter() - t0

    first, cold_s = cold()
    ik.nn.clear_network_caches()
    ik.clear_plan_cache()
    t0 = time.perf_counter()
    ik.estimate_network(net, mb, machine=ik.get_system("POD64").chip, training=True,
                        recompute=None, optimizer=None, allow_overflow=True)
    chip_s = time.perf_counter() - t0
    warm = benchmark(estimate)
    assert warm.step_seconds == first.step_seconds and warm.replicas == 64
    warm_s = measured_seconds(benchmark)
    benchmark.extra_info.update({
        "micro_batch": mb, "gradient_accumulation": 6, "image_size": size,
        "cold_seconds": cold_s, "target_cold_seconds": 3.0, "target_warm_seconds": 0.1,
        "meets_cold_target": cold_s <= 3.0,
        "meets_warm_target": (warm_s <= 0.1) if warm_s else None,
        "baseline": "one-chip estimate_network(training=True), cold, same run",
        "baseline_seconds": chip_s, "ratio_cold_vs_one_chip": cold_s / chip_s,
        "samples_per_second": warm.samples_per_second})


@pytest.mark.benchmark(group="systems")
def test_data_parallel_training_step_in_process_and_mpi(benchmark, baseline):
    """ResNet-8 on 4 simulated GC200s of an IPU-M2000 (4 replicas, micro-batch 2): the
    in-process step (benchmarked) vs the same step under ``mpiexec -n 4`` (one IPU per
    rank) and vs one IPU running the whole batch (``train_step``), all in the same run."""
    import mpi_train_step as mts

    from ipukern.nn import train_step
    from ipukern.systems.train_run import with_loss
    pytest.importorskip("mpi4py", reason="the MPI training benchmark needs the mpi extra")
    exe = _mpiexec()
    if exe is None:
        pytest.skip("no mpiexec (pip install 'ipukern[mpi]')")
    smoke = getattr(benchmark, "disabled", False)
    size, tiles = (8, 16) if smoke else (16, 0)
    net, x, labels, params, system = case = mts.setup(size, tiles or None, 2)
    run = benchmark.pedantic(lambda: mts.step(*case), rounds=1 if smoke else 2, iterations=1,
                             warmup_rounds=0 if smoke else 1)
    env = dict(os.environ, IPUKERN_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([exe, "-n", "4", sys.executable, str(HERE / "mpi_train_step.py"), "--image-size",
                          str(size), "--tiles", str(tiles), "--repeat", "0" if smoke else "2"],
                         capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    mpi = json.loads(res.stdout.strip().splitlines()[-1])
    assert mpi["sha"] == mts.digest(run) and mpi["cycles"] == run.cycles   # bitwise the same step
    if smoke:
        return
    full = with_loss(net)           # the zoo's ResNet-8 outputs logits; the step adds the loss
    one_ipu = baseline(lambda: train_step(full, x, labels, params, optimizer="sgd_momentum",
                                          machine=system.chip), repeat=1, min_time=0)
    in_process = benchmark.stats.stats.min
    benchmark.extra_info.update(
        in_process_s=in_process, mpi_4_ranks_s=mpi["seconds"], mpi_speedup=in_process / mpi["seconds"],
        one_ipu_train_step_s=one_ipu, ratio_vs_one_ipu=one_ipu / in_process,
        simulated_cycles=run.cycles, simulated_phases=run.phases,
        baseline="same step in one process / one IPU running the 4x batch (train_step), same run")
