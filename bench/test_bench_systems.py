"""Group ``systems``: all-reduce of a 25 M-element fp32 gradient across 4 MPI ranks (one
simulated GC200 each) vs a bare ``MPI_Allreduce`` of the same buffer in the same run.

Target (issue 12): ratio_vs_mpi >= 0.5. The MPI work runs in ``mpiexec -n 4`` (script
``bench/mpi_allreduce.py``); with benchmarks disabled (the CI smoke run) the gradient is
1 M elements so the smoke run stays short.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="the systems benchmark needs the mpi extra")

HERE = Path(__file__).parent


def _mpiexec():
    cand = Path(sys.executable).parent / "mpiexec"
    return str(cand) if cand.exists() else shutil.which("mpiexec")


@pytest.mark.benchmark(group="systems")
def test_allreduce_4_ranks_vs_mpi_allreduce(benchmark):
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
