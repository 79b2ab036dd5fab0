"""ConvParams and the op entry points refuse what they cannot honour, with one clear message:
non-integer sizes, sizes beyond int64, kernels/strides/dilations the kernels cannot run."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.conv import MAX_KERNEL_PARAM, ConvParams


@pytest.mark.parametrize("call, exc, match", [
    (lambda: ik.estimate_matmul((4.7, 5), (5, 3)), TypeError, r"shape of a\[0\] must be an int, got 4.7"),
    (lambda: ik.estimate_matmul((4, 5), (5, np.float64(3))), TypeError, "must be an int"),
    (lambda: ik.estimate_matmul((2**63, 5), (5, 3)), ValueError, "must be between"),
    (lambda: ik.estimate_conv2d((1, 3, 8.0, 8), (4, 3, 3, 3)), TypeError, "must be an int"),
    (lambda: ik.estimate_conv2d((1, 3, 8, 8), (4, 3, 3, 3), padding=2**64), ValueError, "at most"),
    (lambda: ik.estimate_conv2d((1, 3, 8, 8), (4, 3, 3, 3), stride=True), TypeError, "stride"),
    (lambda: ik.estimate_conv2d((1, 3, 80, 80), (4, 3, 65, 1)), ValueError,
     "kernel_h 65 is above 64"),
    (lambda: ik.estimate_conv2d((1, 3, 800, 8), (4, 3, 3, 3), stride=(65, 1)), ValueError,
     "stride 65 is above 64"),
    (lambda: ik.estimate_conv2d((1, 3, 800, 8), (4, 3, 3, 1), dilation=(100, 1)), ValueError,
     "dilation 100 is above 64"),
])
def test_bad_sizes_get_one_clear_error(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_largest_kernel_parameter_still_runs():
    from ipukern._kernels import _conv
    assert MAX_KERNEL_PARAM == _conv.MAX_PARAM == 64     # the compiled IPK_CONV_MAX_K is the truth
    p = ConvParams(batch=1, in_channels=1, out_channels=1, in_h=64, in_w=1, kernel_h=64, kernel_w=1)
    assert p.out_h == 1
    x = np.arange(64, dtype=np.float32).reshape(1, 1, 64, 1)
    w = np.ones((1, 1, 64, 1), np.float32)
    out = ik.conv2d(x, w, machine=ik.GC200.replace(n_tiles=4)).output
    assert out.shape == (1, 1, 1, 1) and out[0, 0, 0, 0] == np.float32(sum(range(64)))
    np_int = ConvParams(batch=np.int64(1), in_channels=1, out_channels=1, in_h=3, in_w=3,
                        kernel_h=1, kernel_w=1)
    assert type(np_int.batch) is int
