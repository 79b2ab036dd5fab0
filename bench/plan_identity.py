"""Check that a planner change leaves every plan as it was: the chosen plan of every bench
layer and of every conv/matmul pass the model zoo plans.

Planner speed work (pruning, bounds, vectorised scoring) must find what the search found
before. ``record`` plans, cold (caches cleared before each), the planner bench's layers
(bench/test_bench_planner.py) and every pass :func:`ipukern.nn.plan_keys.network_plan_keys`
lists for each model of ``ik.models.MODELS`` at batch 16: inference (BN folded) and
training (forward, backward-data, weight-update and both matmul orientations), in float16
and float32, and writes each plan's ``describe()`` and ``to_dict()`` (cycles, bytes,
breakdown) or its error, as JSON. ``compare`` reads two such files and prints every
difference (exit status 1 if any).

Usage::

    PYTHONPATH=OLD_TREE python bench/plan_identity.py record old.json
    PYTHONPATH=NEW_TREE python bench/plan_identity.py record new.json
    PYTHONPATH=NEW_TREE python bench/plan_identity.py compare old.json new.json

About 2,800 distinct passes; 65-115 s of planning on one core (main 5dbd548 vs this tree,
2026-12-03: 2,845 plans compared, 0 differ).
"""
from __future__ import annotations

import json
import sys
import time

import ipukern as ik
from ipukern.conv import ConvParams, plan_conv
from ipukern.nn.layers import plan_context
from ipukern.nn.plan_keys import network_plan_keys

from planner_layers import LAYERS


def plan_keys() -> list[tuple]:
    """(params, machine, bias, amp) of the bench layers, then of the zoo's passes, once each."""
    keys = [(ConvParams.from_shapes(x, w, padding=pad, groups=g, dtype="float16",
                                    partials="float"), ik.GC200, False, None)
            for x, w, pad, g in LAYERS.values()]
    for model in ik.models.MODELS.values():
        for dtype in ("float16", "float32"):
            ctx = plan_context(dtype, "float", ik.GC200)
            for training in (False, True):
                listed = network_plan_keys(model(), 16, ctx, fold_bn=not training,
                                           backward=training)
                keys += listed[0] if listed else []     # [] when the shapes do not check
    return list(dict.fromkeys(keys))


def _plan(key: tuple) -> dict:
    params, machine, bias, amp = key
    try:
        plan = plan_conv(params, machine, bias=bias, available_memory_proportion=amp)
    except (ValueError, MemoryError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"describe": plan.describe(), "plan": plan.to_dict()}


def record(path: str) -> None:
    keys = plan_keys()
    t0 = time.process_time()
    out = []
    for key in keys:
        ik.clear_plan_cache()
        out.append({"pass": f"{key[0].describe()} bias={key[2]} amp={key[3]}", **_plan(key)})
    print(f"{len(keys)} passes planned in {time.process_time() - t0:.1f} s CPU")
    with open(path, "w") as f:
        json.dump(out, f)


def compare(old_path: str, new_path: str) -> int:
    with open(old_path) as f:
        old = json.load(f)
    with open(new_path) as f:
        new = json.load(f)
    if [e["pass"] for e in old] != [e["pass"] for e in new]:
        print("the two files list different passes")
        return 1
    bad = [(a, b) for a, b in zip(old, new) if a != b]
    for a, b in bad:
        print(f"DIFF {a['pass']}\n  old: {a.get('describe', a.get('error'))}\n"
              f"  new: {b.get('describe', b.get('error'))}")
    print(f"{len(old)} plans compared, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "record":
        record(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("usage: plan_identity.py record OUT.json | compare OLD.json NEW.json")
