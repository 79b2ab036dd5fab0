"""from_torch honours or refuses every argument of a traced node (issue: hardening round two,
item 1): the five reproducers of silently wrong imports, each now matching PyTorch or refused
with UnsupportedTorchNode naming the argument."""
import numpy as np
import pytest

import ipukern as ik
from ipukern import nn

torch = pytest.importorskip("torch")
tnn = torch.nn
F = torch.nn.functional



def _x(shape=(2, 3, 8, 8)):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _fn(f):
    class M(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv = tnn.Conv2d(3, 3, 3, padding=1)
            self.pool = tnn.AvgPool2d(2, divisor_override=3)

        def forward(self, x):
            return f(self, x)
    torch.manual_seed(0)
    return M().eval()


def _matches(m, x):
    out = ik.run_network(ik.from_torch(m, x), x).output
    ref = m(torch.from_numpy(x.copy())).detach().numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_add_alpha_is_a_scaled_add():
    _matches(_fn(lambda s, x: torch.add(x, torch.relu(x), alpha=2.0)), _x())
    _matches(_fn(lambda s, x: torch.sub(x, torch.tanh(x), alpha=0.5)), _x())
    _matches(_fn(lambda s, x: x - torch.sigmoid(x)), _x())


def test_inplace_add_updates_later_uses():
    def f(s, x):
        y = s.conv(x)
        y.add_(x)
        return y
    _matches(_fn(f), _x())

    def g(s, x):          # torch.relu_ mutates x: the later add sees relu(x)
        y = s.conv(x)
        torch.relu_(x)
        return y + x
    _matches(_fn(g), _x())


def test_flatten_end_dim_is_honoured():
    _matches(_fn(lambda s, x: torch.flatten(x, 1, 2)), _x())
    _matches(_fn(lambda s, x: x.flatten(1, 2)), _x())
    _matches(_fn(lambda s, x: x.flatten(2)), _x())


def test_avgpool_divisor_override_is_refused_by_name():
    with pytest.raises(nn.UnsupportedTorchNode, match=r"node 'pool'.*divisor_override=3"):
        ik.from_torch(_fn(lambda s, x: s.pool(x)), _x())
    with pytest.raises(nn.UnsupportedTorchNode, match=r"divisor_override=3"):
        ik.from_torch(_fn(lambda s, x: F.avg_pool2d(x, 2, divisor_override=3)), _x())
    _matches(_fn(lambda s, x: F.avg_pool2d(x, 2, divisor_override=4)), _x())


def test_training_dropout_is_refused_eval_dropout_is_identity():
    with pytest.raises(nn.UnsupportedTorchNode, match=r"training=True"):
        ik.from_torch(_fn(lambda s, x: F.dropout(x, 0.5, training=True)), _x())
    with pytest.raises(nn.UnsupportedTorchNode, match=r"training=True"):
        ik.from_torch(_fn(lambda s, x: F.dropout(x, 0.5)), _x())     # torch's default
    _matches(_fn(lambda s, x: F.dropout(x, 0.5, training=False) + x), _x())
    _matches(_fn(lambda s, x: F.dropout(x, 0.0, training=True) + x), _x())


@pytest.mark.parametrize("f, arg", [
    (lambda s, x: x + 1.0, "other=1.0"),
    (lambda s, x: torch.add(x, x, out=x), "out="),
    (lambda s, x: x.permute(1, 0, 2, 3), "dims="),
    (lambda s, x: F.max_pool2d(x, 2, ceil_mode=True), "ceil_mode=True"),
    (lambda s, x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False), "count_include_pad=False"),
    (lambda s, x: F.gelu(x), "approximate='none'"),
    (lambda s, x: torch.cat([x, x], 1), "function cat"),
])
def test_unhonoured_arguments_are_refused_by_name(f, arg):
    with pytest.raises(nn.UnsupportedTorchNode, match=arg.replace("(", r"\(")):
        ik.from_torch(_fn(f), _x((2, 3, 9, 9)))


def test_inplace_on_a_viewed_tensor_is_refused():
    def f(s, x):
        y = s.conv(x)
        v = y.flatten(1)
        y.add_(x)
        return v
    with pytest.raises(nn.UnsupportedTorchNode, match="view"):
        ik.from_torch(_fn(f), _x())


def test_views_and_adaptive_pools_match_torch():
    _matches(_fn(lambda s, x: x.permute(0, 2, 3, 1).contiguous()), _x())
    _matches(_fn(lambda s, x: x.transpose(2, 3)), _x())
    _matches(_fn(lambda s, x: x.view(x.size(0), -1)), _x())
    _matches(_fn(lambda s, x: F.adaptive_avg_pool2d(x, 2)), _x())
    _matches(_fn(lambda s, x: F.adaptive_max_pool2d(x, (4, 2))), _x())
    _matches(_fn(lambda s, x: F.max_pool2d(x, 2, ceil_mode=True)), _x())


def test_every_module_constant_is_in_the_table():
    from ipukern.nn.torch_table import module_entries
    for t, e in module_entries(tnn).items():
        assert set(getattr(t, "__constants__", ())) <= {a.name for a in e.args}, t.__name__


@pytest.mark.parametrize("as_tensor", [False, True])
def test_tracing_leaves_the_example_input_alone(as_tensor):
    """The shape pass runs the module: an in-place step on its input (found by the fuzz,
    tests/nn/test_torch_fuzz.py seed 2) rewrote the caller's array, so the run that followed
    saw sigmoid(x) as its input and differed from torch."""
    x = _x()
    given = torch.from_numpy(x.copy()) if as_tensor else x.copy()
    m = _fn(lambda s, x: F.adaptive_avg_pool2d(x.sigmoid_(), 2))
    net = ik.from_torch(m, given)
    np.testing.assert_array_equal(np.asarray(given), x)
    _matches(m, x)
    assert net.inputs
