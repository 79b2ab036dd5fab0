"""Same-run A/B of ``run_network`` between two source trees.

    python bench/ab_network.py TREE_A TREE_B MODEL [ROUNDS] [--batch N] [--image-size N]

Each round starts one fresh process per tree, alternating A and B so that both see the same
machine load; each process imports ipukern from its tree (``PYTHONPATH``; the trees' kernels
must be built), runs one warm-up forward and times the best of three (fp32, the model's
``init_params(seed=0)``, a fixed random input). It prints every run, the best time of each tree,
the ratio A/B and the load average, and whether both trees gave the same output bits (sha1)
and the same simulated cycles; a host-only speed change must keep both. Exit status 1 when
they differ.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a")
    ap.add_argument("tree_b")
    ap.add_argument("model", help="a CNN of ik.models (e.g. resnet50, mobilenet_v2)")
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=224)
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.batch < 1 or a.image_size < 1:
        ap.error("rounds, --batch and --image-size must be positive")
    for tree in (a.tree_a, a.tree_b):
        if not os.path.isfile(os.path.join(tree, "ipukern", "__init__.py")):
            ap.error(f"{tree!r} is not an ipukern source tree (no ipukern/__init__.py)")
    res: dict[str, list[tuple[float, str, int]]] = {a.tree_a: [], a.tree_b: []}
    for i in range(a.rounds):
        for tree in (a.tree_a, a.tree_b):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            out = subprocess.run([sys.executable, "-c", CHILD, a.model, str(a.batch),
                                  str(a.image_size)], env=env, capture_output=True, text=True,
                                 cwd=os.path.abspath(tree), check=False)
            if out.returncode:
                print(f"{tree}: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 2
            t, h, cyc, f = out.stdout.split()
            res[tree].append((float(t), h, int(cyc)))
            print(f"round {i} {tree}: {float(t):.3f} s  out {h}  cycles {cyc}  ({f})", flush=True)
    ta = min(r[0] for r in res[a.tree_a])
    tb = min(r[0] for r in res[a.tree_b])
    same_bits = {r[1] for r in res[a.tree_a]} == {r[1] for r in res[a.tree_b]}
    same_cycles = {r[2] for r in res[a.tree_a]} == {r[2] for r in res[a.tree_b]}
    print(f"best A {ta:.3f} s  B {tb:.3f} s  A/B = {ta / tb:.3f}x  load {os.getloadavg()[0]:.2f}")
    print(f"same output bits: {same_bits}  same cycles: {same_cycles}")
    return 0 if same_bits and same_cycles else 1


if __name__ == "__main__":
    sys.exit(main())
