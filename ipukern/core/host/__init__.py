"""The host executor: how the CPU runs a simulated program fast. None of it changes a cycle.

The machine model (:mod:`ipukern.core.program`: steps, validation, costs) says what the IPU
does; this sub-package only decides how the host moves the bytes:

- :mod:`.run`: :func:`~ipukern.core.host.run.execute` runs a program's supersteps and picks
  the fused path for a pair of steps where that gives the same bytes;
- :mod:`.fused`: an exchange and the compute set after it in one compiled call, through the
  :class:`~ipukern.core.host.fused.FusableCodelet` hook a codelet's wing implements;
- :mod:`.fused_reduce`: a receive-only partials exchange folded into its reduction;
- :mod:`.shadow`: receive-only windows and weights landing in a host thread's shadow row.

The host thread count (:mod:`ipukern.core.threads`) stays beside the model: the model's
``run`` methods validate it, and a sub-package the model imports would close a circle.

Only the engine imports :mod:`.run`; the model never imports :mod:`.run`, :mod:`.fused`,
:mod:`.fused_reduce` or :mod:`.shadow`.
"""
