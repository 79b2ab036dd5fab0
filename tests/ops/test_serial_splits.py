"""Plans with serial out-channel slices, executed on small machines against float64 NumPy.

A tile with fewer out-channel grains than serial slices has empty slices (K_j = 0). The
weight mapping once gave such a tile a run anyway, so the mapping covered elements twice
and execution failed while estimation worked (e.g. (7406, 512) @ (512, 2586) fp32 on a
GC200). Small machines (few tiles, small memories) force serial plans at small sizes, so
these run in a second or two. A fixed random sample of layers is planned, built and mapped
on such machines, and the serial ones are executed.
"""
import numpy as np
import pytest

import ipukern as ik
from ipukern.conv import ConvParams, build_conv_program, plan_conv
from tests._support.reference import conv2d_nchw


def small(n_tiles: int, kib: int):
    return ik.GC200.replace(n_tiles=n_tiles, tile_bytes=kib * 1024, reserved_bytes_per_tile=4096)


def assert_close(out, ref, mag, dtype):
    rel = 1e-5 if dtype == "float32" else 2.0 ** -10
    assert np.all(np.abs(out.astype(np.float64) - ref) <= rel * (np.abs(ref) + mag) + 1e-6)


# cases that raised "mapping must cover elements ... exactly once" before the fix
@pytest.mark.parametrize("n_tiles, kib, m, k, n, dtype", [
    (32, 12, 295, 69, 62, "float16"),
    (16, 12, 246, 48, 49, "float16"),
    (8, 12, 51, 106, 47, "float16"),
])
def test_matmul_with_empty_serial_slices(n_tiles, kib, m, k, n, dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    run = ik.matmul(a, b, machine=small(n_tiles, kib))
    assert run.plan.serial > 1
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(run.output, a64 @ b64, np.abs(a64) @ np.abs(b64), dtype)


@pytest.mark.parametrize("n_tiles, kib, x_shape, w_shape, dtype", [
    (16, 16, (1, 18, 14, 14), (39, 18, 3, 3), "float32"),   # HMAC, 8 slices
    (8, 16, (1, 10, 10, 10), (102, 10, 3, 3), "float16"),   # AMP, 4 slices
])
def test_conv_with_empty_serial_slices(n_tiles, kib, x_shape, w_shape, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    run = ik.conv2d(x, w, bias, padding=1, machine=small(n_tiles, kib))
    assert run.plan.serial > 1
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    ref = conv2d_nchw(x64, w64, bias.astype(np.float64), padding=1)
    mag = conv2d_nchw(np.abs(x64), np.abs(w64), np.abs(bias).astype(np.float64), padding=1)
    assert_close(run.output, ref, mag, dtype)


def test_sample_of_serial_plans_maps_and_executes():
    """Every serial plan of a fixed random sample maps each tensor element exactly once;
    a few of them (the first per dtype) are executed against NumPy."""
    rng = np.random.default_rng(2024)
    n_serial, executed = 0, set()
    for _ in range(60):
        m = small(int(rng.choice([8, 16, 32])), int(rng.choice([12, 16, 24])))
        dtype = str(rng.choice(["float32", "float16"]))
        M, K, N = int(rng.integers(8, 300)), int(rng.integers(8, 200)), int(rng.integers(1, 64))
        p = ConvParams(batch=1, in_channels=K, out_channels=M, in_h=1, in_w=N, kernel_h=1,
                       kernel_w=1, dtype=dtype)
        try:
            plan = plan_conv(p, m)
        except ik.TileMemoryError:
            continue
        if plan.serial == 1:
            continue
        n_serial += 1
        prog = build_conv_program(plan)
        # building the tensor mappings checks that they cover every element exactly once
        assert prog.w.shape == p.weight_shape and prog.y.shape == p.output_shape
        if dtype not in executed:
            executed.add(dtype)
            a = rng.standard_normal((M, K)).astype(dtype)
            b = rng.standard_normal((K, N)).astype(dtype)
            out = ik.matmul(a, b, machine=m).output
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            assert_close(out, a64 @ b64, np.abs(a64) @ np.abs(b64), dtype)
    assert n_serial >= 10 and executed == {"float32", "float16"}
