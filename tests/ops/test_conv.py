"""conv2d on the simulated IPU against the independent NumPy reference (and torch if present).

Tolerances
----------
fp32: elementwise |out - ref| <= 1e-5 * sum|x*w| (fp32 accumulation of at most a few
thousand products) and the issue's relative error max|out - ref| / max|ref| <= 1e-4.

fp16: the reference is computed in float64 from the same fp16 values, so the only errors
are ours: fp32 accumulation (<= 1e-6 * sum|x*w| here), the final rounding to fp16
(<= 2^-11 * |ref|) and, with ``partials="half"``, one more fp16 rounding of each tile's
partial sum before the cross-tile reduction (<= 2^-11 * sum|x*w|); a bias is added to the
rounded output and rounded again (<= 2^-11 * (sum|x*w| + |b|)). Hence
|out - ref| <= 2^-11 * |ref| + (2^-11 if half partials + 2^-11 if bias) * mag + 1e-6 * mag,
with mag = sum|x*w| (+ |b|).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ipukern as ik
from ipukern.core.engine import set_num_threads

from tests._support.reference import conv2d_nchw

U = 2.0 ** -11


def run_case(n, c, h, w, co, k, groups, stride=1, padding=0, dilation=1, dtype="float32",
             partials="float", bias=False, seed=0, kw=None):
    rng = np.random.default_rng(seed)
    kh, kw_ = (k, k) if kw is None else (k, kw)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((co, c // groups, kh, kw_)).astype(dtype)
    b = rng.standard_normal(co).astype(dtype) if bias else None
    run = ik.conv2d(x, wt, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    partials=partials)
    ref = conv2d_nchw(x, wt, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    mag = conv2d_nchw(np.abs(x), np.abs(wt), None if b is None else np.abs(b), stride=stride,
                      padding=padding, dilation=dilation, groups=groups)
    return x, wt, b, run, ref, mag


def assert_close(run, ref, mag, dtype, partials="float", bias=False):
    out = run.output.astype(np.float64)
    assert run.output.dtype == np.dtype(dtype)
    assert out.shape == ref.shape
    if dtype == "float32":
        assert np.all(np.abs(out - ref) <= 1e-5 * mag + 1e-30)
        assert np.abs(out - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-30)
    else:
        # a bias is added to the already-rounded fp16 output (PopLibs' addBias): one more
        # fp16 rounding, of a value bounded by sum|x*w| + |b|
        extra = (U if partials == "half" else 0.0) + (U if bias else 0.0)
        bound = U * np.abs(ref) + (extra + 1e-6) * mag
        assert np.all(np.abs(out - ref) <= bound + 1e-7)


CASES = [
    # n, c, h, w, co, k, groups, stride, padding, dilation
    (1, 8, 9, 9, 8, 3, 1, 1, 1, 1),          # dense, batch 1
    (2, 16, 10, 7, 16, 3, 2, 1, 1, 1),       # groups 2, non-square
    (2, 16, 11, 11, 32, 3, 4, 2, 1, 1),      # stride 2
    (3, 24, 8, 13, 24, 3, 24, 1, 1, 1),      # depthwise
    (2, 32, 9, 9, 64, 3, 32, 1, 1, 1),       # depthwise with channel multiplier 2
    (1, 12, 14, 14, 12, 5, 6, 1, 2, 1),      # 5x5, 2 channels per group
    (2, 16, 12, 12, 16, 3, 8, 1, 2, 2),      # dilation 2
    (1, 3, 31, 29, 16, 7, 1, 2, 3, 1),       # first-layer 7x7 stride 2, C=3
    (1, 256, 5, 5, 256, 3, 1, 1, 1, 1),      # 256 channels per group
    (2, 64, 6, 6, 64, 1, 1, 1, 0, 1),        # 1x1
    (1, 8, 5, 6, 4, 3, 2, 2, 0, 1),          # no padding, odd output
    (4, 8, 7, 7, 8, 3, 4, 1, 3, 2),          # padding 3, dilation 2
    (8, 16, 6, 5, 16, 3, 16, 2, 1, 1),       # batch 8 depthwise stride 2
    (1, 128, 6, 6, 128, 3, 4, 1, 1, 1),      # 32 channels per group
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}c{}h{}w{}co{}k{}g{}s{}p{}d{}".format(*c))
def test_conv2d_matches_reference(case, dtype):
    n, c, h, w, co, k, g, s, p, d = case
    _, _, _, run, ref, mag = run_case(n, c, h, w, co, k, g, s, p, d, dtype=dtype)
    assert_close(run, ref, mag, dtype)
    assert run.profile.total_cycles > 0 and run.profile.flops == 2 * ref.size * (c // g) * k * k


@pytest.mark.parametrize("case", [(2, 16, 9, 9, 16, 3, 1, 1, 1, 1), (2, 32, 8, 8, 32, 3, 8, 1, 1, 1),
                                  (1, 64, 6, 6, 64, 3, 64, 1, 1, 1)])
def test_fp16_half_partials(case):
    n, c, h, w, co, k, g, s, p, d = case
    _, _, _, run, ref, mag = run_case(n, c, h, w, co, k, g, s, p, d, dtype="float16",
                                      partials="half", bias=True)
    assert_close(run, ref, mag, "float16", partials="half", bias=True)


def test_bias_and_asymmetric_hyper_parameters():
    _, _, _, run, ref, mag = run_case(2, 12, 13, 10, 18, 3, 3, stride=(2, 1), padding=(2, 0),
                                      dilation=(1, 2), bias=True, kw=5)
    assert_close(run, ref, mag, "float32")


def test_estimate_matches_execute_and_rerun_uses_the_plan():
    x, w, _, run, ref, _ = run_case(2, 32, 12, 12, 32, 3, 4, padding=1, dtype="float16")
    est = ik.estimate_conv2d(x.shape, w.shape, dtype="float16", padding=1, groups=4)
    assert est.total_cycles == run.profile.total_cycles
    assert [s.total_cycles for s in est.supersteps] == [s.total_cycles for s in run.profile.supersteps]
    rng = np.random.default_rng(7)
    x2 = rng.standard_normal(x.shape).astype(np.float16)
    run2 = ik.conv2d(x2, w, padding=1, groups=4)
    assert run2.plan is run.plan                       # cached: no re-planning
    ref2 = conv2d_nchw(x2, w, padding=1, groups=4)
    assert np.abs(run2.output.astype(np.float64) - ref2).max() < 0.05 * np.abs(ref2).max()


def test_deterministic_across_threads():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 32, 10, 10)).astype(np.float32)
    w = rng.standard_normal((32, 8, 3, 3)).astype(np.float32)
    outs = []
    try:
        for threads in (1, 2, 1):
            set_num_threads(threads)
            r = ik.conv2d(x, w, padding=1, groups=4)
            outs.append((r.output.copy(), r.profile.total_cycles))
    finally:
        set_num_threads(None)
    for o, c in outs[1:]:
        np.testing.assert_array_equal(o, outs[0][0])
        assert c == outs[0][1]


def test_nan_and_inf_pass_through_like_the_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    w[3, 0, 0, 0] = np.inf           # meets zero padding: 0 * inf = NaN, as in the reference
    run = ik.conv2d(x, w, padding=1, groups=2)
    ref = conv2d_nchw(x, w, padding=1, groups=2)
    np.testing.assert_array_equal(np.isnan(run.output), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(run.output), np.isinf(ref))
    fin = np.isfinite(ref)
    assert np.abs(run.output[fin] - ref[fin]).max() < 1e-4 * np.abs(ref[fin]).max()


def test_profile_explains_the_plan():
    run = run_case(2, 32, 10, 10, 32, 3, 32, padding=1, dtype="float16")[3]
    prof = run.profile
    assert prof.info["method"] == run.plan.method.label()
    assert 0 < prof.utilisation < 1 and prof.tflops > 0
    conv_step = [s for s in prof.supersteps if s.name.startswith("conv")][0]
    assert run.plan.method.method in conv_step.compute_why
    assert prof.memory.max_bytes <= ik.GC200.tile_bytes
    assert "exchange" in prof.by_category()


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(x=(1, 6, 5, 5), w=(4, 2, 3, 3), groups=4), ValueError, "divisible by groups"),
    (dict(x=(4, 5), w=(4, 4, 3, 3)), ValueError, r"rank 4 \(N, C, H, W\) or 3 \(C, H, W\)"),
    (dict(x=(1, 1, 4, 5, 5), w=(4, 4, 3, 3)), ValueError, "rank 4"),
    (dict(x=(1, 4, 5), w=(4, 4, 3, 3)), ValueError, "input channels per group"),   # unbatched C=1
    (dict(x=(1, 4, 5, 5), w=(4, 4, 3)), ValueError, "rank 4"),
    (dict(x=(1, 4, 2, 2), w=(4, 4, 5, 5)), ValueError, "larger than the padded input"),
    (dict(x=(1, 4, 5, 5), w=(4, 4, 3, 3), padding=-1), ValueError, "padding must be >= 0"),
    (dict(x=(1, 4, 5, 5), w=(4, 2, 3, 3)), ValueError, "input channels per group"),
    (dict(x=(1, 4, 5, 5), w=(4, 4, 3, 3), stride=0), ValueError, "stride"),
    (dict(x=(1, 4, 5, 5), w=(4, 4, 3, 3), dtype="float64"), TypeError, "unsupported dtype"),
    (dict(x=(1, 4, 5, 5), w=(4, 4, 3, 3), dtype="int32"), TypeError, "unsupported dtype"),
    (dict(x=(1, 4, 5, 5), w=(4, 4, 3, 3), dtype="float32", partials="half"), ValueError, "half"),
])
def test_bad_input_raises(kwargs, err, match):
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", "float32")
    x = np.zeros(kwargs.pop("x"), dtype=dtype)
    w = np.zeros(kwargs.pop("w"), dtype=dtype)
    with pytest.raises(err, match=match):
        ik.conv2d(x, w, **kwargs)


def test_bad_operand_types():
    x = np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(TypeError, match="same dtype"):
        ik.conv2d(x, np.zeros((4, 4, 3, 3), np.float16))
    with pytest.raises(TypeError, match="NumPy array"):
        ik.conv2d(x.tolist(), np.zeros((4, 4, 3, 3), np.float32))
    with pytest.raises(ValueError, match="bias must have shape"):
        ik.conv2d(x, np.zeros((4, 4, 3, 3), np.float32), np.zeros(3, np.float32))


def test_torch_agrees_where_installed():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 24, 11, 9)).astype(np.float32)
    w = rng.standard_normal((36, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(36).astype(np.float32)
    run = ik.conv2d(x, w, b, stride=(1, 2), padding=(1, 2), dilation=(2, 1), groups=6)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                     stride=(1, 2), padding=(1, 2), dilation=(2, 1), groups=6).numpy()
    np.testing.assert_allclose(run.output, ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=30)
@given(n=st.integers(1, 3), cpg=st.integers(1, 6), g=st.integers(1, 4), mult=st.integers(1, 2),
       h=st.integers(1, 11), w=st.integers(1, 11), kh=st.integers(1, 4), kw=st.integers(1, 4),
       s=st.integers(1, 3), pad=st.integers(0, 2), d=st.integers(1, 2),
       dtype=st.sampled_from(["float32", "float16"]), seed=st.integers(0, 2**16))
def test_conv2d_property(n, cpg, g, mult, h, w, kh, kw, s, pad, d, dtype, seed):
    """Random small convs (any hyper-parameters that make a valid output) match the
    reference within the stated bounds."""
    if d * (kh - 1) + 1 > h + 2 * pad or d * (kw - 1) + 1 > w + 2 * pad:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cpg * g, h, w)).astype(dtype)
    wt = rng.standard_normal((mult * g, cpg, kh, kw)).astype(dtype)
    run = ik.conv2d(x, wt, stride=s, padding=pad, dilation=d, groups=g)
    ref = conv2d_nchw(x, wt, stride=s, padding=pad, dilation=d, groups=g)
    mag = conv2d_nchw(np.abs(x), np.abs(wt), stride=s, padding=pad, dilation=d, groups=g)
    assert_close(run, ref, mag, dtype)


def test_concurrent_calls_share_one_cached_program_safely():
    import threading
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 16, 10, 10)).astype(np.float32)
    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    ref = ik.conv2d(x, w, padding=1, groups=4).output
    bad = []

    def work():
        for _ in range(10):
            if not np.array_equal(ik.conv2d(x, w, padding=1, groups=4).output, ref):
                bad.append(1)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


TINY = ik.GC200.replace(n_tiles=64, tile_bytes=96 * 1024, reserved_bytes_per_tile=8 * 1024,
                        name="GC200/64-tiles-96KiB")


@pytest.mark.parametrize("shape, wshape, kw, dtype, bias", [
    ((4, 64, 12, 12), (1024, 64, 3, 3), dict(padding=1), "float16", True),   # serial + in-chan split
    ((1, 256, 8, 16), (2048, 256, 1, 1), dict(), "float32", True),           # 1x1, serial 16
    ((8, 64, 16, 16), (512, 16, 3, 3), dict(padding=1, groups=4), "float16", False),
])
def test_serial_split_plans_compute_the_right_result(shape, wshape, kw, dtype, bias):
    """A small machine forces serial out-channel slices: weights exchanged slice by slice,
    partials double-buffered and reduce-scattered per slice, bias added per slice."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(wshape).astype(dtype)
    b = rng.standard_normal(wshape[0]).astype(dtype) if bias else None
    run = ik.conv2d(x, w, b, machine=TINY, **kw)
    assert run.plan.serial > 1
    ref = conv2d_nchw(x, w, b, **kw)
    mag = conv2d_nchw(np.abs(x), np.abs(w), None if b is None else np.abs(b), **kw)
    assert_close(run, ref, mag, dtype, bias=bias)
    est = ik.estimate_conv2d(shape, wshape, dtype=dtype, machine=TINY, bias=bias, **kw)
    assert est.total_cycles == run.profile.total_cycles
    assert run.profile.memory.max_bytes <= TINY.tile_bytes


# --------------------------------------------------------------------------- direct output
@pytest.mark.parametrize("shape, w_shape, groups", [
    ((1, 16, 56, 56), (64, 16, 1, 1), 1),        # 1x1 conv, 16 in-channels: one AMP pass
    ((2, 256, 14, 14), (256, 16, 1, 1), 16),     # grouped 1x1, 16 channels per group
])
def test_direct_output_amp_is_chosen_where_it_wins(shape, w_shape, groups, monkeypatch):
    """With fp16 inputs, float partials requested and a 1x1 kernel whose in-channels fit
    one AMP pass, the half->half 16-unit AMP writes the output directly (no partials, no
    cast) at twice the half->float rate."""
    prof = ik.estimate_conv2d(shape, w_shape, groups=groups, dtype="float16")
    assert "half->half" in prof.info["method"]
    assert not [s for s in prof.supersteps if s.name == "cast"]
    from ipukern.conv import search
    ik.clear_plan_cache()
    monkeypatch.setattr(search, "direct_output_candidates", lambda *a, **k: [])
    without = ik.estimate_conv2d(shape, w_shape, groups=groups, dtype="float16")
    ik.clear_plan_cache()
    assert "half->float" in without.info["method"]
    assert prof.total_cycles < 0.8 * without.total_cycles


def test_direct_output_amp_results_are_exact():
    # the AMP sums in single precision and rounds once: the float-partials bound holds
    x, wt, b, run, ref, mag = run_case(2, 32, 9, 11, 48, 1, 2, dtype="float16", bias=True)
    assert "half->half" in run.plan.method.label() and run.plan.conv_output_dtype == "float16"
    assert np.all(np.abs(run.output.astype(np.float64) - ref) <= U * np.abs(ref) + (U + 1e-6) * mag)
    est = ik.estimate_conv2d(x.shape, wt.shape, groups=2, dtype="float16", bias=True)
    assert est.total_cycles == run.profile.total_cycles


def test_direct_output_needs_a_1x1_kernel_and_one_amp_pass():
    from ipukern.conv.estimators import direct_output_candidates
    m = ik.GC200
    assert direct_output_candidates(m, "float16", "float32", 16, 1, 1)
    assert not direct_output_candidates(m, "float16", "float32", 17, 1, 1)    # two passes
    assert not direct_output_candidates(m, "float16", "float32", 16, 3, 3)    # kernel
    assert not direct_output_candidates(m, "float32", "float32", 8, 1, 1)     # fp32 inputs
    assert not direct_output_candidates(m, "float16", "float16", 16, 1, 1)    # already half
