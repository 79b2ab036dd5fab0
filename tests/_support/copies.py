"""Random copy tables for the copy-table tests (core.copies and nn's rearrangements)."""
from __future__ import annotations

import numpy as np


def random_copy_table(rng, n_rows, row, n):
    """Random copies with disjoint destinations; runs of consecutive pieces of one larger
    block are contiguous in both arrays (mergeable), the rest scattered."""
    cuts = np.sort(rng.choice(np.arange(1, row), size=min(n, row - 1), replace=False))
    bounds = np.r_[0, cuts, row]
    dst_row, dst_off, nb = [], [], []
    for r in range(n_rows):
        keep = rng.random(bounds.size - 1) < 0.8
        dst_row += [r] * int(keep.sum())
        dst_off += list(bounds[:-1][keep])
        nb += list(np.diff(bounds)[keep])
    dst_row, dst_off, nb = (np.asarray(v, np.int64) for v in (dst_row, dst_off, nb))
    # source: the same place on a random row with probability 1/2 (contiguous runs of a
    # row merge), otherwise a random place
    same = rng.random(nb.size) < 0.5
    src_row = np.where(same, dst_row, rng.integers(0, n_rows, nb.size))
    src_off = np.where(same, dst_off, rng.integers(0, row + 1 - nb.max(), nb.size) if nb.size else 0)
    order = rng.permutation(nb.size)
    return src_row[order], src_off[order], dst_row[order], dst_off[order], nb[order]
