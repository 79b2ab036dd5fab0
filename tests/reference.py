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
