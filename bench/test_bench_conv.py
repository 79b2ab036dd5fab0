"""Host throughput of conv2d (execute mode, all 1472 tiles, exchanges included) against
PyTorch's CPU conv and NumPy on the same input in the same run; simulated metrics in
extra_info.

Targets: >= 1.0x torch GFLOP/s for <= 8 channels per group, >= 0.5x for dense;
estimate_conv2d <= 20 ms per layer (see bench/test_bench_planner.py).
"""
import numpy as np
import pytest

import ipukern as ik

from baselines import numpy_conv2d, torch, torch_conv2d
from timing import best_seconds, measured_seconds

LAYERS = [("resnext56", (8, 128, 56, 56), 3, 1, g) for g in (1, 4, 8, 16, 32, 64, 128)]
LAYERS.append(("effnet_dw5x5", (8, 240, 28, 28), 5, 2, 240))


def layer_id(layer):
    name, shape, k, pad, g = layer
    return f"{name}-g{g}"


def layer_operands(layer):
    """Random fp32 input and weights of a benchmark layer (same seed for every baseline)."""
    name, shape, k, pad, groups = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], shape[1] // groups, k, k)).astype(np.float32)
    return x, w, pad, groups


@pytest.mark.benchmark(group="conv")
@pytest.mark.parametrize("layer", LAYERS, ids=layer_id)
def test_conv2d_execute(benchmark, layer):
    x, w, pad, groups = layer_operands(layer)
    shape = x.shape
    run = ik.conv2d(x, w, padding=pad, groups=groups)            # plan, build, first touch
    run = benchmark(ik.conv2d, x, w, padding=pad, groups=groups)
    prof = run.profile
    flops = prof.flops
    # correctness spot check against the NumPy baseline on one image
    ref = numpy_conv2d(x[:1], w, padding=pad, groups=groups)
    np.testing.assert_allclose(run.output[:1], ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
    fp16 = ik.estimate_conv2d(shape, w.shape, dtype="float16", padding=pad, groups=groups)
    info = dict(layer=prof.info["layer"], channels_per_group=shape[1] // groups,
                method=prof.info["method"], tiles=prof.info["tiles_used"],
                simulated_cycles=prof.total_cycles, simulated_tflops=prof.tflops,
                simulated_utilisation=prof.utilisation, bytes_exchanged=prof.bytes_exchanged,
                fp16_method=fp16.info["method"], fp16_simulated_tflops=fp16.tflops,
                fp16_utilisation=fp16.utilisation)
    t = measured_seconds(benchmark)
    if t:
        info["host_gflops"] = flops / t / 1e9
        if not benchmark.disabled and torch is not None:
            tt = best_seconds(torch_conv2d(x, w, padding=pad, groups=groups), repeat=5)
            info["torch_gflops"] = flops / tt / 1e9
            info["ratio_vs_torch"] = tt / t
        if not benchmark.disabled:
            tn = best_seconds(lambda: numpy_conv2d(x, w, padding=pad, groups=groups), repeat=2,
                              min_time=0.0)
            info["numpy_gflops"] = flops / tn / 1e9
            info["ratio_vs_numpy"] = tn / t
    benchmark.extra_info.update(info)
    assert prof.total_cycles == ik.estimate_conv2d(shape, w.shape, dtype="float32", padding=pad,
                                                   groups=groups).total_cycles


@pytest.mark.benchmark(group="conv")
@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("layer", LAYERS, ids=layer_id)
def test_torch_conv2d(benchmark, layer):
    x, w, pad, groups = layer_operands(layer)
    benchmark(torch_conv2d(x, w, padding=pad, groups=groups))
