"""A job whose rank 1 fails (``raise`` or ``exit`` as argv[1]) while rank 0 waits for a message
it will never get: tests/systems/test_mpi_abort.py checks the failure ends the whole job."""
import sys

import numpy as np

from ipukern.systems.mpi import comm_world

comm = comm_world()
if comm.Get_rank() == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("rank 1 failed on purpose")
    sys.exit("rank 1 gave up on purpose")
comm.Recv(np.zeros(4), source=1)     # blocks forever unless the job is aborted
print("rank 0 was never released")
