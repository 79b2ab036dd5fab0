"""The per-tile conv kernel on whole layers split over 1472 tiles, vs PyTorch / NumPy.

Each case builds an arena with one vertex per tile (see ``convlayers``), times one
``_conv.conv_tiles`` call over all vertices (pytest-benchmark, best round), and in the same
run times the equivalent whole-layer ``torch.nn.functional.conv2d`` (or ``a @ b`` for the
matmul) with the same thread count. ``extra_info`` holds both speeds and their ratio, and
the gathered result is checked against the float64 reference so a fast but wrong kernel
fails.

    python -m pytest bench/test_bench_conv_kernel.py --benchmark-only \
        --benchmark-columns=min,median,rounds --benchmark-group-by=group

Targets for the whole simulated op (kernel + exchanges), so the kernel must beat them:
>= 0.5x torch for dense convs, >= 1.0x torch for <= 8 channels per group, matmul >= 0.5x
NumPy at 2048^3.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from ipukern._kernels import _conv
from ipukern.core.engine import get_num_threads

from timing import measured_seconds
from convlayers import conv_layer, matmul_layer

torch = pytest.importorskip("torch")

N_TILES = 1472

# name: (N, C_in, C_out, H=W, k, pad, groups, split=(batch, group, out-chan, row parts), dtype[,
#        stride])
CONV_CASES = {
    # ResNeXt-style 3x3 layer, N=8 C=128 56x56 pad 1
    "dense-g1": (8, 128, 128, 56, 3, 1, 1, (8, 1, 8, 23), np.float32),          # K=16, OR 2-3
    "dense-g1-224-big-tiles": (8, 128, 128, 56, 3, 1, 1, (8, 1, 4, 7), np.float32),  # K=32, OR 8
    "dense-g1-fp16-in": (8, 128, 128, 56, 3, 1, 1, (8, 1, 8, 23), np.float16),
    # ResNet-style downsampling 3x3 stride 2, 128 -> 256 channels, 56 -> 28
    "dense-g1-stride2": (8, 128, 256, 56, 3, 1, 1, (8, 1, 16, 11), np.float32, 2),
    "g16-cpg8": (8, 128, 128, 56, 3, 1, 16, (8, 4, 1, 46), np.float32),          # G=4, OR 1-2
    "g32-cpg4": (8, 128, 128, 56, 3, 1, 32, (8, 4, 1, 46), np.float32),          # G=8
    "g128-depthwise": (8, 128, 128, 56, 3, 1, 128, (8, 4, 1, 46), np.float32),   # G=32
    "g128-depthwise-full-planes": (8, 128, 128, 56, 3, 1, 128, (8, 46, 1, 4), np.float32),
    # EfficientNet depthwise 5x5, N=8 C=240 28x28 pad 2: one or two whole planes per tile
    "effnet-dw5x5": (8, 240, 240, 28, 5, 2, 240, (8, 184, 1, 1), np.float32),
    # MobileNetV2 depthwise 3x3 as its network plan splits them: 8 channels x a few rows
    "mnv2-dw3x3": (8, 144, 144, 56, 3, 1, 144, (8, 18, 1, 10), np.float32),      # G=8, OR 5-6
    "mnv2-dw3x3-stride2": (8, 96, 96, 112, 3, 1, 96, (8, 12, 1, 14), np.float32, 2),  # OR 4
}


def best_call_seconds(fn, seconds: float = 2.0) -> float:
    """Fastest single call within ``seconds`` (the same statistic as the benchmark's min:
    robust to other work on a shared machine)."""
    fn()
    best, t_end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _kernel_call(tb, n_threads):
    s = _conv.conv_scratch_floats(tb.dims, *tb.params)
    scratch = np.zeros((n_threads, s), np.float32)   # once per plan, pages touched here
    args = (tb.data, tb.tiles, tb.win_off, tb.w_off, tb.out_off, tb.dims, *tb.params,
            tb.in_dt, tb.out_dt, scratch, n_threads)
    assert _conv.conv_tiles(*args) == 0
    return lambda: _conv.conv_tiles(*args)


def _report(benchmark, tb, base_s, base_name, n_threads):
    t = measured_seconds(benchmark)
    gflops = tb.flops / t / 1e9 if t else None
    benchmark.extra_info.update(
        vertices=int(tb.dims.shape[0]), host_threads=n_threads, isa=_conv.best_isa(),
        gflop=tb.flops / 1e9, arena_mb=tb.arena_bytes_touched / 1e6,
        kernel_gflops=gflops, baseline=base_name, baseline_gflops=tb.flops / base_s / 1e9,
        ratio_vs_baseline=(base_s / t) if t else None)


@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.benchmark(group="conv-kernel")
def test_conv_layer(benchmark, case):
    n, cin, cout, hw, k, pad, groups, split, dtype, *rest = CONV_CASES[case]
    stride = rest[0] if rest else 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, cin, hw, hw)).astype(dtype)
    w = (rng.standard_normal((cout, cin // groups, k, k)) / np.sqrt(cin // groups * k * k)).astype(dtype)
    tb = conv_layer(x, w, stride=stride, padding=pad, groups=groups, split=split,
                    out_dtype=np.float32, n_tiles=N_TILES)
    n_threads = get_num_threads()
    run = _kernel_call(tb, n_threads)
    benchmark(run)
    # correct: every tile's output, gathered, equals the float64 layer
    ref = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                     torch.from_numpy(w.astype(np.float64)), stride=stride,
                                     padding=pad, groups=groups).numpy()
    got = tb.gather()
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    # same run: the whole layer through oneDNN, fp32, same thread count
    torch.set_num_threads(n_threads)
    xt = torch.from_numpy(x.astype(np.float32))
    wt = torch.from_numpy(w.astype(np.float32))
    base = best_call_seconds(lambda: torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad,
                                                                groups=groups))
    _report(benchmark, tb, base, "torch.nn.functional.conv2d fp32 (whole layer, same threads)",
            n_threads)


@pytest.mark.benchmark(group="conv-kernel")
def test_matmul_2048(benchmark):
    """(2048, 2048) @ (2048, 2048) as 1408 GEMM-form vertices: M/16 x K/8 x N/11 slices
    (C=256, K=128, OC=186-187), each producing a partial sum over its K slice."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, 2048)).astype(np.float32)
    b = rng.standard_normal((2048, 2048)).astype(np.float32)
    tb = matmul_layer(a, b, split=(16, 8, 11), n_tiles=N_TILES)
    n_threads = get_num_threads()
    run = _kernel_call(tb, n_threads)
    benchmark(run)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(tb.gather() - ref).max() <= 1e-4 * np.abs(ref).max()
    base = best_call_seconds(lambda: a @ b)
    _report(benchmark, tb, base, "numpy a @ b fp32 (BLAS, its own threads)", n_threads)
