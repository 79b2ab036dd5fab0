"""Worked example 2: all-reduce of a vector held by every tile (data-parallel gradients).

Each of P tiles holds its own vector of n floats (a ``tile_tensor`` of shape (P, n), row
k on tile k). After the all-reduce every tile holds the element-wise sum of all P
vectors. :meth:`ipukern.Graph.all_reduce` builds it from two supersteps:

    1. reduce-scatter (exchange): cut [0, n) into P chunks of c = n/P; tile j receives
       chunk j from the P-1 other tiles;
    2. compute: tile j adds its own chunk and the P-1 received ones (built-in sum_rows);
       all-gather (exchange): tile j sends its summed chunk to every other tile.

The cycle counts are explained below from the machine's constants and checked against the
profile: nothing here is hidden in the simulator.

Run: ``python -m ipukern.examples.allreduce [n_per_tile]``.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import ipukern as ik
from ipukern.core import cost


def reference(v: np.ndarray) -> np.ndarray:
    """The all-reduce's exact float32 result: chunk j = own row first, then the other rows
    in tile order (the order the tiles add in)."""
    p, n = v.shape
    owner = np.repeat(np.arange(p), np.diff(ik.graph.split_bounds(n, p)))   # chunk owner per column
    out = v[owner, np.arange(n)].copy()
    for i in range(p):
        # adding 0.0 where row i is the owner's own (already added) leaves acc unchanged
        out += np.where(owner == i, np.float32(0), v[i])
    return out


def explain(machine: ik.MachineSpec, p: int, n: int, itemsize: int = 4) -> dict[str, int]:
    """Expected cycles of each phase, from first principles (equal chunks assumed)."""
    c = -(-n // p)                                      # largest chunk
    if p == 1:                                          # nothing to exchange
        return {"reduce_scatter": 0, "sum": cost.reduce_cycles(machine, n, 1, "float32", "float32"),
                "all_gather": 0, "total": cost.reduce_cycles(machine, n, 1, "float32", "float32")
                + 2 * machine.sync_cycles}
    def xch(recv: int, paired: int = 0, send: int = 0) -> int:   # the busiest tile's exchange
        one = [np.array([v], dtype=np.int64) for v in (recv, paired, send)]
        return int(cost.tile_exchange_cycles(*one, machine)[0]) + machine.exchange_overhead_cycles

    # reduce-scatter: the busiest tile receives (and sends) P-1 chunks
    rs = xch((p - 1) * c * itemsize, send=(p - 1) * c * itemsize)
    # sum: a depth-P reduce of each tile's chunk (PopLibs reduce estimate). Chunks hold
    # floor(n/P) or ceil(n/P) elements, and a chunk that is not a multiple of the 4-float
    # accumulator takes the slower multi-input vertex, so the busiest tile is the max
    sizes = {k for k in (n // p, c) if k > 0}
    add = max(cost.reduce_cycles(machine, k, p, "float32", "float32") for k in sizes)
    # all-gather: a tile receives every other chunk once; a chunk that its bus partner
    # (tile t xor 1) receives too comes at the shared bus's 2x rate, i.e. counts half
    paired = max(0, n - 2 * c) * itemsize if machine.tiles_per_exchange_bus > 1 else 0
    ag = xch((n - c) * itemsize, paired=paired, send=c * itemsize)
    return {"reduce_scatter": rs, "sum": add, "all_gather": ag,
            "total": rs + add + ag + 2 * machine.sync_cycles}


def main(n_per_tile: int = 1472 * 32, n_tiles: int | None = None, *,
         machine: ik.MachineSpec | str = "GC200", seed: int = 0, verbose: bool = True) -> dict:
    """All-reduce a (P, n) float32 tensor over P tiles; check it and explain its cycles."""
    g = ik.Graph(machine)
    p = g.n_tiles if n_tiles is None else n_tiles
    x = g.tile_tensor("grads", n_per_tile, tiles=range(p))
    v = np.random.default_rng(seed).standard_normal((p, n_per_tile)).astype(np.float32)
    g.write(x, v)
    t0 = time.perf_counter()
    program = g.program(g.all_reduce(x), label=f"all-reduce {p} x {n_per_tile} float32")
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    prof = g.run(program)
    t_run = time.perf_counter() - t0
    out = g.read(x)
    ref = reference(v)
    exact = bool((out == ref[None, :]).all())
    np.testing.assert_allclose(out, np.broadcast_to(v.astype(np.float64).sum(0), out.shape),
                               rtol=1e-4, atol=1e-4 * np.sqrt(p))
    want = explain(g.machine, p, n_per_tile)
    rs, red = prof.supersteps
    got = {"reduce_scatter": rs.exchange_cycles, "sum": red.compute_cycles,
           "all_gather": red.exchange_cycles, "total": prof.total_cycles}
    if verbose:
        m = g.machine
        c = -(-n_per_tile // p)
        print(prof.summary())
        print(f"\nwhy: {p} tiles x {n_per_tile} floats, chunks of {c}:")
        print(f"  reduce-scatter: a tile receives {p - 1} x {c} x 4 B = {(p - 1) * c * 4:,} B at "
              f"{m.exchange_bytes_per_cycle:.2f} B/cycle + {m.exchange_overhead_cycles} "
              f"= {want['reduce_scatter']:,} cycles")
        print(f"  sum: {p}-input reduce of {c} floats (reduce_cycles) = {want['sum']:,} cycles")
        print(f"  all-gather: {n_per_tile - c} floats in; chunks shared with the bus partner count "
              f"half = {want['all_gather']:,} cycles")
        print(f"  + 2 syncs x {m.sync_cycles} = {want['total']:,} cycles "
              f"({want['total'] / m.clock_hz * 1e6:.2f} us); profile says {prof.total_cycles:,}")
        print(f"result {'bit-exact vs the fixed-order reference' if exact else 'close'}; "
              f"build {t_build:.2f} s, run {t_run * 1e3:.1f} ms on the host")
    return {"result": out, "reference": ref, "exact": exact, "profile": prof,
            "expected_cycles": want, "cycles": got}


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1472 * 32)
