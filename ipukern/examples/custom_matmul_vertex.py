"""Worked example 3: a user-written matmul vertex swapped in for a layer's vertex.

A dense layer ``y = x @ w`` (x: (M, K) activations, w: (K, N) weights) is spread over a
(gm, gn) grid of tiles, one output block per tile. Two supersteps:

    1. exchange: tile (i, j) receives x's row block i and w's column block j
       (one broadcast per block: the fabric sends each block once);
    2. compute : tile (i, j) runs the layer's *vertex* ``vertex(a, b, c)`` on its own
       blocks: a (bm, K), b (K, bn) -> c (bm, bn).

:func:`dense_layer` takes the vertex as a parameter. Any tile function with that signature
fits: here a plain triple loop costed like the 64-bit vector unit (``matmul_vector``) and
a row-update loop costed like the AMP matrix unit (``matmul_amp``). Swapping them changes the
cycle estimate, never the program's shape or its result. The same parameter is the hook
for the library's built-in op: ``ipukern.matmul(a, b, vertex=matmul_amp)`` keeps the
library's plan, exchanges and K-split reductions and runs the user's function as the
per-tile partial product (:func:`swap_into_builtin` below).

A grouped 1x1 convolution is this layer once per group (x: (batch*H*W, Cin/g), w:
(Cin/g, Cout/g)), so the same vertex serves it.

Run: ``python -m ipukern.examples.custom_matmul_vertex``.
"""
from __future__ import annotations

import time

import numpy as np

import ipukern as ik

GC200 = ik.GC200
VECTOR_MACS_PER_CYCLE = GC200.vector_elems("float32")       # 2 fp32 FMAs per 64-bit vector op
AMP_MACS_PER_CYCLE = GC200.amp_macs_per_cycle("float32", "float32")   # 16 on GC200
WORKER_SETUP_CYCLES = 50


def vector_cycles(a: ik.TileShape, b: ik.TileShape, c: ik.TileShape) -> int:
    """Vector unit: rows shared by 6 workers; each worker does 2 fp32 MACs per issue and
    issues once per 6 tile cycles (barrel scheduling), so a tile does 2 MACs/cycle."""
    m, k = a.shape
    n = b.shape[1]
    rows_per_worker = -(-m // 6)
    worker = rows_per_worker * k * (-(-n // VECTOR_MACS_PER_CYCLE)) + WORKER_SETUP_CYCLES
    return 6 * worker


def amp_cycles(a: ik.TileShape, b: ik.TileShape, c: ik.TileShape) -> int:
    """AMP matrix unit: 16 fp32 MACs per tile cycle, plus one worker setup per row block."""
    m, k = a.shape
    n = b.shape[1]
    return -(-(m * k * n) // AMP_MACS_PER_CYCLE) + 6 * WORKER_SETUP_CYCLES


@ik.tile_function(cycles=vector_cycles)
def matmul_vector(a, b, c):
    """c = a @ b with a loop order (i, p, j) that streams rows of b: vectorises on the host."""
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            c[i, j] = 0.0
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                c[i, j] += aip * b[p, j]


@ik.tile_function(cycles=amp_cycles)
def matmul_amp(a, b, c):
    """c = a @ b as rank-1 row updates (whole-row array expressions Numba vectorises; no
    BLAS, so it needs no SciPy)."""
    c[:, :] = 0.0
    for i in range(a.shape[0]):
        for p in range(a.shape[1]):
            c[i, :] += a[i, p] * b[p, :]


def dense_layer(g: ik.Graph, x: ik.GraphTensor, w: ik.GraphTensor, *, grid: tuple[int, int],
                vertex: ik.TileFunction = matmul_amp, name: str = "dense"):
    """Build ``y = x @ w`` on a (gm, gn) tile grid with ``vertex`` as the per-tile kernel.

    ``x`` must be a grid tensor over (gm, 1) tiles and ``w`` over (1, gn) tiles (their
    blocks are the rows / columns each output tile needs). Returns ``(steps, y)``.
    """
    gm, gn = grid
    (m, k), n = x.shape, w.shape[1]
    if m % gm or n % gn:
        raise ValueError(f"this example needs M % gm == 0 and N % gn == 0, got {m}x{n} on {gm}x{gn}")
    bm, bn = m // gm, n // gn
    tiles = np.arange(gm * gn).reshape(gm, gn)
    a = g.tile_tensor(f"{name}.a", (bm, k), tiles=tiles.ravel(), category="inputs")
    b = g.tile_tensor(f"{name}.b", (k, bn), tiles=tiles.ravel(), category="weights")
    y = g.grid_tensor(f"{name}.y", (m, n), grid=grid, tiles=tiles.ravel(), category="outputs")
    sends = [g.broadcast(x, a, from_tile=int(x.grid.tiles[i, 0]), to_tiles=tiles[i]) for i in range(gm)]
    sends += [g.broadcast(w, b, from_tile=int(w.grid.tiles[0, j]), to_tiles=tiles[:, j]) for j in range(gn)]
    distribute = g.join(*sends, name="x rows + w columns")
    steps = [ik.Superstep(f"{name}: distribute", exchange=distribute, category="exchange"),
             ik.Superstep(f"{name}: {vertex.name}", compute=g.compute(vertex, a, b, y))]
    return steps, y


def main(m: int = 512, k: int = 256, n: int = 368, grid: tuple[int, int] = (32, 46), *,
         machine: ik.MachineSpec | str = "GC200", seed: int = 0, verbose: bool = True) -> dict:
    """Run the layer with each vertex, check both against NumPy, compare their cycles."""
    gm, gn = grid
    if m % gm:
        m = gm * -(-m // gm)
    if n % gn:
        n = gn * -(-n // gn)
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal((m, k)).astype(np.float32)
    wv = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    ref = xv.astype(np.float64) @ wv.astype(np.float64)
    out = {}
    for vertex in (matmul_vector, matmul_amp):
        g = ik.Graph(machine)
        x = g.grid_tensor("x", (m, k), grid=(gm, 1), tiles=np.arange(gm) * gn, category="inputs")
        w = g.grid_tensor("w", (k, n), grid=(1, gn), tiles=np.arange(gn), category="weights")
        g.write(x, xv)
        g.write(w, wv)
        t0 = time.perf_counter()
        steps, y = dense_layer(g, x, w, grid=grid, vertex=vertex)
        t_build = time.perf_counter() - t0
        prof = g.run(g.program(steps, label=f"dense {m}x{k}x{n} with {vertex.name}"),
                     flops=2 * m * k * n, peak_flops=g.machine.peak_flops("float32", "float32"))
        yv = g.read(y)
        np.testing.assert_allclose(yv, ref, rtol=1e-4, atol=1e-4)
        out[vertex.name] = {"result": yv, "profile": prof, "build_seconds": t_build}
        if verbose:
            print(prof.summary(max_rows=4).split("\nmemory")[0], "\n")
    if verbose:
        a, b = (out[v]["profile"] for v in ("matmul_vector", "matmul_amp"))
        print(f"same layer, swapped vertex: {a.total_cycles:,} cycles (vector) vs {b.total_cycles:,} "
              f"(AMP), {a.total_cycles / b.total_cycles:.1f}x; results agree with NumPy to 1e-4")
    out["reference"] = ref
    return out


def swap_into_builtin(m: int = 384, k: int = 256, n: int = 200, *, seed: int = 0,
                      verbose: bool = True) -> dict:
    """The same vertices swapped into the built-in ``ipukern.matmul`` for one layer."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    runs = {"built-in": ik.matmul(a, b)}
    for vertex in (matmul_vector, matmul_amp):
        runs[vertex.name] = ik.matmul(a, b, vertex=vertex)
    for name, run in runs.items():
        np.testing.assert_allclose(run.output, ref, rtol=1e-4, atol=1e-4)
        if verbose:
            conv = [s for s in run.profile.supersteps if s.name.startswith("conv")][0]
            mark = " [user estimate]" if conv.user_estimate else ""
            print(f"ipukern.matmul {m}x{k}x{n} with {name:<14} vertex: "
                  f"{run.profile.total_cycles:>7,} cycles (compute step {conv.compute_cycles:,}){mark}")
    return runs


if __name__ == "__main__":
    main()
    swap_into_builtin()
