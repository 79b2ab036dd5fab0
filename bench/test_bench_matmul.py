"""Host throughput of matmul (execute mode) against numpy.matmul in the same run, and the
cost of estimate mode. Targets: >= 0.5x NumPy's GFLOP/s at 2048^3 (fp32);
estimate_matmul <= 20 ms per shape."""
import numpy as np
import pytest

import ipukern as ik

from timing import best_seconds, measured_seconds

SQUARES = [512, 1024, 2048]


def operands(sa, sb, dtype=np.float32):
    rng = np.random.default_rng(0)
    return rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)


def record(benchmark, run, a, b):
    prof = run.profile
    info = dict(shape=prof.info["layer"], method=prof.info["method"], plan=prof.info["plan"],
                tiles=prof.info["tiles_used"], simulated_cycles=prof.total_cycles,
                simulated_tflops=prof.tflops, simulated_utilisation=prof.utilisation,
                bytes_exchanged=prof.bytes_exchanged)
    t = measured_seconds(benchmark)
    if t:
        info["host_gflops"] = prof.flops / t / 1e9
        if not benchmark.disabled:
            tn = best_seconds(lambda: np.matmul(a, b), repeat=5)
            info["numpy_gflops"] = prof.flops / tn / 1e9
            info["ratio_vs_numpy"] = tn / t
    benchmark.extra_info.update(info)


@pytest.mark.benchmark(group="matmul")
@pytest.mark.parametrize("n", SQUARES)
def test_matmul_square(benchmark, n):
    a, b = operands((n, n), (n, n))
    ik.matmul(a, b)
    run = benchmark(ik.matmul, a, b)
    ref = a[:8].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(run.output[:8], ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    record(benchmark, run, a, b)


@pytest.mark.benchmark(group="matmul")
def test_matmul_batched_one_group_per_tile(benchmark):
    a, b = operands((1472, 128, 16), (1472, 16, 16))
    ik.matmul(a, b)
    run = benchmark(ik.matmul, a, b)
    np.testing.assert_allclose(run.output, np.matmul(a, b), rtol=1e-4, atol=1e-4)
    assert run.profile.bytes_exchanged == 0 and run.profile.info["tiles_used"] == 1472
    record(benchmark, run, a, b)


@pytest.mark.benchmark(group="matmul")
@pytest.mark.parametrize("shape", [((2048, 2048), (2048, 2048), "float32"),
                                   ((8192, 1024), (1024, 4096), "float16"),
                                   ((1472, 128, 16), (1472, 16, 16), "float16")],
                         ids=["2048cube-fp32", "bert-ffn-fp16", "batched-1472-fp16"])
def test_estimate_matmul_cold(benchmark, shape):
    sa, sb, dtype = shape
    prof = benchmark.pedantic(ik.estimate_matmul, args=(sa, sb), kwargs={"dtype": dtype},
                              setup=ik.clear_plan_cache, rounds=3, iterations=1)
    t = measured_seconds(benchmark)
    benchmark.extra_info.update(simulated_cycles=prof.total_cycles, simulated_tflops=prof.tflops,
                                utilisation=prof.utilisation, plan=prof.info["plan"],
                                ms_per_estimate=(t * 1e3) if t else None, target_ms=20)
