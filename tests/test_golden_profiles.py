"""Golden profiles: the simulated cycles of the default layers, recorded in a JSON file.

A change to the cost model, the planner or the program builder that moves any layer's
cycles fails here, naming the layer and the numbers, so it is seen and either fixed or
accepted on purpose. To accept a change, regenerate the file and commit it with the change:

    python tests/test_golden_profiles.py --regenerate

(the diff of tests/golden/default_layers.json then shows, layer by layer, what moved).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import ipukern as ik
from ipukern.scaling import DEFAULT_BATCH, DEFAULT_LAYERS

GOLDEN = Path(__file__).resolve().parent / "golden" / "default_layers.json"
CPGS: tuple[int | str, ...] = (1, 4, 16, "dense")
FIELDS = ("method", "expand_dims", "kernel_split", "total_cycles", "compute_cycles", "sync_cycles",
          "exchange_cycles", "bytes_exchanged", "by_category", "max_tile_bytes")


def current() -> dict[str, dict]:
    """Every (layer, batch, cpg) point of the golden set, estimated now on the GC200."""
    out = {}
    for layer in DEFAULT_LAYERS:
        for cpg in CPGS:
            c = layer.channels if cpg == "dense" else cpg
            if layer.groups_for(c) is None:
                continue
            for batch in DEFAULT_BATCH:
                p = layer.params(c, batch=batch)
                prof = ik.estimate_conv2d(p.input_shape, p.weight_shape, dtype=p.dtype,
                                          stride=p.stride, padding=p.padding, groups=p.groups,
                                          partials=p.partials)
                d = prof.to_dict()
                out[f"{layer.name} N{batch} cpg{cpg}"] = {
                    "method": prof.info.get("method"),
                    "expand_dims": prof.info.get("expand_dims"),
                    "kernel_split": prof.info.get("kernel_split"),
                    **{k: d[k] for k in FIELDS[3:8]},
                    "by_category": {k: v["total"] for k, v in d["by_category"].items()},
                    "max_tile_bytes": d["memory"]["max_bytes"] if d["memory"] else None,
                }
    return out


def regenerate() -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    meta = {"machine": "GC200", "dtype": "float16", "partials": "float",
            "regenerate": "python tests/test_golden_profiles.py --regenerate"}
    GOLDEN.write_text(json.dumps({"meta": meta, "points": current()}, indent=1, sort_keys=True)
                      + "\n")


@pytest.fixture(scope="module")
def now():
    return current()


def test_golden_file_covers_the_default_layers(now):
    golden = json.loads(GOLDEN.read_text())["points"]
    assert set(golden) == set(now), "the set of golden points changed: regenerate the file"
    assert {k.split()[0] for k in golden} == {layer.name for layer in DEFAULT_LAYERS}


def test_cycles_equal_the_golden_profiles(now):
    golden = json.loads(GOLDEN.read_text())["points"]
    moved = [f"{key}: {f} {golden[key][f]} -> {now[key][f]}"
             for key in sorted(set(golden) & set(now)) for f in FIELDS
             if golden[key].get(f) != now[key].get(f)]
    assert not moved, ("simulated profiles moved (if intended, run "
                       "`python tests/test_golden_profiles.py --regenerate` and commit):\n  "
                       + "\n  ".join(moved[:40]))


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python tests/test_golden_profiles.py --regenerate")
    regenerate()
    print(f"wrote {GOLDEN}")
