"""The same collectives in one process and under ``mpiexec -n 2 / -n 4`` (oversubscribed
on small CI machines): bitwise-identical outputs and identical cycles.

mpi4py and the ``mpich`` wheel come with the test extra (``pip install -e .[test]``); the
test skips only where they are not installed.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="MPI tests need the mpi extra: pip install 'ipukern[mpi]'")

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def _mpiexec():
    cand = Path(sys.executable).parent / "mpiexec"
    return str(cand) if cand.exists() else shutil.which("mpiexec")


@pytest.fixture(scope="module")
def in_process():
    sys.path.insert(0, str(HERE))
    try:
        import mpi_check
        return json.loads(json.dumps(mpi_check.run()))
    finally:
        sys.path.remove(str(HERE))


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


@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_matches_in_process(ranks, in_process):
    got = json.loads(mpirun(ranks, str(HERE / "mpi_check.py"), "--mpi")[-1])
    assert got == in_process
