"""Runs under ``mpiexec`` for the systems tests: this tree first on the worker's path, one
thread per rank; skips where there is no mpiexec."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mpiexec():
    cand = Path(sys.executable).parent / "mpiexec"
    return str(cand) if cand.exists() else shutil.which("mpiexec")


def mpirun(ranks: int, *args: str) -> list[str]:
    """``mpiexec -n ranks python args...`` (this tree first on the path, one thread per
    rank); its stdout lines. Skips without an mpiexec."""
    exe = _mpiexec()
    if exe is None:
        pytest.skip("no mpiexec on PATH (install the mpich wheel: pip install 'ipukern[mpi]')")
    env = dict(os.environ, IPUKERN_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([exe, "-n", str(ranks), sys.executable, *args], capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.splitlines()
