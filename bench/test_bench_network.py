"""Whole networks: execute-mode forward (fp32, real data on the tiles) against PyTorch eager
CPU on the same network, weights and input in the same run; estimate_network timings.

Targets (issue 11): run_network >= 0.5x torch eager for MobileNetV2 and ResNet-50 at batch
8, 224x224; estimate_network(resnet50, batch=16) cold <= 2 s (empty plan caches), warm <= 50
ms; the training estimate cold <= 1 s (issue 33; it was 2 s), warm <= 50 ms. With benchmarks
disabled (the test-suite run) the same code runs once at 32x32, batch 1, as a smoke test.
"""
import os
import time

import numpy as np
import pytest

import ipukern as ik
from ipukern.conv.host import spare_core, worker_enabled

from baselines import torch, torch_network
from timing import best_seconds, measured_seconds


def _size(benchmark):
    return (224, 8) if not benchmark.disabled else (32, 1)


@pytest.mark.benchmark(group="network")
@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50"])
def test_network_forward_execute(benchmark, model):
    size, batch = _size(benchmark)
    net = ik.models.MODELS[model](image_size=size)
    params = net.init_params(seed=0)
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    # fp32 ResNet-50 at batch 8 does not fit one GC200 in the memory model (the report says
    # where); execute mode runs it anyway, and host speed is what this benchmark measures
    kw = {"allow_overflow": True}
    t0 = time.perf_counter()
    first = ik.run_network(net, x, params, **kw)               # plan, build, first touch
    cold = time.perf_counter() - t0
    run = benchmark.pedantic(ik.run_network, args=(net, x, params), kwargs=kw, rounds=3,
                             iterations=1)
    assert np.array_equal(run.output, first.output)
    prof = run.profile
    info = {"model": model, "batch": batch, "image_size": size, "layers": len(prof.layers),
            "simulated_cycles": prof.total_cycles, "simulated_samples_per_second": prof.samples_per_second,
            "simulated_utilisation": prof.utilisation, "first_run_seconds": cold}
    if torch is not None:
        fwd = torch_network(net, params)
        tx = torch.from_numpy(x)
        want = fwd(tx).numpy()
        assert np.abs(run.output - want).max() <= 1e-3 * max(np.abs(want).max(), 1e-6)
        t = measured_seconds(benchmark)
        if t:
            tt = best_seconds(lambda: fwd(tx), repeat=3)
            # host threads of both sides and the load: the ratio depends on them
            info.update(torch_seconds=tt, ipukern_seconds=t, ratio_vs_torch=tt / t,
                        ipukern_threads=ik.get_num_threads(), torch_threads=torch.get_num_threads(),
                        load_average=os.getloadavg()[0])
    benchmark.extra_info.update(info)


def _cold_caches():
    ik.nn.clear_network_caches()
    ik.clear_plan_cache()


def _planner_seconds():
    """Same-run baseline: plan_conv alone for every distinct conv pass the last estimate
    planned (the irreducible part of a cold estimate; the rest is building and costing)."""
    from ipukern.conv import plan_conv
    from ipukern.nn import convops
    keys = list(convops._PROGRAMS) + list(convops._PASSES)   # built here or by the worker
    t0 = time.perf_counter()
    for params, machine, bias, _resident, amp in keys:
        plan_conv(params, machine, bias=bias, available_memory_proportion=amp)
    return time.perf_counter() - t0, len(keys)


@pytest.mark.benchmark(group="network")
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_estimate_network_resnet50(benchmark, training):
    """Cold (empty plan caches) and warm estimate; target cold <= 2 s (training: 1 s), warm
    <= 50 ms."""
    size, batch = (224, 16) if not benchmark.disabled else (32, 1)
    net = ik.models.resnet50(image_size=size)

    def estimate():
        return ik.estimate_network(net, batch=batch, training=training, allow_overflow=True)

    _cold_caches()
    t0 = time.perf_counter()
    cold = estimate()
    cold_s = time.perf_counter() - t0
    planner_s, n_passes = _planner_seconds()
    # same-run baseline of the planning worker: the cold estimate all on this core
    _cold_caches()
    before = os.environ.get("IPUKERN_PLAN_WORKER")
    os.environ["IPUKERN_PLAN_WORKER"] = "0"
    try:
        t0 = time.perf_counter()
        serial = estimate()
        serial_s = time.perf_counter() - t0
    finally:
        if before is None:
            del os.environ["IPUKERN_PLAN_WORKER"]
        else:
            os.environ["IPUKERN_PLAN_WORKER"] = before
    assert serial.to_dict() == cold.to_dict()
    warm = benchmark(estimate)
    assert warm.total_cycles == cold.total_cycles
    warm_s = measured_seconds(benchmark)
    target = 1.0 if training else 2.0
    benchmark.extra_info.update({
        "training": training, "cold_seconds": cold_s, "batch": batch, "image_size": size,
        "target_cold_seconds": target, "target_warm_seconds": 0.05,
        "meets_cold_target": cold_s <= target,
        "meets_warm_target": (warm_s <= 0.05) if warm_s else None,
        "baseline": "plan_conv alone for the distinct conv passes, same run",
        "planner_seconds": planner_s, "distinct_conv_passes": n_passes,
        "plan_worker": worker_enabled() and spare_core(), "cold_serial_seconds": serial_s,
        "ratio_cold_serial_vs_worker": serial_s / cold_s,
        "load_average": os.getloadavg()[0],
        "ratio_cold_vs_planner": cold_s / planner_s if planner_s > 0 else None,
        # what the network code adds to the planner: mappings, programs, copy counts,
        # reductions (the part conv.mapping's closed forms shrank)
        "seconds_beyond_planner": cold_s - planner_s,
        "simulated_cycles": warm.total_cycles, "samples_per_second": warm.samples_per_second,
        "fits": warm.fits})
