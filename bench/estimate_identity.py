"""Check that two source trees give identical estimates, and time their cold estimates.

Speed work on the estimate path must not change a single plan, cycle or byte. This script
runs each tree in fresh processes (``PYTHONPATH`` set to the tree, its kernels built) and
compares, field by field: the full ``to_dict()`` and every superstep record of
``estimate_network`` for ResNet-50 (inference and training), MobileNetV2, EfficientNet-B0,
ResNeXt-50 and BERT-base (batch 16, both modes), the POD64 ``estimate_training`` breakdown,
and the plan description and program records of every distinct conv/matmul program the
estimates built. With ``--time N`` it then times the cold ResNet-50 estimates (a fresh
process each, the trees alternated back to back, N runs each) in CPU and wall seconds.

Usage::

    python bench/estimate_identity.py OLD_TREE NEW_TREE [--time 3] [--quick]

(e.g. ``OLD_TREE`` a ``git archive`` of main with its kernels copied in). Exit status 1 if
anything differs. Cold estimates use the forked planning worker (``ipukern.conv.host.prefetch``)
here whatever the load; ``IPUKERN_PLAN_WORKER=0`` in the environment checks the serial path.
"""
from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

DUMP = r'''
import dataclasses, pickle, sys
import numpy as np
import ipukern as ik
from ipukern.nn import convops

def rec(r):
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in dataclasses.asdict(r).items()}

def prof(p):
    return p.to_dict(), [rec(r) for r in p.supersteps]

out = {}
net = ik.models.resnet50()
for tr in (False, True):
    out[("resnet50", tr)] = prof(ik.estimate_network(net, batch=16, training=tr, allow_overflow=True))
try:
    e = ik.estimate_training(net, "POD64", micro_batch=20, gradient_accumulation=6, recompute=True)
    out["pod64"] = (e.step_seconds, e.breakdown, e.bottleneck, repr(e.info))
except (ValueError, MemoryError) as err:    # e.g. a stage that does not fit: same error
    out["pod64"] = (type(err).__name__, str(err))
if sys.argv[2] != "quick":
    for m in ("mobilenet_v2", "efficientnet_b0", "resnext50_32x4d", "bert_base"):
        for tr in (False, True):
            out[(m, tr)] = prof(ik.estimate_network(ik.models.MODELS[m](), batch=16, training=tr,
                                                    allow_overflow=True))
out["programs"] = {repr(k): (v.plan.describe(), [rec(r) for r in v.program.records])
                   for k, v in convops._PROGRAMS.items()}
# passes a planning worker built (only costed): the same plan and records
out["programs"].update({repr(k): (v.plan.describe(), [rec(r) for r in v.records])
                        for k, v in getattr(convops, "_PASSES", {}).items()})
with open(sys.argv[1], "wb") as f:
    pickle.dump(out, f)
'''

TIME = r'''
import sys, time
import ipukern as ik
net = ik.models.resnet50()
t, w = time.process_time(), time.perf_counter()
if sys.argv[1] == "pod64":
    try:
        ik.estimate_training(net, "POD64", micro_batch=20, gradient_accumulation=6, recompute=True)
    except (ValueError, MemoryError):
        pass
else:
    ik.estimate_network(net, batch=16, training=sys.argv[1] == "training", allow_overflow=True)
print(time.process_time() - t, time.perf_counter() - w)
'''


def _run(tree: str, code: str, *args: str, timeout: float = 3600) -> str:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    env.setdefault("IPUKERN_PLAN_WORKER", "1")     # the planning worker, whatever the load
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, timeout=timeout, check=False)
    if res.returncode:
        raise SystemExit(f"{tree}: {res.stderr.strip().splitlines()[-1:]}")
    return res.stdout


def dump(tree: str, quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.pkl")
        _run(tree, DUMP, path, "quick" if quick else "full")
        with open(path, "rb") as f:
            return pickle.load(f)


def differences(a: dict, b: dict) -> list[str]:
    out = [f"{k!r}: only in one tree" for k in set(a) ^ set(b)]
    for k in set(a) & set(b):
        if k == "programs":
            pa, pb = a[k], b[k]
            out += [f"program {p[:120]}: only in one tree" for p in set(pa) ^ set(pb)]
            out += [f"program {p[:120]}: plan or records differ" for p in set(pa) & set(pb)
                    if pa[p] != pb[p]]
        elif a[k] != b[k]:
            out.append(f"{k!r}: profile differs")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--time", type=int, default=0, metavar="N",
                    help="then time N cold runs of each ResNet-50 estimate per tree")
    ap.add_argument("--quick", action="store_true", help="ResNet-50 and POD64 only")
    args = ap.parse_args(argv)
    diff = differences(dump(args.old, args.quick), dump(args.new, args.quick))
    print("\n".join(diff) if diff else "IDENTICAL")
    if os.path.exists("/proc/loadavg"):
        with open("/proc/loadavg") as f:
            print("load average:", " ".join(f.read().split()[:3]))
    for what in ("inference", "training", "pod64") if args.time else ():
        for _ in range(args.time):
            for tree in (args.old, args.new):
                cpu, wall = map(float, _run(tree, TIME, what).split())
                print(f"{what:<9} {tree:<40} cpu {cpu:6.2f} s  wall {wall:6.2f} s")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
