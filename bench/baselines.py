"""Same-run baselines for the benchmarks: PyTorch CPU (when installed) and plain NumPy.

The NumPy conv is the fastest simple formulation (a strided window view contracted with
the weights by one einsum/matmul per group in float32); it is a speed baseline, not the
tests' reference (tests/reference.py is the slow, obvious one).
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
