"""Worked example 1: a 3x3 blur over a large image, the classic BSP stencil.

The image is split into a grid of blocks, one per tile (46 x 32 = all 1472 tiles of a
GC200 for a 4096 x 4096 image: blocks of 89-90 x 128 cells). Each tile keeps its block
inside a buffer with a one-cell halo ring, ``(bh + 2, bw + 2)``. One iteration is one
superstep:

    compute  : every tile blurs its block, reading its halo ring   (tile function)
    sync
    exchange : every tile sends its edge cells into its neighbours' rings (halo exchange)

Two buffers alternate (src -> dst, then dst -> src) because a tile must not overwrite
cells it still reads, and an exchange must not write cells it reads. Ring cells outside
the image stay 0 (zero padding), so after k iterations the result equals k applications
of :func:`blur_reference` -- bit for bit, because the tile function adds the nine cells
in the same order as the NumPy reference and fastmath is off.

Run: ``python -m ipukern.examples.stencil [size] [iterations]``.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import ipukern as ik

NINTH = np.float32(1.0 / 9.0)

# Cycle estimate of one vertex (user-supplied: the simulator cannot see inside the code).
# Per output cell the vector unit does 8 adds + 1 multiply on 2 fp32 lanes (64-bit vector
# path) = 4.5 cycles; loads dual-issue with the arithmetic. The 6 workers each take
# ceil(rows / 6) rows; a tile's time is 6 x the slowest worker (barrel scheduling), plus a
# fixed 50 worker cycles of setup per row loop.
BLUR_WORKER_SETUP_CYCLES = 50


def blur_cycles(src: ik.TileShape, dst: ik.TileShape) -> int:
    rows, cols = src.shape[0] - 2, src.shape[1] - 2
    rows_per_worker = -(-rows // 6)
    worker = rows_per_worker * (-(-9 * cols // 2)) + BLUR_WORKER_SETUP_CYCLES
    return 6 * worker


@ik.tile_function(cycles=blur_cycles)
def blur3x3(src, dst):
    """dst[1:-1, 1:-1] = 3x3 mean of src (both are this tile's (bh + 2, bw + 2) buffers)."""
    h, w = src.shape
    for y in range(1, h - 1):
        up, mid, dn = src[y - 1], src[y], src[y + 1]
        out = dst[y]
        for x in range(1, w - 1):
            acc = up[x - 1] + up[x]
            acc += up[x + 1]
            acc += mid[x - 1]
            acc += mid[x]
            acc += mid[x + 1]
            acc += dn[x - 1]
            acc += dn[x]
            acc += dn[x + 1]
            out[x] = acc * NINTH


def blur_reference(img: np.ndarray, iterations: int = 1) -> np.ndarray:
    """The same blur in vectorised NumPy (zero padding, same addition order)."""
    x = np.asarray(img, dtype=np.float32)
    for _ in range(iterations):
        p = np.pad(x, 1)
        acc = p[:-2, :-2] + p[:-2, 1:-1]
        for dy, dx in ((0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)):
            acc += p[dy:dy + x.shape[0], dx:dx + x.shape[1]]
        acc *= NINTH
        x = acc
    return x


class NumpyBlur:
    """The fastest single-threaded NumPy version we could write, for benchmarking: fixed
    padded buffers (no allocation per iteration), nine in-place passes."""

    def __init__(self, img: np.ndarray):
        h, w = img.shape
        self.bufs = [np.zeros((h + 2, w + 2), np.float32), np.zeros((h + 2, w + 2), np.float32)]
        self.bufs[0][1:-1, 1:-1] = img
        self.cur = 0

    def step(self) -> None:
        p, q = self.bufs[self.cur], self.bufs[1 - self.cur]
        h, w = p.shape[0] - 2, p.shape[1] - 2
        acc = q[1:-1, 1:-1]
        np.add(p[:-2, :-2], p[:-2, 1:-1], out=acc)
        for dy, dx in ((0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)):
            np.add(acc, p[dy:dy + h, dx:dx + w], out=acc)
        np.multiply(acc, NINTH, out=acc)
        self.cur = 1 - self.cur

    @property
    def result(self) -> np.ndarray:
        return self.bufs[self.cur][1:-1, 1:-1]


def build(shape: tuple[int, int] = (4096, 4096), iterations: int = 4, *,
          machine: ik.MachineSpec | str = "GC200", grid: tuple[int, int] | None = None):
    """Graph, program and the two buffers of a k-iteration blur (nothing run yet).

    Returns ``(graph, program, step_program, a, b, result)``: ``program`` runs all
    iterations; ``step_program`` is two iterations (a -> b -> a), what a benchmark repeats;
    ``result`` is the buffer holding the answer after ``program``.
    """
    g = ik.Graph(machine)
    a = g.grid_tensor("a", shape, "float32", grid=grid, halo=1)
    b = g.grid_tensor("b", shape, "float32", grid=(a.grid.gy, a.grid.gx), halo=1)
    # two compute sets and two halo exchanges, alternating buffers; compiled here
    fwd = ik.Superstep("blur a->b", compute=g.compute(blur3x3, a, b), exchange=g.halo_exchange(b))
    bwd = ik.Superstep("blur b->a", compute=g.compute(blur3x3, b, a), exchange=g.halo_exchange(a))
    steps = [fwd if k % 2 == 0 else bwd for k in range(iterations)]
    program = g.program(steps, label=f"blur3x3 x{iterations} {shape[0]}x{shape[1]}")
    return g, program, g.program([fwd, bwd], label="blur3x3 x2"), a, b, (b if iterations % 2 else a)


def main(shape: tuple[int, int] = (4096, 4096), iterations: int = 4, *,
         machine: ik.MachineSpec | str = "GC200", grid: tuple[int, int] | None = None,
         seed: int = 0, verbose: bool = True) -> dict:
    """Build, run and check the stencil; returns the result, profile and timings."""
    t0 = time.perf_counter()
    g, program, _, a, b, result = build(shape, iterations, machine=machine, grid=grid)
    t_build = time.perf_counter() - t0
    img = np.random.default_rng(seed).random(shape, dtype=np.float32)
    g.write(a, img)
    t0 = time.perf_counter()
    prof = g.run(program)
    t_run = time.perf_counter() - t0
    out = g.read(result)
    ref = blur_reference(img, iterations)
    exact = bool(np.array_equal(out, ref))
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    s = prof.supersteps[0]
    if verbose:
        print(prof.summary(max_rows=4))
        print(f"\n{a.grid.gy}x{a.grid.gx} tile grid, blocks up to {int(a.grid.bh.max())}x"
              f"{int(a.grid.bw.max())}; per superstep: compute {s.compute_cycles:,} cycles "
              f"(user estimate), sync {s.sync_cycles}, exchange {s.exchange_cycles:,} "
              f"({s.bytes_exchanged:,} B)")
        print(f"matches NumPy after {iterations} iterations: {'bit-exact' if exact else 'to 1e-6'}; "
              f"build+compile {t_build:.2f} s, run {t_run * 1e3:.1f} ms "
              f"({shape[0] * shape[1] * iterations / t_run / 1e6:.0f} M cell updates/s on the host)")
    return {"result": out, "reference": ref, "exact": exact, "profile": prof, "graph": g,
            "build_seconds": t_build, "run_seconds": t_run}


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    main((n, n), k)
