"""conv2d backward passes (data and weight) against a float64 NumPy adjoint and torch.autograd.

Bounds as in test_conv.py: fp32 |out - ref| <= 1e-5 * mag elementwise, with mag the same
pass computed on absolute values (sum of |products|), and max error <= 1e-4 * max|ref|;
fp16: 2^-11 * |ref| + 1e-6 * mag (fp32 accumulation, one final rounding).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukern as ik

U = 2.0 ** -11


def _pairs(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def ref_backward_data(gy, w, in_shape, stride, padding, dilation, groups):
    """dL/dx by scattering every kernel tap's contribution (float64), independent of ipukern."""
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride), _pairs(padding), _pairs(dilation)
    n, c, h, wd = in_shape
    co, cig, kh, kw = w.shape
    cog = co // groups
    _, _, oh, ow = gy.shape
    gx = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    gy = gy.astype(np.float64)
    w = w.astype(np.float64)
    for g in range(groups):
        gyg = gy[:, g * cog:(g + 1) * cog]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nkyx,kc->ncyx", gyg, w[g * cog:(g + 1) * cog, :, i, j])
                gx[:, g * cig:(g + 1) * cig, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                   j * dw:j * dw + sw * (ow - 1) + 1:sw] += contrib
    return gx[:, :, ph:ph + h, pw:pw + wd]


def ref_backward_weight(gy, x, w_shape, stride, padding, dilation, groups):
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride), _pairs(padding), _pairs(dilation)
    co, cig, kh, kw = w_shape
    cog = co // groups
    _, _, oh, ow = gy.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    gy = gy.astype(np.float64)
    gw = np.zeros(w_shape)
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                tap = xp[:, g * cig:(g + 1) * cig, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                         j * dw:j * dw + sw * (ow - 1) + 1:sw]
                gw[g * cog:(g + 1) * cog, :, i, j] = np.einsum("nkyx,ncyx->kc",
                                                               gy[:, g * cog:(g + 1) * cog], tap)
    return gw


def _close(out, ref, mag, dtype):
    out = out.astype(np.float64)
    assert out.shape == ref.shape
    if dtype == "float32":
        assert np.all(np.abs(out - ref) <= 1e-5 * mag + 1e-30)
        assert np.abs(out - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-30)
    else:
        assert np.all(np.abs(out - ref) <= U * np.abs(ref) + 1e-6 * mag + 1e-7)


def check(n, c, h, w, co, k, groups, stride=1, padding=0, dilation=1, dtype="float32", seed=0,
          kw=None):
    rng = np.random.default_rng(seed)
    kh, kw = (k, k) if kw is None else (k, kw)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((co, c // groups, kh, kw)).astype(dtype)
    hp = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    out_shape = ik.ConvParams.from_shapes(x.shape, wt.shape, **hp).output_shape
    gy = rng.standard_normal(out_shape).astype(dtype)
    rd = ik.conv2d_backward_data(gy, wt, x.shape, **hp)
    _close(rd.output, ref_backward_data(gy, wt, x.shape, **hp),
           ref_backward_data(np.abs(gy), np.abs(wt), x.shape, **hp), dtype)
    rw = ik.conv2d_backward_weight(gy, x, wt.shape, **hp)
    _close(rw.output, ref_backward_weight(gy, x, wt.shape, **hp),
           ref_backward_weight(np.abs(gy), np.abs(x), wt.shape, **hp), dtype)
    # estimate == execute, and the profile names the pass
    ed = ik.estimate_conv2d_backward_data(x.shape, wt.shape, dtype=dtype, **hp)
    ew = ik.estimate_conv2d_backward_weight(x.shape, wt.shape, dtype=dtype, **hp)
    assert ed.total_cycles == rd.profile.total_cycles > 0
    assert ew.total_cycles == rw.profile.total_cycles > 0
    assert rd.profile.info["pass"] == "bwd" and rw.profile.info["pass"] == "wu"
    fwd_flops = ik.estimate_conv2d(x.shape, wt.shape, dtype=dtype, **hp).flops
    assert rd.profile.flops == rw.profile.flops == fwd_flops
    return x, wt, gy, rd, rw


CASES = [
    # n, c, h, w, co, k, groups, stride, padding, dilation
    (1, 8, 9, 9, 8, 3, 1, 1, 1, 1),          # dense
    (2, 16, 11, 11, 32, 3, 4, 2, 1, 1),      # grouped, stride 2, odd size
    (2, 16, 12, 12, 16, 3, 4, 2, 1, 1),      # stride 2, even size (unused last row)
    (3, 24, 8, 13, 24, 3, 24, 1, 1, 1),      # depthwise
    (2, 16, 9, 9, 32, 3, 16, 2, 1, 1),       # depthwise, multiplier 2, stride 2
    (2, 16, 12, 12, 16, 3, 8, 1, 2, 2),      # dilation 2
    (4, 8, 7, 7, 8, 3, 4, 1, 3, 2),          # padding 3 + dilation 2
    (1, 3, 31, 29, 16, 7, 1, 2, 3, 1),       # first-layer 7x7 stride 2
    (2, 8, 10, 10, 8, 1, 1, 2, 0, 1),        # 1x1 stride 2 (dilatePostConv)
    (2, 8, 9, 9, 8, 1, 2, 2, 1, 1),          # 1x1 stride 2 padded
    (1, 8, 5, 6, 4, 3, 2, 2, 0, 1),          # no padding, odd output
    (2, 4, 8, 8, 4, 2, 1, 3, 0, 1),          # stride larger than the kernel
    (1, 4, 9, 9, 4, 3, 1, 1, 4, 1),          # padding larger than the kernel span
    (1, 4, 10, 10, 6, 3, 2, 3, 2, 2),        # stride 3 with dilation 2
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}c{}h{}w{}co{}k{}g{}s{}p{}d{}".format(*c))
def test_backward_passes_match_reference(case):
    n, c, h, w, co, k, g, s, p, d = case
    check(n, c, h, w, co, k, g, s, p, d)


@pytest.mark.parametrize("case", [CASES[1], CASES[4]], ids=["grouped", "depthwise"])
def test_backward_passes_fp16(case):
    n, c, h, w, co, k, g, s, p, d = case
    check(n, c, h, w, co, k, g, s, p, d, dtype="float16")


def test_asymmetric_hyper_parameters():
    check(2, 6, 13, 10, 9, 3, 3, stride=(2, 1), padding=(2, 0), dilation=(1, 2), kw=5)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 3), cpg=st.integers(1, 4), groups=st.sampled_from([1, 2, 3]),
       mult=st.integers(1, 2), h=st.integers(3, 10), w=st.integers(3, 10),
       k=st.integers(1, 3), s=st.integers(1, 3), p=st.integers(0, 2), d=st.integers(1, 2))
def test_backward_passes_hypothesis(n, cpg, groups, mult, h, w, k, s, p, d):
    if d * (k - 1) + 1 > min(h, w) + 2 * p:
        return
    check(n, cpg * groups, h, w, groups * mult, k, groups, s, p, d, seed=n + h * w)


def test_equals_torch_autograd():
    torch = pytest.importorskip("torch")
    for (n, c, h, w, co, k, g, s, p, d) in (CASES[1], CASES[4], CASES[6], CASES[7]):
        x, wt, gy, rd, rw = check(n, c, h, w, co, k, g, s, p, d, seed=5)
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        wtt = torch.tensor(wt, dtype=torch.float64, requires_grad=True)
        y = torch.nn.functional.conv2d(xt, wtt, stride=s, padding=p, dilation=d, groups=g)
        y.backward(torch.tensor(gy, dtype=torch.float64))
        np.testing.assert_allclose(rd.output, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(rw.output, wtt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_full_size_estimates():
    """ResNet-50-sized passes plan and estimate without data; the 1x1 stride-2 backward
    (dilatePostConv) multiplies no inserted zero, so it is no dearer than the forward."""
    for xs, ws, s, p in (((16, 64, 56, 56), (64, 64, 3, 3), 1, 1),
                         ((16, 256, 56, 56), (512, 256, 1, 1), 2, 0)):
        f = ik.estimate_conv2d(xs, ws, stride=s, padding=p)
        b = ik.estimate_conv2d_backward_data(xs, ws, stride=s, padding=p)
        u = ik.estimate_conv2d_backward_weight(xs, ws, stride=s, padding=p)
        assert b.flops == u.flops == f.flops
        assert 0 < b.utilisation <= 1 and 0 < u.utilisation <= 1
    assert b.total_cycles < 1.5 * f.total_cycles


def test_bad_input():
    w = np.zeros((4, 2, 3, 3), np.float32)
    gy = np.zeros((1, 4, 6, 6), np.float32)
    with pytest.raises(ValueError, match="grad_output must have"):
        ik.conv2d_backward_data(gy, w, (1, 2, 9, 9))
    with pytest.raises(TypeError, match="same dtype"):
        ik.conv2d_backward_data(gy.astype(np.float16), w, (1, 2, 8, 8))
    with pytest.raises(ValueError, match="input channels"):
        ik.conv2d_backward_weight(gy, np.zeros((1, 3, 8, 8), np.float32), (4, 2, 3, 3))
    with pytest.raises(TypeError):
        ik.conv2d_backward_weight(gy.tolist(), np.zeros((1, 2, 8, 8), np.float32), (4, 2, 3, 3))
