"""Cold-estimate CPU times of two source trees, same run: the planner bench's conv layers
(``planner_layers.py``) and the matmul bench's shapes, each tree in fresh processes, the
trees alternated.

Each process times every estimate ``--best`` times with the plan caches cleared before each
(``ik.clear_plan_cache()``: every registered memo is cold) and reports the best, in CPU
seconds of the process (on a shared machine wall times mostly measure the load). The
script prints each round, then per estimate the median over rounds of both trees and
their ratio, and the load average; it checks that both trees give the same cycles.

Usage::

    python bench/cold_estimates.py OLD_TREE NEW_TREE [--rounds 5] [--best 7]

(e.g. ``OLD_TREE`` a ``git archive`` of main with its kernels copied in). Exit status 1 if
the trees' cycles differ.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, time
import ipukern as ik
from planner_layers import LAYERS
best = int(sys.argv[1])
assert ik.__file__.startswith(sys.argv[2]), f"imported {ik.__file__}, not the tree's"
MATMULS = {"mm2048_fp32": ((2048, 2048), (2048, 2048), "float32"),
           "bert_ffn_fp16": ((8192, 1024), (1024, 4096), "float16"),
           "batched1472_fp16": ((1472, 128, 16), (1472, 16, 16), "float16"),
           "mm512_fp16": ((512, 512), (512, 512), "float16")}
def conv(x, w, pad, g):
    return lambda: ik.estimate_conv2d(x, w, padding=pad, groups=g)
def mm(a, b, dt):
    return lambda: ik.estimate_matmul(a, b, dtype=dt)
calls = {k: conv(*v) for k, v in LAYERS.items()} | {k: mm(*v) for k, v in MATMULS.items()}
out = {}
for name, f in calls.items():
    f()                                   # imports and first-call costs out of the timing
    times = []
    for _ in range(best):
        ik.clear_plan_cache()
        t = time.process_time()
        prof = f()
        times.append(time.process_time() - t)
    out[name] = (min(times), prof.total_cycles)
print(json.dumps(out))
'''


def _run(tree: str, best: int) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.abspath(tree)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, here]))
    # run in the tree: ``python -c`` puts the working directory first on the path
    res = subprocess.run([sys.executable, "-c", CHILD, str(best), tree], env=env, cwd=tree,
                         capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode:
        raise SystemExit(f"{tree}: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _load() -> str:
    if not os.path.exists("/proc/loadavg"):
        return "n/a"
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--best", type=int, default=7)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.best < 1:
        ap.error("--rounds and --best must be >= 1")
    print("load average at start:", _load())
    runs: dict[str, list[dict]] = {args.old: [], args.new: []}
    for r in range(args.rounds):
        for tree in (args.old, args.new):
            got = _run(tree, args.best)
            runs[tree].append(got)
            print(f"round {r + 1} {tree}: "
                  + " ".join(f"{k}={v[0] * 1e3:.1f}" for k, v in got.items()))
    print("load average at end:", _load())
    old, new = runs[args.old], runs[args.new]
    same = all(o[k][1] == n[k][1] for o, n in zip(old, new) for k in o)
    print(f"{'estimate':<18} {'old ms':>8} {'new ms':>8} {'ratio':>6}  (medians, CPU)")
    for k in old[0]:
        a = statistics.median(o[k][0] for o in old) * 1e3
        b = statistics.median(n[k][0] for n in new) * 1e3
        print(f"{k:<18} {a:8.1f} {b:8.1f} {a / b:5.2f}x")
    print("cycles identical" if same else "CYCLES DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
