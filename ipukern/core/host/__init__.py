"""The host executor: how the CPU runs a simulated program fast. None of it changes a cycle.

The machine model (:mod:`ipukern.core.program`: steps, validation, costs) says what the IPU
does; this sub-package only decides how the host moves the bytes:

- :mod:`.run`: :func:`~ipukern.core.host.run.execute` runs a program's supersteps and picks
  the fused path for a pair of steps where that gives the same bytes;
- :mod:`.fused`: an exchange and the compute set after it in one compiled call, through the
  :class:`~ipukern.core.host.fused.FusableCodelet` hook a codelet's wing implements;
- :mod:`.fused_reduce`: a receive-only partials exchange folded into its reduction;
- :mod:`.shadow`: receive-only windows and weights landing in a host thread's shadow row;
- :mod:`.threads`: the host thread count (a leaf the model's ``run`` methods validate with).

Only the engine imports :mod:`.run`; the model never imports :mod:`.run`, :mod:`.fused`,
:mod:`.fused_reduce` or :mod:`.shadow`. This file imports nothing, so importing
:mod:`.threads` loads no executor.
"""
