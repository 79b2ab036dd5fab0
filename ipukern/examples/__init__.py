"""Worked examples, installed with the package so they can be run and read anywhere.

- ``python -m ipukern.examples.stencil [size] [iterations]``: a 3x3 blur over all 1472 tiles
  with a halo exchange, bit-exact against NumPy.
- ``python -m ipukern.examples.allreduce [n_per_tile]``: an all-reduce whose every phase's
  cycles are derived by hand and checked.
- ``python -m ipukern.examples.custom_matmul_vertex``: a user vertex swapped into a matmul
  and into :func:`ipukern.matmul`.

Each module's ``main(...)`` returns its results (and checks them) so tests and notebooks can
call it with small sizes. The source is at ``ipukern/examples/`` in the package
(``python -c "import ipukern.examples as e; print(e.__path__[0])"``).
"""
