"""matmul backward passes against float64 NumPy (and torch.autograd where installed)."""
import numpy as np
import pytest

import ipukern as ik

SHAPES = [
    ((5, 7), (7, 3)),               # plain
    ((2, 5, 7), (7, 3)),            # linear layer: B's gradient sums over A's batch
    ((5, 7), (2, 7, 3)),            # A broadcast: its gradient sums over B's batch
    ((2, 5, 7), (2, 7, 3)),         # batched
    ((3, 1, 4, 6), (2, 6, 5)),      # broadcast on both sides
    ((1, 4, 6), (3, 6, 5)),         # size-1 batch axis broadcast
    ((2, 3, 4, 6), (6, 5)),
    ((4, 33, 40), (4, 40, 17)),     # sizes off the AMP grain
]


def _ref(a, b, gy):
    a, b, gy = (v.astype(np.float64) for v in (a, b, gy))
    ga = gy @ np.swapaxes(b, -1, -2)
    gb = np.swapaxes(a, -1, -2) @ gy

    def reduce_to(g, shape):
        while g.ndim > len(shape):
            g = g.sum(axis=0)
        for i, s in enumerate(shape):
            if s == 1 and g.shape[i] > 1:
                g = g.sum(axis=i, keepdims=True)
        return g
    return reduce_to(ga, a.shape), reduce_to(gb, b.shape)


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_backward_matches_reference(sa, sb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    gy = rng.standard_normal(np.matmul(a, b).shape).astype(np.float32)
    ra = ik.matmul_backward_data(gy, a.shape, b)
    rb = ik.matmul_backward_weight(gy, a, b.shape)
    ga, gb = _ref(a, b, gy)
    ma, mb = _ref(np.abs(a), np.abs(b), np.abs(gy))
    for out, ref, mag in ((ra.output, ga, ma), (rb.output, gb, mb)):
        assert out.shape == ref.shape and out.dtype == np.float32
        assert np.all(np.abs(out - ref) <= 1e-5 * mag + 1e-30)
    ea = ik.estimate_matmul_backward_data(sa, sb, dtype="float32")
    eb = ik.estimate_matmul_backward_weight(sa, sb, dtype="float32")
    assert ea.total_cycles == ra.profile.total_cycles and eb.total_cycles == rb.profile.total_cycles
    assert ra.profile.info["pass"] == "bwd" and rb.profile.info["pass"] == "wu"


def test_equals_torch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 8, 12)).astype(np.float32)
    b = rng.standard_normal((12, 10)).astype(np.float32)
    gy = rng.standard_normal((3, 8, 10)).astype(np.float32)
    at = torch.tensor(a, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True)
    (at @ bt).backward(torch.tensor(gy))
    np.testing.assert_allclose(ik.matmul_backward_data(gy, a.shape, b).output, at.grad.numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ik.matmul_backward_weight(gy, a, b.shape).output,
                               bt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_full_size_estimate():
    # BERT-Large feed-forward: (8192 x 1024) @ (1024 x 4096), fp16
    fwd = ik.estimate_matmul((8192, 1024), (1024, 4096))
    for est in (ik.estimate_matmul_backward_data, ik.estimate_matmul_backward_weight):
        prof = est((8192, 1024), (1024, 4096))
        assert prof.flops == fwd.flops and 0 < prof.utilisation <= 1


def test_bad_input():
    a = np.zeros((4, 5), np.float32)
    b = np.zeros((5, 3), np.float32)
    with pytest.raises(ValueError, match="grad_output must have"):
        ik.matmul_backward_data(np.zeros((4, 4), np.float32), a.shape, b)
    with pytest.raises(TypeError, match="same dtype"):
        ik.matmul_backward_weight(np.zeros((4, 3), np.float16), a, b.shape)
    with pytest.raises(ValueError, match="inner dimensions"):
        ik.matmul_backward_data(np.zeros((4, 3), np.float32), (4, 6), b)
