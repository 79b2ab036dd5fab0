"""Convs whose kernel exceeds the (unpadded) input (issue 36, items 4 and 7): the expandDims
copy gave a one-tap-deep block the stride of the taps it would step over, which can exceed
the arena row, and the kernel's bounds check refused it (``copy_blocks: bad extent or
stride``) although the block never steps. Results against torch (float64)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ipukern as ik

torch = pytest.importorskip("torch")


def _torch_conv(x, w, **kw):
    return torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64),
                                      torch.tensor(w, dtype=torch.float64), **kw).numpy()


def test_issue_reproducer_runs_and_matches_its_estimate():
    x, w = np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 7, 7), np.float32)
    run = ik.conv2d(x, w, padding=2)
    np.testing.assert_array_equal(run.output, _torch_conv(x, w, padding=2))
    est = ik.estimate_conv2d((1, 1, 4, 4), (1, 1, 7, 7), padding=2, dtype="float32")
    assert run.profile.total_cycles == est.total_cycles


@st.composite
def _big_kernel_convs(draw):
    h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    kh, kw = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    if kh <= h and kw <= w:            # at least one side of the kernel exceeds the input
        kh = h + draw(st.integers(1, 3))
    ph, pw = draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    if h + 2 * ph < kh or w + 2 * pw < kw:
        ph, pw = max(ph, -(-(kh - h) // 2)), max(pw, -(-(kw - w) // 2))
    groups = draw(st.sampled_from([1, 2]))
    cin = groups * draw(st.integers(1, 3))
    cout = groups * draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    return n, cin, h, w, cout, kh, kw, (ph, pw), (sh, sw), groups, draw(st.integers(0, 2**31))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_big_kernel_convs())
def test_kernels_larger_than_the_input_match_torch(case):
    n, cin, h, w, cout, kh, kw, pad, stride, groups, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, cin // groups, kh, kw)).astype(np.float32)
    out = ik.conv2d(x, wt, padding=pad, stride=stride, groups=groups).output
    ref = _torch_conv(x, wt, padding=pad, stride=stride, groups=groups)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4 * max(1.0, np.abs(ref).max()))


def test_small_cnn_with_a_kernel_larger_than_its_maps_runs_as_torch():
    """A small CNN whose late conv's 7x7 kernel exceeds its 4x4 maps (the run_network
    failure of the issue, same copy)."""
    nn = torch.nn
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 7, padding=2), nn.ReLU(),
                        nn.Conv2d(8, 4, 5, padding=3, stride=2)).eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    net = ik.from_torch(mod, x)
    out = ik.run_network(net, x).output
    with torch.no_grad():
        ref = mod.double()(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
