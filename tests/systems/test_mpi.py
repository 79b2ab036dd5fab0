"""The same collectives in one process and under ``mpiexec -n 2 / -n 4`` (oversubscribed
on small CI machines): bitwise-identical outputs and identical cycles.

mpi4py and the ``mpich`` wheel come with the test extra (``pip install -e .[test]``); the
test skips only where they are not installed.
"""
import json

import pytest

pytest.importorskip("mpi4py", reason="MPI tests need the mpi extra: pip install 'ipukern[mpi]'")

from tests._support.mpi_check import run as run_collectives  # noqa: E402
from tests._support.mpi import mpirun  # noqa: E402


@pytest.fixture(scope="module")
def in_process():
    return json.loads(json.dumps(run_collectives()))


@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_matches_in_process(ranks, in_process):
    got = json.loads(mpirun(ranks, "-m", "tests._support.mpi_check", "--mpi")[-1])
    assert got == in_process
