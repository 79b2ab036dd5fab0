"""Dense and generative networks of the zoo, each following a public definition (cited per
function): Graphcore's sales-forecasting MLP, NVIDIA's DeepRecommender autoencoder, and two
variational autoencoders (Kingma & Welling's dense MNIST VAE, a conv VAE of the Keras
example's shape).

Dropout is an identity at inference and is not a layer (as in :mod:`ipukern.nn.zoo_cnn`);
in a training estimate its mask generation is not costed (stated). A VAE's
reparameterisation noise is a network input (``eps``), so execution is deterministic and
comparable with a framework fed the same noise.
"""
from __future__ import annotations

import numpy as np

from . import layers as L
from .network import Network

__all__ = ["conv_transpose", "deeprec_autoencoder", "mlp_sales", "subpixel_weight", "vae_conv",
           "vae_dense"]

#: Graphcore's sales-forecasting MLP input: 17 categorical Rossmann columns embedded in 10
#: values each, plus 1 batch-normalised continuous column (graphcore/examples
#: applications/tensorflow/sales_forecasting, data.py VOCAB_LENS / CONTINUOUS_COLS, model.py
#: EMBEDDING_SIZE = 10)
SALES_FEATURES = 17 * 10 + 1
#: Netflix-full item count, DeepRecommender README "Data stats" (Items train)
NETFLIX_ITEMS = 17768


def _dense_stack(net: Network, x: str, widths, names, act: str | None, last_act: str | None) -> str:
    """Linear layers ``widths[i] -> widths[i + 1]`` named ``names[i]``, each followed by
    ``act`` (the last by ``last_act``)."""
    for i, name in enumerate(names):
        x = net.add(L.Linear(widths[i], widths[i + 1]), x, name=name)
        a = last_act if i == len(names) - 1 else act
        if a is not None:
            x = net.add(L.Activation(a), x, name=f"{name}.{a}")
    return x


def mlp_sales(features: int = SALES_FEATURES) -> Network:
    """Graphcore's sales-forecasting MLP (graphcore/examples, applications/tensorflow/
    sales_forecasting/model.py, ``MLPModel``): dense 1000-1000-1000-500 with ReLU, a
    1-wide regression head and a sigmoid. Layer names are the example's (``d0`` ... ``d3``,
    ``df``, without the ``_l2tag`` suffix).

    Scope, stated: the input is the example's concatenated feature vector (17 embedded
    categorical columns x 10 + 1 continuous = 171 values); the embedding lookups and the
    continuous column's batch norm before it (about 13k multiply-adds per sample, against
    the MLP's 2.67 M) are not layers, and the head's final scaling by ``1.2 * log(max sales)``
    (a data constant) is left to the host. Dropout 0.5 before the head is training-only.
    """
    net = Network("mlp_sales")
    x = net.input("features", (int(features),))
    y = _dense_stack(net, x, (int(features), 1000, 1000, 1000, 500, 1),
                     ("d0", "d1", "d2", "d3", "df"), "relu", "sigmoid")
    net.output(y)
    return net


def deeprec_autoencoder(items: int = NETFLIX_ITEMS, hidden: tuple[int, ...] = (512, 512, 1024)) -> Network:
    """NVIDIA DeepRecommender (Kuchaiev & Ginsburg 2017, "Training Deep AutoEncoders for
    Collaborative Filtering"; github.com/NVIDIA/DeepRecommender): the README's Netflix-full
    model ``n,512,512,1024,dp(0.8),512,512,n`` with SELU after every layer (the README's
    ``run.py --hidden_layers 512,512,1024 --non_linearity_type selu --drop_prob 0.8``,
    unconstrained decoder, last-layer activation kept), n = 17,768 items.

    Layers ``encode.i`` / ``decode.i`` hold the module's ``encode_w.i``/``encode_b.i`` and
    ``decode_w.i``/``decode_b.i`` as ``weight``/``bias``. The dropout (0.8) on the code layer
    is training-only and not a layer. The input is the dense rating vector (the repo
    densifies its sparse batches before the forward pass, ``mb.to_dense()``).
    """
    widths = (int(items),) + tuple(int(h) for h in hidden)
    net = Network("deeprec_autoencoder")
    x = net.input("ratings", (widths[0],))
    n = len(widths) - 1
    z = _dense_stack(net, x, widths, [f"encode.{i}" for i in range(n)], "selu", "selu")
    y = _dense_stack(net, z, widths[::-1], [f"decode.{i}" for i in range(n)], "selu", "selu")
    net.output(y)
    return net


def _reparameterise(net: Network, h: str, width: int, latent: int,
                    heads: tuple[str, str]) -> tuple[str, str, str]:
    """``mu`` and ``logvar`` heads, then ``z = mu + eps * exp(0.5 * logvar)`` with ``eps``
    a network input (Kingma & Welling 2014, eq. 10): ``(z, mu, logvar)``."""
    mu = net.add(L.Linear(width, latent), h, name=heads[0])
    logvar = net.add(L.Linear(width, latent), h, name=heads[1])
    eps = net.input("eps", (latent,))
    std = net.add(L.Exp(0.5), logvar, name="std")
    z = net.add(L.Mul(), eps, std, name="eps_std")
    z = net.add(L.Add(), mu, z, name="z")
    return z, mu, logvar


def vae_dense(image: int = 784, hidden: int = 400, latent: int = 20) -> Network:
    """The dense MNIST VAE of Kingma & Welling 2014 (784-400-20, ReLU encoder/decoder,
    sigmoid output) as pytorch/examples ``vae/main.py`` defines it, with its layer names:
    ``fc1`` (784 -> 400), ``fc21`` (mu), ``fc22`` (log-variance), ``fc3`` (20 -> 400),
    ``fc4`` (400 -> 784). Inputs ``x`` (784,) and ``eps`` (20,); outputs the reconstruction
    (first), ``fc21`` and ``fc22``."""
    net = Network("vae_dense")
    x = net.input("x", (int(image),))
    h = _dense_stack(net, x, (int(image), int(hidden)), ["fc1"], "relu", "relu")
    z, mu, logvar = _reparameterise(net, h, int(hidden), int(latent), ("fc21", "fc22"))
    y = _dense_stack(net, z, (int(latent), int(hidden), int(image)), ["fc3", "fc4"], "relu", "sigmoid")
    net.output(y, mu, logvar)
    return net


# --------------------------------------------------------------------------- transposed conv
def _subpixel_window(k: int, s: int, p: int) -> tuple[int, int]:
    """The sub-pixel conv's (kernel, padding) for ConvTranspose2d(k, stride s, padding p):
    output ``s*m + a`` reads inputs ``m + d`` with ``d = (a + p - kh) / s``; the window is
    widened to the symmetric [-D, D] (zero taps) a conv with symmetric padding reads."""
    ds = [(a + p - kh) // s for a in range(s) for kh in range(k) if (a + p - kh) % s == 0]
    d = max(abs(min(ds)), abs(max(ds)))
    return 2 * d + 1, d


def subpixel_weight(weight: np.ndarray, bias: np.ndarray | None, stride: int,
                    padding: int) -> tuple[np.ndarray, np.ndarray | None]:
    """A ``torch.nn.ConvTranspose2d`` weight (C_in, C_out, k, k) (and bias (C_out,)) as the
    weight ((C_out * s * s), C_in, k', k') (and bias) of the sub-pixel conv
    :func:`conv_transpose` builds: channel ``(co * s + a) * s + b`` computes output phase
    (a, b), its taps the transposed conv's that reach that phase (zero elsewhere)."""
    w = np.asarray(weight, np.float32)
    if w.ndim != 4 or w.shape[2] != w.shape[3]:
        raise ValueError(f"ConvTranspose2d weight must be (C_in, C_out, k, k), got {w.shape}")
    cin, cout, k, _ = w.shape
    s, p = int(stride), int(padding)
    kk, pp = _subpixel_window(k, s, p)
    out = np.zeros((cout, s, s, cin, kk, kk), np.float32)
    for a in range(s):
        for dy in range(kk):
            kh = a + p - s * (dy - pp)
            if not 0 <= kh < k:
                continue
            for b in range(s):
                for dx in range(kk):
                    kw = b + p - s * (dx - pp)
                    if 0 <= kw < k:
                        out[:, a, b, :, dy, dx] = w[:, :, kh, kw].T
    b_out = None if bias is None else np.repeat(np.asarray(bias, np.float32), s * s)
    return out.reshape(cout * s * s, cin, kk, kk), b_out


def conv_transpose(net: Network, x: str, name: str, shape: tuple[int, int, int], cout: int,
                   kernel: tuple[int, int, int], act: str | None) -> str:
    """``torch.nn.ConvTranspose2d(C, cout, k, stride, padding, output_padding)``, ``kernel`` =
    (k, stride, padding), with the
    output padding ``stride + 2 * padding - k`` that makes the output ``stride`` x the input
    (with bias) on an input of per-sample ``shape`` (C, H, W), then ``act``: built as its
    sub-pixel equivalent (Shi et al. 2016), a conv to ``cout * stride**2`` channels (weights
    from :func:`subpixel_weight`) and a depth-to-space rearrangement (Reshape, Permute,
    Reshape). Stated: for stride 2 and a 3x3 kernel that conv does the multiply-adds of a
    conv over the zero-upsampled input, which is how PopLibs plans a transposed conv (the
    backward-data pass of a strided conv, :func:`ipukern.conv.backward_data_pass`)."""
    c, h, w = shape
    k, stride, padding = (int(v) for v in kernel)
    if not 0 <= stride + 2 * padding - k < max(stride, 1):
        raise ValueError(f"{name}: ConvTranspose2d(kernel {k}, stride {stride}, padding {padding}) "
                         "has no output padding making its output stride x its input")
    kk, pp = _subpixel_window(k, stride, padding)
    y = net.add(L.Conv2d(c, cout * stride * stride, kk, padding=pp, bias=True), x, name=name)
    if stride > 1:
        s = stride
        y = net.add(L.Reshape((-1, cout, s, s, h, w)), y, name=f"{name}.phases")
        y = net.add(L.Permute((0, 1, 4, 2, 5, 3)), y, name=f"{name}.depth_to_space")
        y = net.add(L.Reshape((-1, cout, h * s, w * s)), y, name=f"{name}.interleaved")
    if act is not None:
        y = net.add(L.Activation(act), y, name=f"{name}.{act}")
    return y


def vae_conv(image_size: int = 28, latent: int = 2) -> Network:
    """A convolutional VAE of the Keras example's shape (keras.io/examples/generative/vae,
    "Variational AutoEncoder", F. Chollet 2020), in PyTorch's NCHW and padding conventions:
    encoder ``conv1`` 3x3/2 32 and ``conv2`` 3x3/2 64 (ReLU), ``fc`` 16 (ReLU), ``z_mean`` and
    ``z_log_var`` (``latent`` = 2); decoder ``dec_fc`` to 64 x 7 x 7 (ReLU), ``deconv1`` 3x3/2
    64 and ``deconv2`` 3x3/2 32 (ReLU), ``deconv3`` 3x3/1 to 1 channel (sigmoid), each a
    ``ConvTranspose2d(padding=1, output_padding=stride-1)`` (:func:`conv_transpose`). Inputs
    ``x`` (1, S, S) and ``eps`` (latent,); outputs the reconstruction, mu, log-variance."""
    s = int(image_size)
    if s < 4 or s % 4:
        raise ValueError(f"vae_conv: image_size must be a positive multiple of 4, got {image_size!r}")
    q = s // 4
    net = Network("vae_conv")
    x = net.input("x", (1, s, s))
    h = net.add(L.Conv2d(1, 32, 3, stride=2, padding=1, bias=True), x, name="conv1")
    h = net.add(L.ReLU(), h, name="conv1.relu")
    h = net.add(L.Conv2d(32, 64, 3, stride=2, padding=1, bias=True), h, name="conv2")
    h = net.add(L.ReLU(), h, name="conv2.relu")
    h = net.add(L.Flatten(), h, name="flatten")
    h = _dense_stack(net, h, (64 * q * q, 16), ["fc"], "relu", "relu")
    z, mu, logvar = _reparameterise(net, h, 16, int(latent), ("z_mean", "z_log_var"))
    d = _dense_stack(net, z, (int(latent), 64 * q * q), ["dec_fc"], "relu", "relu")
    d = net.add(L.Reshape((-1, 64, q, q)), d, name="dec_fc.unflatten")
    d = conv_transpose(net, d, "deconv1", (64, q, q), 64, (3, 2, 1), "relu")
    d = conv_transpose(net, d, "deconv2", (64, 2 * q, 2 * q), 32, (3, 2, 1), "relu")
    d = conv_transpose(net, d, "deconv3", (32, s, s), 1, (3, 1, 1), "sigmoid")
    net.output(d, mu, logvar)
    return net
