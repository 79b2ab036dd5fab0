"""A rank that fails ends the whole MPI job with its message (issue 36, item 6): before, the
other rank stayed blocked in its receive forever."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="MPI tests need the mpi extra: pip install 'ipukern[mpi]'")

from tests._support.mpi import ROOT, _mpiexec  # noqa: E402


@pytest.mark.parametrize("how, text", [("raise", "RuntimeError: rank 1 failed on purpose"),
                                       ("exit", "rank 1 gave up on purpose")])
def test_a_failing_rank_aborts_the_job(how, text):
    exe = _mpiexec()
    if exe is None:
        pytest.skip("no mpiexec on PATH")
    env = dict(os.environ, IPUKERN_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([exe, "-n", "2", sys.executable, "-m", "tests._support.mpi_fail", how],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert text in out and "[rank 1] aborting the MPI job" in out, out
    assert "never released" not in out
