"""Same-run A/B of ``run_network`` between two source trees.

    python bench/ab_network.py TREE_A TREE_B MODEL [ROUNDS] [--batch N] [--image-size N]
                               [--first-run {cold,warm}]

Each round starts one fresh process per tree, alternating A and B so that both see the same
machine load; each process imports ipukern from its tree (``PYTHONPATH``; the trees' kernels
must be built), runs one warm-up forward and times the best of three (fp32, the model's
``init_params(seed=0)``, a fixed random input). It prints every run, the best time of each tree,
the ratio A/B and the load average, and whether both trees gave the same output bits (sha1)
and the same simulated cycles; a host-only speed change must keep both. Exit status 1 when
they differ.

``--first-run cold`` times the first ``run_network`` of each fresh process instead (planning,
building, copy tables, first touch: what a user waits for), without the disk cache
(``cache=False``); ``--first-run warm`` with the disk cache, each tree reading its own
``IPUKERN_CACHE_DIR`` that a first process of that tree filled before the rounds. Both print
the process CPU seconds of that call too (``time.process_time``, every thread): on a loaded
host the wall time is mostly waiting for a core.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r'''
import hashlib, sys, time
import numpy as np
import ipukern as ik
model, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
net = ik.models.MODELS[model](image_size=size)
p = net.init_params(seed=0)
x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
r = ik.run_network(net, x, p, allow_overflow=True)
best = float("inf")
for _ in range(3):
    t = time.perf_counter()
    r = ik.run_network(net, x, p, allow_overflow=True)
    best = min(best, time.perf_counter() - t)
print(best, hashlib.sha1(r.output.tobytes()).hexdigest()[:12], r.profile.total_cycles, ik.__file__)
'''

#: the first run of a fresh process: wall and CPU seconds of the first call
FIRST = r'''
import hashlib, sys, time
import numpy as np
import ipukern as ik
from ipukern.nn.host import table_cache
model, batch, size, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "warm"
net = ik.models.MODELS[model](image_size=size)
p = net.init_params(seed=0)
x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
t, c = time.perf_counter(), time.process_time()
r = ik.run_network(net, x, p, allow_overflow=True, cache=cache)
t, c = time.perf_counter() - t, time.process_time() - c
table_cache.flush()
print(t, hashlib.sha1(r.output.tobytes()).hexdigest()[:12], r.profile.total_cycles, ik.__file__, c)
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a")
    ap.add_argument("tree_b")
    ap.add_argument("model", help="a CNN of ik.models (e.g. resnet50, mobilenet_v2)")
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--first-run", choices=("cold", "warm"), default=None,
                    help="time each fresh process's first run_network (see the module doc)")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.batch < 1 or a.image_size < 1:
        ap.error("rounds, --batch and --image-size must be positive")
    for tree in (a.tree_a, a.tree_b):
        if not os.path.isfile(os.path.join(tree, "ipukern", "__init__.py")):
            ap.error(f"{tree!r} is not an ipukern source tree (no ipukern/__init__.py)")
    res: dict[str, list[tuple[float, str, int, float]]] = {a.tree_a: [], a.tree_b: []}
    caches = {}
    if a.first_run == "warm":        # each tree's own disk cache, filled by a first process
        caches = {tree: tempfile.mkdtemp(prefix="ipukern-ab-cache-") for tree in res}
    try:
        return _rounds(a, res, caches)
    finally:
        for d in caches.values():
            shutil.rmtree(d, ignore_errors=True)


def _rounds(a: argparse.Namespace, res: dict[str, list[tuple[float, str, int, float]]],
            caches: dict[str, str]) -> int:
    """The alternating rounds and the summary (``main``'s exit status)."""
    for tree in caches:
        if _child(tree, a, caches) is None:
            return 2
    for i in range(a.rounds):
        for tree in (a.tree_a, a.tree_b):
            got = _child(tree, a, caches)
            if got is None:
                return 2
            t, h, cyc, f, *cpu = got.split()
            res[tree].append((float(t), h, int(cyc), float(cpu[0]) if cpu else float("nan")))
            extra = f"  cpu {float(cpu[0]):.3f} s" if cpu else ""
            print(f"round {i} {tree}: {float(t):.3f} s{extra}  out {h}  cycles {cyc}  ({f})",
                  flush=True)
    ta = min(r[0] for r in res[a.tree_a])
    tb = min(r[0] for r in res[a.tree_b])
    same_bits = {r[1] for r in res[a.tree_a]} == {r[1] for r in res[a.tree_b]}
    same_cycles = {r[2] for r in res[a.tree_a]} == {r[2] for r in res[a.tree_b]}
    print(f"best A {ta:.3f} s  B {tb:.3f} s  A/B = {ta / tb:.3f}x  load {os.getloadavg()[0]:.2f}")
    if a.first_run:
        ca, cb = (min(r[3] for r in res[t]) for t in (a.tree_a, a.tree_b))
        print(f"best CPU A {ca:.3f} s  B {cb:.3f} s  A/B = {ca / cb:.3f}x")
    print(f"same output bits: {same_bits}  same cycles: {same_cycles}")
    return 0 if same_bits and same_cycles else 1


def _child(tree: str, a: argparse.Namespace, caches: dict[str, str]) -> str | None:
    """One fresh process of ``tree``: its printed line, or None (its error printed)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    if tree in caches:
        env["IPUKERN_CACHE_DIR"] = caches[tree]
    code, extra = (CHILD, []) if a.first_run is None else (FIRST, [a.first_run])
    out = subprocess.run([sys.executable, "-c", code, a.model, str(a.batch), str(a.image_size),
                          *extra], env=env, capture_output=True, text=True,
                         cwd=os.path.abspath(tree), check=False)
    if out.returncode:
        print(f"{tree}: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return out.stdout


if __name__ == "__main__":
    sys.exit(main())
