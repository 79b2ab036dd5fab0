"""Host-speed machinery of the networks wing, which a reader of the model can skip.

None of it changes a cycle, a byte of the model or a result bit; it only makes the host
run faster or use less memory:

- :mod:`.buffers`: the residents' reusable host buffers (:data:`~.buffers.POOL`);
- :mod:`.arenas`: the host arenas a network's conv programs lease per run
  (:data:`~.arenas.ARENAS`);
- :mod:`.host_memory`: the max-batch search's host-memory guard (scoped caches per trial).

All are leaves the model calls into. Two more host-speed modules build on the model, so
they sit beside it (a sub-package the model imports cannot import the model back):
:mod:`ipukern.nn.arena_out` (a conv's output left in its program's arena for the next conv)
and :mod:`ipukern.nn.plan_keys` (the conv plans an estimate will ask for, for the planning
worker).
"""
