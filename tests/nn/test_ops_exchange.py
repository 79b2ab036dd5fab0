"""nn's gather and loss exchanges are costed by the one exchange rule, cost.exchange_cycles,
on every fabric (they once inlined a x16 rate that clamped slow what-if fabrics)."""
from __future__ import annotations

import pytest

import ipukern as ik
from ipukern.core import cost
from ipukern.dtypes import DTYPES
from ipukern.nn.ops import gather_plan, loss_plan


def _exchange(plan):
    return next(r for r in plan.records if r.category == "exchange")


@pytest.mark.parametrize("bw", [None, 8e12, 5e10, 1e9])
def test_gather_and_loss_exchanges_use_the_exchange_rule(bw):
    m = ik.GC200 if bw is None else ik.machine.with_exchange_bandwidth(ik.GC200, bw)
    g = gather_plan(m, (4, 64), vocab=1000, dim=128, dtype="float16")
    x = _exchange(g)
    n = g.output.elems_per_tile(m.n_tiles)
    assert x.exchange_cycles == cost.exchange_cycles(int(n.max()) * DTYPES["float16"].itemsize, m,
                                                     with_overhead=True)
    lp = loss_plan(m, (256, 1000), "float32")
    x = _exchange(lp)
    assert x.exchange_cycles == cost.exchange_cycles(x.bytes_exchanged, m, with_overhead=True)


def test_slow_fabrics_are_not_clamped():
    slow = [ik.machine.with_exchange_bandwidth(ik.GC200, bw) for bw in (1e9, 1e11)]
    a, b = (_exchange(loss_plan(m, (256, 1000), "float32")).exchange_cycles for m in slow)
    assert a > 10 * b
