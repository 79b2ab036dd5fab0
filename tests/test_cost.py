"""Cycle estimators of the built-in vertices: array forms equal the scalar ones."""
import numpy as np
import pytest

import ipukern as ik
from ipukern import cost


@pytest.mark.parametrize("machine", [ik.GC200, ik.GC2])
@pytest.mark.parametrize("pt, ot", [("float32", "float32"), ("float32", "float16"),
                                    ("float16", "float16"), ("float16", "float32")])
def test_reduce_array_equals_scalar(machine, pt, ot):
    rng = np.random.default_rng(0)
    n = rng.integers(1, 200_000, size=600)
    n[:100] = rng.integers(1, 40, size=100)
    d = rng.integers(1, 17, size=600)
    want = [cost.reduce_cycles(machine, int(a), int(b), pt, ot) for a, b in zip(n, d)]
    np.testing.assert_array_equal(cost.reduce_cycles_array(machine, n, d, pt, ot), want)


def test_cast_and_elementwise_arrays_equal_scalar():
    n = np.array([0, 1, 5, 100, 12345])
    m = ik.GC200
    np.testing.assert_array_equal(cost.cast_cycles_array(m, n, "float32", "float16"),
                                  [cost.cast_cycles(m, int(k), "float32", "float16") for k in n])
    np.testing.assert_array_equal(cost.elementwise_cycles_array(m, n, "float16"),
                                  [cost.elementwise_cycles(m, int(k), "float16") for k in n])


def test_reduce_hand_computed():
    # reference §4.3 worked example: 1024 outputs, depth 4, float -> half
    assert cost.reduce_cycles(ik.GC200, 1024, 4, "float32", "float16", vertex="multi") == 4836
    assert cost.reduce_cycles(ik.GC200, 1024, 4, "float32", "float16", vertex="single") == 3507


def test_elementwise_hand_computed():
    # 1200 floats on 6 workers: 200 each = 100 64-bit vectors x 2 loads + 58; x6 + 33
    assert cost.elementwise_cycles(ik.GC200, 1200, "float32", 2) == 6 * (58 + 200) + 33
    # zeroing 1200 halves: per worker 200/4 = 50 vectors + 5, x6
    assert cost.zero_cycles(ik.GC200, 1200, "float16") == 6 * 55
