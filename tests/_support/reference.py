"""Slow, obvious NumPy versions of every kernel: the executable specification.

Nothing here imports ipukern's kernels or shares their code.
"""
from __future__ import annotations

import numpy as np


def exchange(data: np.ndarray, src_tile, src_off, dst_tile, dst_off, nbytes) -> np.ndarray:
    """Apply a copy table to a (n_tiles, row) byte array: every copy reads the state
    before the exchange. Returns a new array."""
    before = data.copy()
    out = data.copy()
    for st, so, dt, do, n in zip(src_tile, src_off, dst_tile, dst_off, nbytes):
        out[dt, do:do + n] = before[st, so:so + n]
    return out


def exchange_loads(src_tile, src_off, dst_tile, nbytes, n_tiles: int, tiles_per_bus: int):
    """Per-tile (recv, paired, send) bytes of a copy table, by dictionaries.

    recv: bytes received; send: distinct (src_tile, src_off, nbytes) regions a tile sends,
    counted once however many tiles receive them; paired: bytes a tile receives from a
    source region that another tile on its bus (dst_tile // tiles_per_bus) also receives.
    """
    recv = np.zeros(n_tiles, dtype=np.int64)
    send = np.zeros(n_tiles, dtype=np.int64)
    paired = np.zeros(n_tiles, dtype=np.int64)
    regions = set()
    receivers: dict[tuple, set] = {}
    for st, so, dt, n in zip(src_tile, src_off, dst_tile, nbytes):
        st, so, dt, n = int(st), int(so), int(dt), int(n)
        recv[dt] += n
        regions.add((st, so, n))
        receivers.setdefault((dt // tiles_per_bus, st, so, n), set()).add(dt)
    for st, _so, n in regions:
        send[st] += n
    if tiles_per_bus > 1:
        for (_, _, _, n), tiles in receivers.items():
            if len(tiles) > 1:
                for t in tiles:
                    paired[t] += n
    return recv, paired, send


# --------------------------------------------------------------------------- convolution
def _pair(v):
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    a, b = v
    return int(a), int(b)


def _taps_einsum(xp, w, out_hw, stride, dilation):
    """sum over (c, i, j) of xp[n, g, c, y*sh + i*dh, x*sw + j*dw] * w[g, k, c, i, j], in
    float64, for an already zero-padded xp of shape (n, g, c, Hp, Wp)."""
    n, G, C = xp.shape[:3]
    K, kh, kw = w.shape[1], w.shape[3], w.shape[4]
    OR, OC = out_hw
    sh, sw = stride
    dh, dw = dilation
    out = np.zeros((n, G, K, OR, OC), dtype=np.float64)
    if min(n, G, K, OR, OC) == 0:
        return out
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            patch = xp[:, :, :, r0:r0 + (OR - 1) * sh + 1:sh, c0:c0 + (OC - 1) * sw + 1:sw]
            # numpy's own einsum loop (optimize=False: no BLAS), so 0 * inf gives NaN as in torch
            out += np.einsum("ngcyx,gkc->ngkyx", patch, w[:, :, :, i, j], optimize=False)
    return out


def conv_tile_reference(win, wts, out_rows, out_cols, row_org, col_org,
                        kernel, stride=(1, 1), dilation=(1, 1)):
    """One conv vertex, in float64: the executable specification of ``_conv.conv_tiles``.

    Parameters
    ----------
    win : ndarray of shape (B, G, C, WR, WC)
        The tile's input window (any float dtype; converted to float64).
    wts : ndarray of shape (G, K, C, kh, kw)
    out_rows, out_cols : int
        OR, OC.
    row_org, col_org : int
        Window row/column read by output (0, 0) and tap (0, 0); may be negative. Taps
        outside [0, WR) x [0, WC) read zero (zero padding).
    kernel, stride, dilation : (int, int)

    Returns
    -------
    ndarray of shape (B, G, K, OR, OC), float64:
        out[b, g, k, y, x] = sum_{c,i,j} win[b, g, c, y*sh + i*dh + row_org,
                                         x*sw + j*dw + col_org] * wts[g, k, c, i, j]
    """
    win = np.asarray(win, dtype=np.float64)
    wts = np.asarray(wts, dtype=np.float64)
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    B, G, C, WR, WC = win.shape
    assert wts.shape[0] == G and wts.shape[2] == C and wts.shape[3:] == (kh, kw), (win.shape, wts.shape)
    # explicit zero padding: the rows/cols the taps can reach, [org, org + span)
    span_r = max(0, (out_rows - 1) * sh + (kh - 1) * dh + 1)
    span_c = max(0, (out_cols - 1) * sw + (kw - 1) * dw + 1)
    xp = np.zeros((B, G, C, span_r, span_c), dtype=np.float64)
    r_lo, r_hi = max(row_org, 0), min(row_org + span_r, WR)
    c_lo, c_hi = max(col_org, 0), min(col_org + span_c, WC)
    if r_hi > r_lo and c_hi > c_lo:
        xp[:, :, :, r_lo - row_org:r_hi - row_org, c_lo - col_org:c_hi - col_org] = \
            win[:, :, :, r_lo:r_hi, c_lo:c_hi]
    return _taps_einsum(xp, wts, (out_rows, out_cols), (sh, sw), (dh, dw))


def conv2d_nchw(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Grouped 2-D convolution with PyTorch ``conv2d`` semantics, in float64.

    Parameters
    ----------
    x : ndarray of shape (N, C_in, H, W)
    w : ndarray of shape (C_out, C_in // groups, kh, kw)
    bias : ndarray of shape (C_out,), optional
    stride, dilation : int or (int, int)
    padding : int, (int, int), "valid" or "same" (stride 1 only; as in PyTorch the odd
        extra pad goes to the bottom/right)
    groups : int

    Returns
    -------
    ndarray of shape (N, C_out, OH, OW), float64, computed by explicit zero padding and a
    sum over taps (no BLAS, so 0 * inf gives NaN like PyTorch).
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    N, Cin, H, W = x.shape
    Cout, cpg, kh, kw = w.shape
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    if Cin % groups or Cout % groups or cpg != Cin // groups:
        raise ValueError(f"channels {Cin} -> {Cout} with weight {w.shape} do not fit groups={groups}")
    if isinstance(padding, str):
        if padding == "valid":
            pt = pb = pl = pr = 0
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError("padding='same' needs stride 1 (as in PyTorch)")
            th, tw = dh * (kh - 1), dw * (kw - 1)
            pt, pl = th // 2, tw // 2
            pb, pr = th - pt, tw - pl
        else:
            raise ValueError(f"padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    else:
        ph, pw = _pair(padding)
        pt = pb = ph
        pl = pr = pw
    Hp, Wp = H + pt + pb, W + pl + pr
    OH = (Hp - dh * (kh - 1) - 1) // sh + 1
    OW = (Wp - dw * (kw - 1) - 1) // sw + 1
    if OH < 1 or OW < 1:
        raise ValueError(f"input {H}x{W} with padding is smaller than the dilated kernel")
    xp = np.zeros((N, Cin, Hp, Wp), dtype=np.float64)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    xg = xp.reshape(N, groups, cpg, Hp, Wp)
    wg = w.reshape(groups, Cout // groups, cpg, kh, kw)
    out = _taps_einsum(xg, wg, (OH, OW), (sh, sw), (dh, dw)).reshape(N, Cout, OH, OW)
    if bias is not None:
        out += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return out


def check_conv(x, w, out, dtype, bias=None, **kw) -> None:
    """Assert a conv's output is within the tests' bounds of the float64 reference: fp32
    ``|out - ref| <= 1e-5 * sum|x*w|``; fp16 with float partials ``<= 2^-11 * |ref| +
    1e-6 * sum|x*w|`` (plus one more 2^-11 * sum|..| with a bias, added after rounding)."""
    ref = conv2d_nchw(x, w, bias, **kw)
    mag = conv2d_nchw(np.abs(x), np.abs(w), None if bias is None else np.abs(bias), **kw)
    err = np.abs(out.astype(np.float64) - ref)
    if dtype == "float32":
        assert np.all(err <= 1e-5 * mag + 1e-30)
    else:
        assert np.all(err <= 2.0 ** -11 * np.abs(ref) + (1e-6 + (2.0 ** -11 if bias is not None else 0))
                      * mag + 1e-7)


def conv_operands(x_shape, w_shape, dtype, seed: int = 0):
    """Standard-normal input, weights and bias of a conv (bias: one per out-channel)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape, w_shape[:1]))


def lamb_step(p, g, st, step, opt):
    """One LAMB step (You et al. 2020, Alg. 2, bias-corrected moments, phi = identity) in
    float64: ``(new p, (m, v))``; ``opt`` an ``ipukern.Optimizer`` (its hyper-parameters)."""
    (b1, b2), eps, wd = opt.betas, opt.eps, opt.weight_decay
    m, v = st
    p, g = p.astype(np.float64), g.astype(np.float64)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    r = (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + eps) + wd * p
    pn, rn = np.linalg.norm(p), np.linalg.norm(r)
    ratio = pn / rn if pn > 0 and rn > 0 else 1.0
    return p - opt.lr * ratio * r, (m, v)


def lars_step(p, g, st, step, opt):
    """One LARS step (You, Gitman, Ginsburg 2017) as TensorFlow's LARSOptimizer in Graphcore's
    MLPerf v1.1 ResNet-50 code, in float64: ``(new p, (v,))``, ``v`` the lr-scaled momentum;
    1-D tensors (biases, norm scales and shifts) are skipped: plain lr, no weight decay."""
    (v,), wd = st, opt.weight_decay
    p, g = p.astype(np.float64), g.astype(np.float64)
    lr = opt.lr
    if p.ndim >= 2:
        wn, gn = np.linalg.norm(p), np.linalg.norm(g)
        lr *= opt.eta * wn / (gn + wd * wn + opt.eps) if wn > 0 and gn > 0 else 1.0
        g = g + wd * p
    v = opt.momentum * v + lr * g
    return p - v, (v,)


def layout_copy_table(n: int, itemsize: int, a: tuple, b: tuple) -> tuple[np.ndarray, ...]:
    """The copy table between two layouts of n elements, element by element: a copy starts
    at every logical element where either layout starts a new piece (a new mapping
    interval or a new stored row of its unpermuted trailing axes). Each layout is
    ``(shape, perm, start, count, tile, byte_offset)``."""
    where = []
    for shape, perm, start, _count, tile, off in (a, b):
        nd = len(shape)
        k = 0
        while k < nd and perm[nd - 1 - k] == nd - 1 - k:
            k += 1
        row = int(np.prod(shape[nd - k:], dtype=np.int64)) if k else 1
        stored = np.arange(n).reshape(shape).transpose(perm).reshape(-1)   # logical of stored
        s_of = np.empty(n, np.int64)
        s_of[stored] = np.arange(n)
        iv = np.searchsorted(np.asarray(start), s_of, side="right") - 1
        piece = iv * (n + 1) + s_of // row
        byte = np.asarray(off)[iv] + (s_of - np.asarray(start)[iv]) * itemsize
        where.append((piece, np.asarray(tile)[iv], byte))
    new = np.ones(n, bool)
    new[1:] = (where[0][0][1:] != where[0][0][:-1]) | (where[1][0][1:] != where[1][0][:-1])
    first = np.flatnonzero(new)
    size = np.diff(np.append(first, n)) * itemsize
    return (where[0][1][first], where[0][2][first], where[1][1][first], where[1][2][first], size)

