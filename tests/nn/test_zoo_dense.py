"""The dense and generative zoo networks (ipukern.nn.zoo_dense) executed on the tiles equal
PyTorch modules written after the same public definitions, loaded with the same weights
(fp32: max error <= 1e-4 of the output's largest magnitude, the zoo bound)."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.nn.zoo_dense import subpixel_weight

torch = pytest.importorskip("torch")
tnn = torch.nn
F = torch.nn.functional

SMALL = ik.GC200.replace(n_tiles=92)


def close(got, want):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6)


def t(a):
    return torch.tensor(np.asarray(a))


class SalesMLP(tnn.Module):
    """graphcore/examples sales_forecasting model.py, after the embeddings (inference)."""

    def __init__(self, features):
        super().__init__()
        self.d0, self.d1, self.d2 = tnn.Linear(features, 1000), tnn.Linear(1000, 1000), tnn.Linear(1000, 1000)
        self.d3, self.df = tnn.Linear(1000, 500), tnn.Linear(500, 1)

    def forward(self, x):
        for m in (self.d0, self.d1, self.d2, self.d3):
            x = F.relu(m(x))
        return torch.sigmoid(self.df(x))


class AutoEncoder(tnn.Module):
    """NVIDIA/DeepRecommender reco_encoder/model/model.py (unconstrained, SELU, eval)."""

    def __init__(self, sizes):
        super().__init__()
        rev = sizes[::-1]
        self.encode_w = tnn.ParameterList([tnn.Parameter(torch.zeros(sizes[i + 1], sizes[i]))
                                           for i in range(len(sizes) - 1)])
        self.encode_b = tnn.ParameterList([tnn.Parameter(torch.zeros(s)) for s in sizes[1:]])
        self.decode_w = tnn.ParameterList([tnn.Parameter(torch.zeros(rev[i + 1], rev[i]))
                                           for i in range(len(rev) - 1)])
        self.decode_b = tnn.ParameterList([tnn.Parameter(torch.zeros(s)) for s in rev[1:]])

    def forward(self, x):
        for w, b in zip(self.encode_w, self.encode_b):
            x = F.selu(F.linear(x, w, b))
        for w, b in zip(self.decode_w, self.decode_b):
            x = F.selu(F.linear(x, w, b))
        return x


class VAE(tnn.Module):
    """pytorch/examples vae/main.py, with the noise passed in."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = tnn.Linear(784, 400), tnn.Linear(400, 20), tnn.Linear(400, 20)
        self.fc3, self.fc4 = tnn.Linear(20, 400), tnn.Linear(400, 784)

    def forward(self, x, eps):
        h = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + eps * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


class ConvVAE(tnn.Module):
    """The Keras VAE example's shape in torch layers (ipukern.nn.zoo_dense.vae_conv)."""

    def __init__(self, s, latent=2):
        super().__init__()
        q = s // 4
        self.q = q
        self.conv1, self.conv2 = tnn.Conv2d(1, 32, 3, 2, 1), tnn.Conv2d(32, 64, 3, 2, 1)
        self.fc = tnn.Linear(64 * q * q, 16)
        self.z_mean, self.z_log_var = tnn.Linear(16, latent), tnn.Linear(16, latent)
        self.dec_fc = tnn.Linear(latent, 64 * q * q)
        self.deconv1 = tnn.ConvTranspose2d(64, 64, 3, 2, 1, output_padding=1)
        self.deconv2 = tnn.ConvTranspose2d(64, 32, 3, 2, 1, output_padding=1)
        self.deconv3 = tnn.ConvTranspose2d(32, 1, 3, 1, 1)

    def forward(self, x, eps):
        h = F.relu(self.conv2(F.relu(self.conv1(x))))
        h = F.relu(self.fc(torch.flatten(h, 1)))
        mu, logvar = self.z_mean(h), self.z_log_var(h)
        z = mu + eps * torch.exp(0.5 * logvar)
        d = F.relu(self.dec_fc(z)).reshape(-1, 64, self.q, self.q)
        d = F.relu(self.deconv2(F.relu(self.deconv1(d))))
        return torch.sigmoid(self.deconv3(d)), mu, logvar


def load(ref, params, rename=lambda k: k):
    ref.load_state_dict({rename(k): t(v) for k, v in params.items()}, strict=True)
    return ref.eval()


def test_mlp_sales_matches_torch():
    net = ik.models.mlp_sales()
    assert net.shape(net.outputs[0], batch=3) == (3, 1)
    params = net.init_params(seed=0)
    ref = load(SalesMLP(171), params)
    x = np.random.default_rng(0).standard_normal((3, 171)).astype(np.float32)
    with torch.no_grad():
        want = ref(t(x)).numpy()
    close(ik.run_network(net, x, params, machine=SMALL, allow_overflow=True).output, want)


def test_deeprec_matches_torch():
    # the Netflix-full shape, 17,768 items: the weights overflow 92 tiles (reported, allowed)
    net = ik.models.deeprec_autoencoder()
    widths = [lay.out_features for _, lay in net.layers if lay.op == "linear"]
    assert widths == [512, 512, 1024, 512, 512, 17768]
    params = net.init_params(seed=0)

    def rename(k):
        part, i, what = k.split(".")
        return f"{part}_{'w' if what == 'weight' else 'b'}.{i}"
    ref = load(AutoEncoder([17768, 512, 512, 1024]), params, rename)
    rng = np.random.default_rng(0)
    x = np.where(rng.random((2, 17768)) < 0.01, rng.integers(1, 6, (2, 17768)), 0).astype(np.float32)
    with torch.no_grad():
        want = ref(t(x)).numpy()
    close(ik.run_network(net, x, params, machine=SMALL, allow_overflow=True).output, want)


@pytest.mark.parametrize("name", ["vae_dense", "vae_conv"])
def test_vaes_match_torch(name):
    net = ik.models.MODELS[name]()
    params = net.init_params(seed=0)
    rng = np.random.default_rng(1)
    x = rng.random((2,) + net.nodes["x"].sample_shape).astype(np.float32)
    eps = rng.standard_normal((2,) + net.nodes["eps"].sample_shape).astype(np.float32)
    if name == "vae_dense":
        ref = load(VAE(), params)
    else:
        ref = ConvVAE(28).eval()
        sd = {k: t(v) for k, v in params.items() if not k.startswith("deconv")}
        for i in (1, 2, 3):
            m = getattr(ref, f"deconv{i}")
            w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
            pw, pb = subpixel_weight(w, b, m.stride[0], m.padding[0])
            params[f"deconv{i}.weight"], params[f"deconv{i}.bias"] = pw, pb
        missing, unexpected = ref.load_state_dict(sd, strict=False)
        assert not unexpected and all(k.startswith("deconv") for k in missing)
    run = ik.run_network(net, {"x": x, "eps": eps}, params, machine=SMALL, allow_overflow=True)
    with torch.no_grad():
        want = ref(t(x), t(eps))
    for got, w in zip([run.outputs[o] for o in net.outputs], want):
        close(got, w.numpy())


def test_subpixel_weight_equals_conv_transpose():
    rng = np.random.default_rng(0)
    for k, s, p in ((3, 2, 1), (3, 1, 1), (2, 2, 0), (4, 2, 1)):
        m = tnn.ConvTranspose2d(3, 5, k, s, p, output_padding=s + 2 * p - k)
        x = torch.tensor(rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
        w, b = subpixel_weight(m.weight.detach().numpy(), m.bias.detach().numpy(), s, p)
        z = F.conv2d(x, t(w), t(b), padding=(w.shape[-1] - 1) // 2).numpy()
        y = z.reshape(2, 5, s, s, 4, 4).transpose(0, 1, 4, 2, 5, 3).reshape(2, 5, 4 * s, 4 * s)
        close(y, m(x).detach().numpy())


def test_conv_transpose_rejects_a_shape_changing_output_padding():
    net = ik.Network("t")
    x = net.input("x", (2, 4, 4))
    with pytest.raises(ValueError, match="no output padding"):
        ik.nn.zoo_dense.conv_transpose(net, x, "up", (2, 4, 4), 3, (5, 2, 0), None)


@pytest.mark.parametrize("name", ["mlp_sales", "deeprec_autoencoder", "vae_dense", "vae_conv"])
def test_dense_zoo_estimates_inference_and_training(name):
    """Each estimates on one GC200 at fp16, and trains (their ops all have backward passes)."""
    net = ik.models.MODELS[name]()
    inf = ik.estimate_network(net, batch=16, allow_overflow=True)
    assert inf.total_cycles > 0 and inf.samples_per_second > 0
    tr = ik.estimate_network(net, batch=16, training=True, allow_overflow=True)
    assert tr.total_cycles > inf.total_cycles
    assert {r["pass"] for r in tr.layers} >= {"fwd", "bwd", "wu"}


def test_mul_exp_selu_training_step_equals_torch():
    """The new element-wise ops' backward passes, executed on the tiles, equal autograd."""
    from ipukern.nn import layers as L
    from ipukern.nn import train_step
    net = ik.Network("mes")
    x = net.input("x", (6,))
    y = net.input("labels", (), kind="int")
    a = net.add(L.Linear(6, 5), x, name="a")
    b = net.add(L.Linear(6, 5), x, name="b")
    e = net.add(L.Exp(0.5), b, name="e")
    h = net.add(L.SELU(), net.add(L.Mul(), a, e, name="m"), name="s")
    net.output(net.add(L.SoftmaxCrossEntropy(), net.add(L.Linear(5, 3), h, name="fc"), y, name="loss"))
    params = net.init_params(seed=3)
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((4, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 4)
    tiny = ik.GC200.replace(n_tiles=16, name="GC200-16")
    run = train_step(net, xv, labels, params, machine=tiny)
    P = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tx = t(xv)
    hh = F.selu(F.linear(tx, P["a.weight"], P["a.bias"])
                * torch.exp(0.5 * F.linear(tx, P["b.weight"], P["b.bias"])))
    loss = F.cross_entropy(F.linear(hh, P["fc.weight"], P["fc.bias"]), t(labels))
    loss.backward()
    assert run.loss == pytest.approx(loss.item(), rel=1e-5)
    for k, p in P.items():
        np.testing.assert_allclose(run.grads[k], p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    assert run.cycles == run.profile.total_cycles
