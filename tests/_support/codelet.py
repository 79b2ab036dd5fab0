"""Vertex batches for the compiled per-tile conv kernel's tests (tests/conv/test_codelet.py,
test_bias_epilogue.py): vertices at random tile rows and offsets of a guarded arena, run and
checked against the float64 reference with the bounds stated in test_codelet.py."""
from __future__ import annotations

import numpy as np

from ipukern.conv import codelet as convkernel
from ipukern.conv.codelet import conv_tiles_checked

from tests._support.reference import conv_tile_reference

NP_DT = {0: np.float32, 1: np.float16}


def tile_layout(win):
    """A logical (B, G, C, WR, WC) window as the kernel reads it from tile memory:
    [B][WR][G*C][WC] (rows outermost, see ipukern/convlayout.py), flattened."""
    return np.ascontiguousarray(np.asarray(win).transpose(0, 3, 1, 2, 4)).reshape(-1)


class Batch:
    """Vertices placed at random tile rows and random aligned offsets of an arena whose
    other bytes are random guard bytes."""

    def __init__(self, rng, dims, kernel, stride=(1, 1), dilation=(1, 1), in_dt=0, out_dt=0,
                 n_rows=None, row_bytes=None, values=None):
        self.dims = np.asarray(dims, dtype=np.int64).reshape(-1, 10)
        self.kernel, self.stride, self.dilation = kernel, stride, dilation
        self.in_dt, self.out_dt = in_dt, out_dt
        kh, kw = kernel
        V = self.dims.shape[0]
        self.wins, self.wts = [], []
        for d in self.dims:
            B, G, C, K, WR, WC = (int(v) for v in d[:6])
            if values is None:
                self.wins.append(rng.standard_normal((B, G, C, WR, WC)).astype(NP_DT[in_dt]))
                self.wts.append(rng.standard_normal((G, K, C, kh, kw)).astype(NP_DT[in_dt]))
            else:
                win, wts = values(rng, d)
                self.wins.append(win.astype(NP_DT[in_dt]))
                self.wts.append(wts.astype(NP_DT[in_dt]))
        wb, kb, ob = convkernel.operand_nbytes(self.dims, kh, kw, in_dt, out_dt)
        self.out_nbytes = ob
        need = int((wb + kb + ob).max()) + 3 * 64 + 12 if V else 64
        row = row_bytes or ((need + 255) // 256 * 256)
        n_rows = n_rows or max(V + 3, 4)
        self.data = rng.integers(0, 256, size=(n_rows, row), dtype=np.uint8)
        self.tiles = rng.permutation(n_rows)[:V].astype(np.int32)
        self.win_off = np.zeros(V, np.int64)
        self.w_off = np.zeros(V, np.int64)
        self.out_off = np.zeros(V, np.int64)
        for v in range(V):
            # three regions in a random order with random aligned gaps
            sizes = {"win": int(wb[v]), "w": int(kb[v]), "out": int(ob[v])}
            slack = row - sum(sizes.values())
            gaps = np.sort(rng.integers(0, slack // 4 + 1, size=3)) * 4
            pos = 0
            for i, name in enumerate(rng.permutation(["win", "w", "out"])):
                pos = max(pos, int(gaps[i]))
                getattr(self, f"{name}_off")[v] = pos
                pos = (pos + sizes[name] + 3) // 4 * 4
            t = self.tiles[v]
            o = self.win_off[v]
            # the window is stored rows outermost: [B][WR][G*C][WC]
            self.data[t, o:o + wb[v]] = tile_layout(self.wins[v]).view(np.uint8)
            o = self.w_off[v]
            self.data[t, o:o + kb[v]] = self.wts[v].reshape(-1).view(np.uint8)
        self.before = self.data.copy()

    def run(self, n_threads=2, isa=None, scratch=None, direct=True):
        conv_tiles_checked(self.data, self.tiles, self.win_off, self.w_off, self.out_off, self.dims,
                           *self.kernel, *self.stride, *self.dilation, self.in_dt, self.out_dt,
                           scratch=scratch, n_threads=n_threads, isa=isa, direct=direct)
        return self

    def output(self, v):
        B, G, C, K, WR, WC, OR, OC = (int(x) for x in self.dims[v, :8])
        t, o = self.tiles[v], self.out_off[v]
        n = B * G * K * OR * OC * (2 if self.out_dt else 4)
        return self.data[t, o:o + n].copy().view(NP_DT[self.out_dt]).reshape(B, G, K, OR, OC)

    def reference(self, v, absolute=False):
        d = self.dims[v]
        win, wts = self.wins[v], self.wts[v]
        if absolute:
            win, wts = np.abs(win.astype(np.float64)), np.abs(wts.astype(np.float64))
        return conv_tile_reference(win, wts, int(d[6]), int(d[7]), int(d[8]), int(d[9]),
                                   self.kernel, self.stride, self.dilation)

    def check(self):
        """Every output within the bound; every byte outside the outputs unchanged."""
        untouched = np.ones_like(self.data, dtype=bool)
        for v in range(self.dims.shape[0]):
            got = self.output(v).astype(np.float64)
            ref = self.reference(v)
            s = self.reference(v, absolute=True)
            if self.in_dt == 0 and self.out_dt == 0:
                bound = 1e-5 * s
            else:
                bound = (2.0 ** -11 * np.abs(ref) if self.out_dt else 0.0) + 1e-6 * s + 2.0 ** -25
            err = np.abs(got - ref)
            bad = ~(err <= bound)
            assert not bad.any(), (f"vertex {v} dims {self.dims[v].tolist()}: {int(bad.sum())} outputs "
                                   f"off, worst err {err[bad].max()} vs bound {bound[bad].min()}")
            t, o = self.tiles[v], self.out_off[v]
            untouched[t, o:o + self.out_nbytes[v]] = False
        assert np.array_equal(self.data[untouched], self.before[untouched]), \
            "bytes outside the outputs changed"


def random_dims(rng, n, kernel, stride, dilation, *, max_c=12, max_k=12, groups=(1, 4),
                batch=(1, 3)):
    """Ragged vertices: random B, G, C, K, windows (odd sizes too), origins inside, before
    and after the window (padding), windows smaller than the tap range."""
    kh, kw = kernel
    dims = []
    for _ in range(n):
        B = int(rng.integers(batch[0], batch[1] + 1))
        G = int(rng.integers(groups[0], groups[1] + 1))
        C = int(rng.integers(1, max_c + 1))
        K = int(rng.integers(1, max_k + 1))
        OR = int(rng.integers(1, 9))
        OC = int(rng.integers(1, 40))
        span_r = (OR - 1) * stride[0] + (kh - 1) * dilation[0] + 1
        span_c = (OC - 1) * stride[1] + (kw - 1) * dilation[1] + 1
        ro = int(rng.integers(-(kh - 1) * dilation[0] - 1, 3))
        co = int(rng.integers(-(kw - 1) * dilation[1] - 1, 3))
        WR = max(1, int(rng.integers(span_r // 2, span_r + 3)))
        WC = max(1, int(rng.integers(span_c // 2, span_c + 3)))
        dims.append((B, G, C, K, WR, WC, OR, OC, ro, co))
    return dims


# positions per image (OR, OC) with OR * OC % 16 = 0..15 and a few longer runs, several
# images per vertex: the direct path's output blocks end inside runs and cross images
STORE_TAILS = [(1, 1), (1, 2), (1, 3), (2, 2), (1, 5), (2, 3), (1, 7), (2, 4), (3, 3), (2, 5),
               (1, 11), (3, 4), (1, 13), (2, 7), (3, 5), (4, 4), (1, 17), (4, 7), (7, 7), (1, 31)]


def store_tail_dims(K, batches=(1, 2, 3, 5, 8)):
    """1x1 vertices read in place, one per STORE_TAILS shape, with K output channels."""
    return [(batches[i % len(batches)], 1, 3, K, OR, OC, OR, OC, 0, 0)
            for i, (OR, OC) in enumerate(STORE_TAILS)]
