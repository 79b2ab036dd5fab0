"""Numba kernels of the optimizer vertices: one call runs every vertex of a batch.

Vertex ``v`` updates ``n[v]`` float32 elements that live on tile ``tiles[v]`` at the byte
offsets in ``off[v]`` (param, grad, state 1, state 2, scratch; unused slots are ignored).
Arithmetic is float32, operation by operation in the order ``torch.optim`` uses, so one
step matches PyTorch's to rounding. ``h`` holds the step's scalars (see optim.py).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _f32(data, t, off, n):
    return data[t, off:off + 4 * n].view(np.float32)


@njit(cache=True, nogil=True)
def _moments(data, t, o, n):
    """(param, grad, first moment, second moment) views of one vertex."""
    return (_f32(data, t, o[0], n), _f32(data, t, o[1], n), _f32(data, t, o[2], n),
            _f32(data, t, o[3], n))


@njit(cache=True, nogil=True)
def sgd(data, tiles, off, n, h):
    # h: lr, weight_decay
    lr, wd = np.float32(h[0]), np.float32(h[1])
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p = _f32(data, t, off[v, 0], n[v])
        g = _f32(data, t, off[v, 1], n[v])
        for i in range(n[v]):
            d = g[i] + wd * p[i] if wd != 0 else g[i]
            p[i] = p[i] - lr * d


@njit(cache=True, nogil=True)
def sgd_momentum(data, tiles, off, n, h):
    # h: lr, weight_decay, momentum, 1 - dampening, first (1.0 on the first step: buf = d)
    lr, wd, mom, keep = np.float32(h[0]), np.float32(h[1]), np.float32(h[2]), np.float32(h[3])
    first = h[4] != 0
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p = _f32(data, t, off[v, 0], n[v])
        g = _f32(data, t, off[v, 1], n[v])
        b = _f32(data, t, off[v, 2], n[v])
        for i in range(n[v]):
            d = g[i] + wd * p[i] if wd != 0 else g[i]
            if first:
                b[i] = d
            else:
                b[i] = b[i] * mom + keep * d
            p[i] = p[i] - lr * b[i]


@njit(cache=True, nogil=True)
def adam(data, tiles, off, n, h):
    # h: lr, weight_decay, 1 - beta1, beta2, eps, step_size (lr / bc1), sqrt(bc2), 1 - beta2
    # (the 1 - beta constants are formed in float64 on the host, as torch does)
    wd, w1, b2, eps = np.float32(h[1]), np.float32(h[2]), np.float32(h[3]), np.float32(h[4])
    w2 = np.float32(h[7])
    step, bc2s = np.float32(h[5]), np.float32(h[6])
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p, g, m, s = _moments(data, t, off[v], n[v])
        for i in range(n[v]):
            d = g[i] + wd * p[i] if wd != 0 else g[i]
            m[i] = m[i] + w1 * (d - m[i])
            s[i] = s[i] * b2 + w2 * d * d
            den = np.sqrt(s[i]) / bc2s + eps
            p[i] = p[i] - step * (m[i] / den)


@njit(cache=True, nogil=True)
def lamb_direction(data, tiles, off, n, h, sums):
    """LAMB phase 1: moments, the update direction r (into scratch) and this vertex's
    partial sums of p^2 and r^2 (float32, written to ``sums`` on the tile)."""
    # h: lr, weight_decay, beta1, beta2, eps, 1/bc1, 1/bc2, 1 - beta2, 1 - beta1
    wd, b1, b2, eps = np.float32(h[1]), np.float32(h[2]), np.float32(h[3]), np.float32(h[4])
    ibc1, ibc2 = np.float32(h[5]), np.float32(h[6])
    w2, w1 = np.float32(h[7]), np.float32(h[8])
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p, g, m, s = _moments(data, t, off[v], n[v])
        r = _f32(data, t, off[v, 4], n[v])
        pp = np.float32(0)
        rr = np.float32(0)
        for i in range(n[v]):
            m[i] = m[i] * b1 + w1 * g[i]
            s[i] = s[i] * b2 + w2 * g[i] * g[i]
            r[i] = (m[i] * ibc1) / (np.sqrt(s[i] * ibc2) + eps) + wd * p[i]
            pp += p[i] * p[i]
            rr += r[i] * r[i]
        out = _f32(data, t, sums[v], 2)
        out[0] = pp
        out[1] = rr


@njit(cache=True, nogil=True)
def lamb_ratio(data, tiles, src, k, dst):
    """LAMB phase 2, on each tensor's owner tile: sum the k partial (p^2, r^2) pairs at
    ``src`` and write the trust ratio ||p|| / ||r|| (1 if either is 0) at ``dst``."""
    for v in range(tiles.shape[0]):
        t = tiles[v]
        parts = _f32(data, t, src[v], 2 * k[v])
        pp = np.float32(0)
        rr = np.float32(0)
        for j in range(k[v]):
            pp += parts[2 * j]
            rr += parts[2 * j + 1]
        out = _f32(data, t, dst[v], 1)
        pn, rn = np.sqrt(pp), np.sqrt(rr)
        out[0] = pn / rn if pn > 0 and rn > 0 else np.float32(1)


@njit(cache=True, nogil=True)
def lamb_apply(data, tiles, off, n, h, ratio):
    """LAMB phase 3: p -= lr * ratio * r."""
    lr = np.float32(h[0])
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p = _f32(data, t, off[v, 0], n[v])
        r = _f32(data, t, off[v, 4], n[v])
        q = _f32(data, t, ratio[v], 1)[0]
        for i in range(n[v]):
            p[i] = p[i] - (lr * q) * r[i]
