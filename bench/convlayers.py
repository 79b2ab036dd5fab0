"""Synthetic conv/matmul layers split over tiles, for the conv-kernel benchmarks.

A layer is cut into vertices by (batch, group, out-channel, out-row) chunks (ragged where
the counts do not divide) the way a planner would place it on 1472 tiles: each vertex gets
its input window (with the halo rows its taps need), its weights and room for its output in
its own tile row of an arena. ``gather`` reassembles the full output to check the kernel
against PyTorch / NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` balanced [lo, hi) ranges covering 0..n (sizes differ by at most one)."""
    edges = np.linspace(0, n, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


@dataclass
class TileBatch:
    data: np.ndarray        # (n_tiles, row_bytes) uint8 arena
    tiles: np.ndarray
    win_off: np.ndarray
    w_off: np.ndarray
    out_off: np.ndarray
    dims: np.ndarray
    params: tuple           # kh, kw, sh, sw, dh, dw
    in_dt: int
    out_dt: int
    flops: int              # useful FLOPs (2 per MAC, no padding or garbage columns)
    place: list             # per vertex: where its output goes in the full result
    out_shape: tuple
    kind: str

    @property
    def arena_bytes_touched(self) -> int:
        d = self.dims
        kh, kw = self.params[:2]
        isz = 2 if self.in_dt else 4
        osz = 2 if self.out_dt else 4
        B, G, C, K, WR, WC, OR, OC = (d[:, i] for i in range(8))
        return int((B * G * C * WR * WC * isz + G * K * C * kh * kw * isz
                    + B * G * K * OR * OC * osz).sum())

    def gather(self) -> np.ndarray:
        """The full output (conv: N, Cout, OH, OW; matmul: M, N summed over K splits) in fp64."""
        npo = np.float16 if self.out_dt else np.float32
        osz = np.dtype(npo).itemsize
        out = np.zeros(self.out_shape, dtype=np.float64)
        for v, p in enumerate(self.place):
            B, G, C, K, WR, WC, OR, OC = self.dims[v, :8]
            n = int(B * G * K * OR * OC)
            t, o = int(self.tiles[v]), int(self.out_off[v])
            blk = self.data[t, o:o + n * osz].view(npo).reshape(B, G, K, OR, OC).astype(np.float64)
            if self.kind == "matmul":
                m0, m1, n0, n1 = p
                out[m0:m1, n0:n1] += blk[0, 0, :, 0, :]
            else:
                (b0, b1), gs, (k0, k1), (y0, y1), kpg = p
                for gi, g in enumerate(range(*gs)):
                    out[b0:b1, g * kpg + k0:g * kpg + k1, y0:y1, :] = blk[:, gi]
        return out


def _arena(blocks, n_tiles):
    row = max(sum(-(-b.nbytes // 64) * 64 for b in bl) for bl in blocks)
    row = max(64, -(-row // 4096) * 4096)
    data = np.zeros((n_tiles, row), dtype=np.uint8)
    return data


def conv_layer(x, w, *, stride=1, padding=0, dilation=1, groups=1, split=(1, 1, 1, 1),
               out_dtype=None, n_tiles=None) -> TileBatch:
    """Cut conv2d(x, w) (NCHW, PyTorch semantics, symmetric padding) into vertices.

    split = (batch parts, group parts, out-channel-per-group parts, out-row parts).
    """
    N, Cin, H, W = x.shape
    Cout, cpg, kh, kw = w.shape
    sh = sw = stride
    dh = dw = dilation
    OH = (H + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    OW = (W + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    kpg = Cout // groups
    in_dt = 1 if x.dtype == np.float16 else 0
    out_dt = in_dt if out_dtype is None else (1 if np.dtype(out_dtype) == np.float16 else 0)
    osz = 2 if out_dt else 4
    xg = x.reshape(N, groups, cpg, H, W)
    wg = w.reshape(groups, kpg, cpg, kh, kw)
    verts = []
    for bc in chunks(N, split[0]):
        for gc in chunks(groups, split[1]):
            for kc in chunks(kpg, split[2]):
                for rc in chunks(OH, split[3]):
                    y0, y1 = rc
                    r_first = y0 * sh - padding
                    r_last = (y1 - 1) * sh + (kh - 1) * dh - padding
                    lo, hi = max(r_first, 0), min(r_last + 1, H)
                    # tile layout [B][WR][G*C][WC]: rows outermost (ipukern/convlayout.py)
                    win = np.ascontiguousarray(
                        xg[bc[0]:bc[1], gc[0]:gc[1], :, lo:hi, :].transpose(0, 3, 1, 2, 4))
                    wts = np.ascontiguousarray(wg[gc[0]:gc[1], kc[0]:kc[1]])
                    B, G, K, OR = bc[1] - bc[0], gc[1] - gc[0], kc[1] - kc[0], y1 - y0
                    dims = (B, G, cpg, K, hi - lo, W, OR, OW, r_first - lo, -padding)
                    out_nb = B * G * K * OR * OW * osz
                    verts.append((win, wts, out_nb, dims, (bc, gc, kc, rc, kpg)))
    return _place(verts, (kh, kw, sh, sw, dh, dw), in_dt, out_dt, (N, Cout, OH, OW), "conv",
                  flops=2 * N * Cout * OH * OW * cpg * kh * kw, n_tiles=n_tiles)


def matmul_layer(a, b, *, split=(1, 1, 1), out_dtype=None, n_tiles=None) -> TileBatch:
    """Cut a (M, K) @ (K, N) matmul into vertices: split = (M parts, K parts, N parts).

    Each vertex is the conv kernel's GEMM form: B=1, G=1, C=K-slice, K=M-slice, WR=OR=1,
    WC=OC=N-slice, 1x1 kernel; its output is a partial sum over its K-slice."""
    M, Kd = a.shape
    Nd = b.shape[1]
    in_dt = 1 if a.dtype == np.float16 else 0
    out_dt = in_dt if out_dtype is None else (1 if np.dtype(out_dtype) == np.float16 else 0)
    osz = 2 if out_dt else 4
    verts = []
    for mc in chunks(M, split[0]):
        for kc in chunks(Kd, split[1]):
            for nc in chunks(Nd, split[2]):
                win = np.ascontiguousarray(b[kc[0]:kc[1], nc[0]:nc[1]])
                wts = np.ascontiguousarray(a[mc[0]:mc[1], kc[0]:kc[1]])
                m, k, n = mc[1] - mc[0], kc[1] - kc[0], nc[1] - nc[0]
                verts.append((win, wts, m * n * osz, (1, 1, k, m, 1, n, 1, n, 0, 0),
                              (mc[0], mc[1], nc[0], nc[1])))
    return _place(verts, (1, 1, 1, 1, 1, 1), in_dt, out_dt, (M, Nd), "matmul",
                  flops=2 * M * Kd * Nd, n_tiles=n_tiles)


def _place(verts, params, in_dt, out_dt, out_shape, kind, flops, n_tiles):
    V = len(verts)
    n_tiles = V if n_tiles is None else n_tiles
    if V > n_tiles:
        raise ValueError(f"{V} vertices do not fit {n_tiles} tiles")
    data = _arena([(win, wts, np.empty(out_nb, np.uint8)) for win, wts, out_nb, _, _ in verts], n_tiles)
    tiles = np.arange(V, dtype=np.int32)
    win_off, w_off, out_off, dims, place = [], [], [], [], []
    for v, (win, wts, out_nb, d, p) in enumerate(verts):
        o = 0
        win_off.append(o)
        data[v, o:o + win.nbytes] = win.reshape(-1).view(np.uint8)
        o += -(-win.nbytes // 64) * 64
        w_off.append(o)
        data[v, o:o + wts.nbytes] = wts.reshape(-1).view(np.uint8)
        o += -(-wts.nbytes // 64) * 64
        out_off.append(o)
        data[v, o:o + out_nb] = 0xFF   # NaN pattern: every output must be written
        dims.append(d)
        place.append(p)
    return TileBatch(data, tiles, np.array(win_off, np.int64), np.array(w_off, np.int64),
                     np.array(out_off, np.int64), np.array(dims, np.int64), params, in_dt, out_dt,
                     flops, place, out_shape, kind)
