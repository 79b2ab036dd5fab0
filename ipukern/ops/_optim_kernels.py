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
def _put_pair(data, t, off, a, b):
    """Write one vertex's two float32 partial sums at ``off`` on tile ``t``."""
    out = _f32(data, t, off, 2)
    out[0] = a
    out[1] = b


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
        _put_pair(data, t, sums[v], pp, rr)


@njit(cache=True, nogil=True)
def _norms(data, t, src, k):
    """The two norms from the k partial sum pairs at ``src`` on tile ``t`` (float32)."""
    parts = _f32(data, t, src, 2 * k)
    a = np.float32(0)
    b = np.float32(0)
    for j in range(k):
        a += parts[2 * j]
        b += parts[2 * j + 1]
    return np.sqrt(a), np.sqrt(b)


@njit(cache=True, nogil=True)
def lamb_ratio(data, tiles, src, k, dst):
    """LAMB phase 2, on each tensor's owner tile: sum the k partial (p^2, r^2) pairs at
    ``src`` and write the trust ratio ||p|| / ||r|| (1 if either is 0) at ``dst``."""
    for v in range(tiles.shape[0]):
        t = tiles[v]
        pn, rn = _norms(data, t, src[v], k[v])
        out = _f32(data, t, dst[v], 1)
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


@njit(cache=True, nogil=True)
def lars_norms(data, tiles, off, n, sums):
    """LARS phase 1: this vertex's partial sums of w^2 and g^2 (float32, to ``sums``)."""
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p = _f32(data, t, off[v, 0], n[v])
        g = _f32(data, t, off[v, 1], n[v])
        pp = np.float32(0)
        gg = np.float32(0)
        for i in range(n[v]):
            pp += p[i] * p[i]
            gg += g[i] * g[i]
        _put_pair(data, t, sums[v], pp, gg)


@njit(cache=True, nogil=True)
def lars_ratio(data, tiles, src, k, dst, h):
    """LARS phase 2, on each tensor's owner tile: the local learning rate
    lr * eta ||w|| / (||g|| + wd ||w|| + eps), lr when ||w|| or ||g|| is 0 (TensorFlow's
    LARSOptimizer.compute_lr), written at ``dst``."""
    # h: lr, weight_decay, momentum, eta, eps
    lr, wd, eta, eps = np.float32(h[0]), np.float32(h[1]), np.float32(h[3]), np.float32(h[4])
    for v in range(tiles.shape[0]):
        t = tiles[v]
        wn, gn = _norms(data, t, src[v], k[v])
        trust = eta * wn / (gn + wd * wn + eps) if wn > 0 and gn > 0 else np.float32(1)
        out = _f32(data, t, dst[v], 1)
        out[0] = lr * trust


@njit(cache=True, nogil=True)
def lars_apply(data, tiles, off, n, h, ratio):
    """LARS phase 3: g' = g + wd w, v = m v + lr_local g', w -= v (TensorFlow's apply_momentum
    with learning rate 1 on grad * scaled_lr). ``ratio[v] < 0``: a skipped tensor, lr_local = lr
    and no weight decay."""
    lr, wd, mom = np.float32(h[0]), np.float32(h[1]), np.float32(h[2])
    for v in range(tiles.shape[0]):
        t = tiles[v]
        p = _f32(data, t, off[v, 0], n[v])
        g = _f32(data, t, off[v, 1], n[v])
        b = _f32(data, t, off[v, 2], n[v])
        skip = ratio[v] < 0
        q = lr if skip else _f32(data, t, ratio[v], 1)[0]
        w = np.float32(0) if skip else wd
        for i in range(n[v]):
            d = g[i] + w * p[i]
            b[i] = b[i] * mom + d * q
            p[i] = p[i] - b[i]
