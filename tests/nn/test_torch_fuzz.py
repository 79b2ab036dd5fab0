"""A crash-isolated fuzz of ``from_torch`` (issue 36, "What to build"): random small traced
modules (tests/_support/torch_fuzz.py: add/sub/mul with alpha and scalars, in-place variants,
flatten/reshape/view/permute/transpose, pools with every argument, adaptive pools, dropout in
both modes, concatenation, slicing, convs, norms) imported and run on a 16-tile GC200 in a
spawned worker. Each case must equal torch (max error within 1e-4 of the largest output) or
be refused with UnsupportedTorchNode naming the node (or another clear ValueError/TypeError/
NotImplementedError); a wrong value, a crash, a hang (60 s) or any other exception fails the
case and prints the module's source as the reproducer.

Budget: ``CASES`` seeds (about 0.1-0.3 s each on 2 cores after the worker's start);
``IPUKERN_TORCH_FUZZ_CASES=N`` runs more (the seeds are the case numbers, so a failure
reproduces exactly). ``IPUKERN_FUZZ_STATS=1`` prints the outcomes (with ``-s``).
"""
from __future__ import annotations

import collections
import os

import pytest

pytest.importorskip("torch")

from tests._support.fuzz_worker import Worker  # noqa: E402
from tests._support.torch_fuzz import module_source  # noqa: E402

CASES = int(os.environ.get("IPUKERN_TORCH_FUZZ_CASES", "200"))
HANG = 60                   # s per case (the bound); the first also starts torch
STATS: collections.Counter = collections.Counter()


@pytest.fixture(scope="module")
def worker():
    w = Worker("tests._support.torch_fuzz", timeout=HANG)
    assert w.call("check", *_case(0)[1:], timeout=HANG + 60)[0] in ("ok", "allowed")  # warm
    yield w
    w.close()
    if os.environ.get("IPUKERN_FUZZ_STATS"):
        print("\ntorch fuzz outcomes:", dict(STATS))


def _case(seed: int) -> tuple[str, tuple, int]:
    src, shape = module_source(seed)
    return src, shape, seed


@pytest.mark.parametrize("seed", range(CASES))
def test_random_module_matches_torch_or_is_refused(worker, seed):
    src, shape, _ = _case(seed)
    status, kind, detail = worker.call("check", src, shape, seed)
    STATS[status if status != "allowed" else kind] += 1
    assert status in ("ok", "allowed"), (f"seed {seed}, input shape {shape}: {status} {kind}\n"
                                         f"{detail}\nreproducer:\n{src}")
    if status == "allowed":
        assert detail.strip(), f"seed {seed}: {kind} without a message\n{src}"
