"""Host time of ``estimate_conv2d``: cold (plan + build the exact program + cost it) and warm
(plan cached), for the layers the scaling sweep is made of.

Target (issue 33): a cold estimate <= 15 ms on every layer here (it was <= 20 ms, issue 11:
a sweep of ~70 points well under the 60 s budget on a 2-core machine), and >= 1000x faster
than SCALE-Sim 3.0 on ResNet-50's 3x3 layer (``ratio_vs_scalesim_seconds``).

Same-run baseline: the *planner alone* (``plan_conv``: enumerate methods and split
vectors, score them with closed forms, keep the best that fits). It is the irreducible
part of an estimate; everything above it is building the exact program (copy tables,
vertex batches, tile memory) whose cost the profile reports. ``ratio_cold_vs_planner``
says how much that exactness costs, and is the number to watch when the program builder
changes. The GPU model is not used as a baseline: it is a closed form (microseconds) and
would say nothing about ipukern's own speed.

"Cold" clears ipukern's plan cache before every round; process-wide memos below it (the
vertex-piece cache in convcost) stay warm, as they are in a sweep after its first layer.

extra_info also carries the simulated result (cycles, TFLOP/s, method, tiles), asserted
against a fresh estimate so a fast but wrong change fails, and the simulated cycles per
host second, next to SCALE-Sim's 7-9 k cycles/s (reference/peers-and-gpu.md, measured on
a 2-core machine like ours; a reference figure, not a same-run baseline).
"""
import time

import pytest

import ipukern as ik
from ipukern.conv import ConvParams, plan_conv

from planner_layers import LAYERS
from timing import best_seconds, measured_seconds

TARGET_S = 0.015
SCALESIM_CYCLES_PER_S = 8_000   # peers-and-gpu.md: ~7-9 k simulated cycles/s
#: SCALE-Sim 3.0 on ResNet-50's 3x3 conv2 layer (56x56, 64->64): 19.7 s (issue 33's run;
#: reference/peers-and-gpu.md measured 6.8 s on a 128x128 and 30.7 s on a 32x32 array)
SCALESIM_RESNET50_3X3_S = 19.7
TARGET_VS_SCALESIM = 1000



def _estimate(layer):
    x, w, pad, groups = LAYERS[layer]
    return ik.estimate_conv2d(x, w, padding=pad, groups=groups)


def _planner_only(layer):
    x, w, pad, groups = LAYERS[layer]
    p = ConvParams.from_shapes(x, w, padding=pad, groups=groups, dtype="float16",
                               partials="float")
    return lambda: plan_conv(p, ik.GC200)


def _record(benchmark, layer, prof, mode):
    ik.clear_plan_cache()
    fresh = _estimate(layer)
    assert prof.total_cycles == fresh.total_cycles > 0
    assert prof.info["method"] == fresh.info["method"]
    t = measured_seconds(benchmark)
    planner = best_seconds(_planner_only(layer), repeat=3, min_time=0.02)
    benchmark.extra_info.update(
        layer=fresh.info["layer"], mode=mode, simulated_cycles=prof.total_cycles,
        simulated_tflops=round(prof.tflops, 3), method=prof.info["method"],
        tiles_used=prof.info["tiles_used"], serial_splits=prof.info["serial_splits"],
        baseline="planner only (plan_conv), same run", baseline_ms=planner * 1e3,
        target_ms=TARGET_S * 1e3 if mode == "cold" else None,
        ms=(t * 1e3) if t else None,
        meets_target=(t <= TARGET_S) if (t and mode == "cold") else None,
        ratio_cold_vs_planner=(t / planner) if (t and mode == "cold") else None,
        ratio_warm_vs_planner=(t / planner) if (t and mode == "warm") else None,
        # simulated cycles per host second only mean something when the work is redone
        simulated_cycles_per_host_s=(prof.total_cycles / t) if (t and mode == "cold") else None,
        ratio_vs_scalesim_cycles_per_s=(prof.total_cycles / t / SCALESIM_CYCLES_PER_S)
        if (t and mode == "cold") else None)
    if t and mode == "cold" and layer == "resnet50_3x3":
        benchmark.extra_info.update(
            ratio_vs_scalesim_seconds=SCALESIM_RESNET50_3X3_S / t,
            meets_scalesim_target=SCALESIM_RESNET50_3X3_S / t >= TARGET_VS_SCALESIM)


@pytest.mark.benchmark(group="planner")
@pytest.mark.parametrize("layer", list(LAYERS))
def test_estimate_cold(benchmark, layer):
    _estimate(layer)   # import-time and first-call costs out of the measurement
    prof = benchmark.pedantic(_estimate, args=(layer,), setup=ik.clear_plan_cache,
                              rounds=5, iterations=1, warmup_rounds=0)
    _record(benchmark, layer, prof, "cold")


@pytest.mark.benchmark(group="planner")
@pytest.mark.parametrize("layer", list(LAYERS))
def test_estimate_warm(benchmark, layer):
    _estimate(layer)   # fills the plan cache
    prof = benchmark(_estimate, layer)
    _record(benchmark, layer, prof, "warm")


def _training_passes(size, batch):
    """The distinct conv passes (forward, backward-data, weight-update) ResNet-50's
    training estimate plans, as the network program cache's (params, machine, bias,
    resident input, available memory proportion) keys."""
    from ipukern.nn import convops
    ik.nn.clear_network_caches()
    ik.estimate_network(ik.models.resnet50(image_size=size), batch=batch, training=True,
                        allow_overflow=True)
    return list(convops._PROGRAMS) + list(convops._PASSES)   # built here or by the worker


def _plan_all(keys):
    ik.clear_plan_cache()    # also the planner's memoised split axes: every plan is cold
    return [plan_conv(params, machine, bias=bias, available_memory_proportion=amp)
            for params, machine, bias, _resident, amp in keys]


@pytest.mark.benchmark(group="planner")
def test_planner_resnet50_training_passes(benchmark, monkeypatch):
    """The planner alone over ResNet-50's distinct training conv passes (batch 16, 224x224;
    32x32 batch 1 as a smoke test when benchmarks are disabled), cold. Same-run baseline:
    the exhaustive search (``search.PRUNE = False``: every split vector of every scored
    method costed in full), which must give the same plans."""
    from ipukern.conv import search
    size, batch = (224, 16) if not benchmark.disabled else (32, 1)
    keys = _training_passes(size, batch)
    plans = benchmark.pedantic(_plan_all, args=(keys,), rounds=3, iterations=1)
    monkeypatch.setattr(search, "PRUNE", False)
    t0 = time.perf_counter()
    exhaustive = _plan_all(keys)
    base = time.perf_counter() - t0
    assert [(q, q.to_dict()) for q in plans] == [(q, q.to_dict()) for q in exhaustive]
    t = measured_seconds(benchmark)
    benchmark.extra_info.update(
        passes=len(keys), batch=batch, image_size=size,
        baseline="exhaustive search (PRUNE=False), same run, one round",
        baseline_seconds=base, seconds=t, ratio_vs_exhaustive=(base / t) if t else None)
