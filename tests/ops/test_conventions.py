"""NumPy/PyTorch conventions of the ops: torch's conv2d signature, torch tensors and dtypes
in and out, meta tensors and torch.Size for estimates, np.matmul's 1-D rule, short reprs."""
from __future__ import annotations

import numpy as np
import pytest

import ipukern as ik

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("shape, cout, k, stride, padding, dilation, groups", [
    ((2, 8, 7, 9), 8, 3, 1, 1, 1, 4),
    ((1, 6, 10, 8), 12, (3, 1), (2, 1), (1, 0), 1, 3),
    ((1, 4, 9, 9), 4, 3, 1, 2, 2, 4),
    ((3, 3, 8, 8), 5, 1, 1, 0, 1, 1),
])
def test_conv2d_takes_torch_positional_order_and_returns_torch(shape, cout, k, stride, padding,
                                                               dilation, groups):
    g = torch.Generator().manual_seed(0)
    kh, kw = (k, k) if isinstance(k, int) else k
    x = torch.randn(*shape, generator=g, requires_grad=True)
    w = torch.randn(cout, shape[1] // groups, kh, kw, generator=g, requires_grad=True)
    b = torch.randn(cout, generator=g)
    run = ik.conv2d(x, w, b, stride, padding, dilation, groups)        # torch's positional order
    ref = F.conv2d(x, w, b, stride, padding, dilation, groups)
    assert isinstance(run.output, torch.Tensor) and run.output.dtype == torch.float32
    assert not run.output.requires_grad
    torch.testing.assert_close(run.output, ref.detach(), rtol=1e-4, atol=1e-4)
    kw_run = ik.conv2d(input=x, weight=w, bias=b, stride=stride, padding=padding,
                       dilation=dilation, groups=groups)                # and torch's names
    assert torch.equal(kw_run.output, run.output)
    # NumPy in, NumPy out, same values
    np_run = ik.conv2d(x.detach().numpy(), w.detach().numpy(), b.numpy(), stride, padding,
                       dilation, groups)
    assert isinstance(np_run.output, np.ndarray)
    np.testing.assert_array_equal(np_run.output, run.output.numpy())


def test_torch_half_is_accepted_and_bf16_refused_with_ipukerns_message():
    x = torch.randn(1, 4, 6, 6).half()
    w = torch.randn(4, 1, 3, 3).half()
    run = ik.conv2d(x, w, padding=1, groups=4)
    assert run.output.dtype == torch.float16
    assert ik.canonical_dtype(torch.float32) == "float32"
    assert ik.canonical_dtype(torch.half) == "float16"
    for bad in (x.bfloat16(), x.double(), x.int()):
        with pytest.raises(TypeError, match="ipukern computes in float32 or float16"):
            ik.conv2d(bad, w.to(bad.dtype), padding=1, groups=4)
    with pytest.raises(TypeError, match="bfloat16 is not modelled"):
        ik.estimate_conv2d((1, 4, 6, 6), (4, 1, 3, 3), dtype=torch.bfloat16, groups=4)


def test_meta_tensors_and_torch_size_for_estimates():
    xm = torch.empty(8, 32, 28, 28, device="meta", dtype=torch.float16)
    wm = torch.empty(32, 4, 3, 3, device="meta", dtype=torch.float16)
    est = ik.estimate_conv2d(xm, wm, padding=1, groups=8)
    ref = ik.estimate_conv2d((8, 32, 28, 28), (32, 4, 3, 3), dtype="float16", padding=1, groups=8)
    assert est.total_cycles == ref.total_cycles
    assert ik.estimate_conv2d(torch.Size((8, 32, 28, 28)), torch.Size((32, 4, 3, 3)),
                              padding=1, groups=8).total_cycles == ref.total_cycles
    with pytest.raises(TypeError, match="meta tensor.*estimate_conv2d"):
        ik.conv2d(xm, wm, padding=1, groups=8)
    am = torch.empty(64, 32, device="meta")
    assert ik.estimate_matmul(am, torch.Size((32, 16))).total_cycles == \
        ik.estimate_matmul((64, 32), (32, 16), dtype="float32").total_cycles


@pytest.mark.parametrize("sa, sb", [((5,), (5, 7)), ((4, 5), (5,)), ((5,), (5,)),
                                    ((3, 4, 5), (5,)), ((5,), (2, 5, 6)), ((2, 3, 4), (4, 5))])
def test_matmul_promotes_1d_like_numpy(sa, sb, rng):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = ik.matmul(a, b).output
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert ik.estimate_matmul(sa, sb).total_cycles > 0
    tout = ik.matmul(torch.from_numpy(a), torch.from_numpy(b)).output
    assert isinstance(tout, torch.Tensor) and tuple(tout.shape) == ref.shape


def test_matmul_rejects_scalars():
    with pytest.raises(ValueError, match="at least 1-D"):
        ik.matmul(np.float32(2.0) * np.ones((), np.float32), np.ones(3, np.float32))


def test_short_reprs():
    x = np.ones((1, 4, 5, 5), np.float32)
    run = ik.conv2d(x, np.ones((4, 1, 3, 3), np.float32), padding=1, groups=4)
    assert len(repr(run)) < 400 and "ConvRun(output=ndarray(1, 4, 5, 5) float32" in repr(run)
    assert "<table>" in run._repr_html_()
    mm = ik.matmul(np.ones((4, 3), np.float32), np.ones(3, np.float32))
    assert len(repr(mm)) < 400 and repr(mm).startswith("MatmulRun(output=ndarray(4,)")


def test_unbatched_conv_input_as_torch_takes_it():
    """``(C, H, W)`` is a batch of one, the output unbatched, as torch.nn.functional.conv2d."""
    rng = np.random.default_rng(0)
    x = rng.random((4, 6, 6)).astype(np.float32)
    w = rng.random((8, 2, 3, 3)).astype(np.float32)
    run = ik.conv2d(x, w, padding=1, groups=2)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                     padding=1, groups=2).numpy()
    assert run.output.shape == ref.shape == (8, 6, 6)
    np.testing.assert_allclose(run.output, ref, rtol=1e-5, atol=1e-5)
    t = ik.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, groups=2).output
    assert isinstance(t, torch.Tensor) and tuple(t.shape) == (8, 6, 6)


def test_forced_slic_on_float32_says_why():
    x = np.ones((1, 16, 8, 8), np.float32)
    w = np.ones((16, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match="SLIC takes float16 inputs"):
        ik.conv2d(x, w, padding=1, groups=16, method="SLIC")
