"""No public argument of the low-level exchange API can make the process die (issue 36,
item 2): ``validate=False`` skips only the overlap checks, never the bounds the host kernels
rely on. Each case once killed the interpreter (SIGSEGV/SIGABRT), so each runs in a fresh
interpreter and must end with a clean ExchangeError."""
from __future__ import annotations

import pytest

from tests._support.isolated import run_isolated

BIG = 2**63 - 8

CASES = {
    "device, negative source offset": "dev.exchange([0], [-64], [1], [0], [8], validate=False)",
    "device, near-2**63 source offset": f"dev.exchange([0], [{BIG}], [1], [0], [16], validate=False)",
    "device, near-2**63 destination offset":
        f"dev.exchange([0], [0], [1], [{BIG}], [16], validate=False)",
    "device, negative destination tile": "dev.exchange([0], [0], [-3], [0], [8], validate=False)",
    "Exchange, negative destination offset":
        "Exchange(dev.machine, [0], [0], [1], [-1 << 40], [8], validate=False)",
    "Exchange, destination tile past the end":
        "Exchange(dev.machine, [0], [0], [1 << 40], [0], [8], validate=False)",
    "Exchange, negative size": "Exchange(dev.machine, [0], [0], [1], [0], [-8], validate=False)",
    "Exchange, columns of different lengths":
        "Exchange(dev.machine, [0, 1], [0], [1], [0], [8], validate=False)",
    # found by tests/test_fuzz.py: a bare OverflowError (the checked path named the column)
    "device, size of 2**63": "dev.exchange([0, 0], [0, 0], [0, 0], [0, 0], [0, 2**63], validate=False)",
    "device, offset of 2**64": "dev.exchange([0], [2**64], [1], [0], [8], validate=False)",
    "device, fractional size": "dev.exchange([0], [0], [1], [0], [5.5], validate=False)",
}


@pytest.mark.parametrize("build", CASES.values(), ids=list(CASES))
def test_trusted_exchange_keeps_its_bounds_checks(build):
    out = run_isolated(f"""
        dev = ik.Device(ik.GC200)
        dev.alloc("x", np.full(ik.GC200.n_tiles, 64))

        def attempt():
            ex = {build}
            dev.run(dev.program([Superstep("s", exchange=ex)]))

        expect(attempt, ExchangeError, "")
    """)
    assert "REJECTED: ExchangeError" in out
