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
    for st, so, n in regions:
        send[st] += n
    if tiles_per_bus > 1:
        for (_, _, _, n), tiles in receivers.items():
            if len(tiles) > 1:
                for t in tiles:
                    paired[t] += n
    return recv, paired, send
