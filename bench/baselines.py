"""Same-run baselines for the benchmarks: PyTorch CPU (when installed) and plain NumPy.

The NumPy conv is the fastest simple formulation (a strided window view contracted with
the weights by one einsum/matmul per group in float32); it is a speed baseline, not the
tests' reference (tests/_support/reference.py is the slow, obvious one).
"""
from __future__ import annotations

import numpy as np

try:  # optional: torch is a baseline, never a dependency
    import torch
except ImportError:  # pragma: no cover
    torch = None


def numpy_conv2d(x, w, stride=1, padding=0, groups=1):
    n, c, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]                       # n, c, oh, ow, kh, kw
    cog = co // groups
    outs = []
    for g in range(groups):
        xs = win[:, g * cig:(g + 1) * cig]
        ws = w[g * cog:(g + 1) * cog]
        outs.append(np.einsum("ncyxij,kcij->nkyx", xs, ws, optimize=True))
    return np.concatenate(outs, axis=1)


def torch_conv2d(x, w, stride=1, padding=0, groups=1):
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    return lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding, groups=groups)


def torch_network(net, params):
    """PyTorch eager CPU forward of an ipukern Network (float32), layer by layer with
    torch.nn.functional, batch norms applied (not folded) as eager PyTorch runs them."""
    import torch.nn.functional as F

    from ipukern.nn import layers as L

    P = {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in params.items()}
    acts = {"relu": F.relu, "relu6": F.relu6, "silu": F.silu, "sigmoid": torch.sigmoid,
            "tanh": torch.tanh, "gelu": lambda t: F.gelu(t, approximate="tanh")}

    def layer_fn(name, lay, a):
        def p(k):
            return P[f"{name}.{k}"]
        if isinstance(lay, L.Conv2d):
            return F.conv2d(a[0], p("weight"), P.get(f"{name}.bias"), lay.stride, lay.padding,
                            lay.dilation, lay.groups)
        if isinstance(lay, L.BatchNorm2d):
            return F.batch_norm(a[0], p("running_mean"), p("running_var"), p("weight"), p("bias"),
                                eps=lay.eps)
        if isinstance(lay, L.Activation):
            return acts[lay.kind](a[0])
        if isinstance(lay, L.Add):
            return a[0] + a[1]
        if isinstance(lay, L.MaxPool2d):
            return F.max_pool2d(a[0], lay.kernel_size, lay.stride, lay.padding)
        if isinstance(lay, L.GlobalAvgPool):
            return F.adaptive_avg_pool2d(a[0], 1)
        if isinstance(lay, L.ScaleChannels):
            return a[0] * a[1]
        if isinstance(lay, L.Flatten_):
            return torch.flatten(a[0], 1)
        if isinstance(lay, L.Linear):
            return F.linear(a[0], p("weight"), P.get(f"{name}.bias"))
        raise NotImplementedError(f"torch baseline: {lay.describe()}")

    def forward(x):
        env = {net.inputs[0]: x}
        with torch.no_grad():
            for name, node in net.nodes.items():
                if node.layer is not None:
                    env[name] = layer_fn(name, node.layer, [env[i] for i in node.inputs])
        return env[net.outputs[0]]

    return forward
