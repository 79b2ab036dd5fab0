"""The exchange copy loop writes the same bytes with non-temporal stores (``stream``, used
for exchanges over 32 MiB) as with plain stores, at every alignment and run length."""
import numpy as np
import pytest

from ipukern._kernels import _exchange


def _table(rng, n_rows, row, sizes):
    """Copies of the given sizes to disjoint, randomly aligned destination ranges."""
    dr, do = [], []
    pos = np.zeros(n_rows, np.int64)
    for nb in sizes:
        r = int(rng.integers(n_rows))
        start = pos[r] + int(rng.integers(0, 70))
        if start + nb > row:
            r = int(np.argmin(pos))
            start = pos[r]
        assert start + nb <= row
        dr.append(r)
        do.append(start)
        pos[r] = start + nb
    sr = rng.integers(0, n_rows, sizes.size).astype(np.int32)
    so = np.array([int(rng.integers(0, row - nb + 1)) for nb in sizes], np.int64)
    return sr, so, np.array(dr, np.int32), np.array(do, np.int64), sizes.astype(np.int64)


@pytest.mark.parametrize("seed", range(4))
def test_streamed_copies_equal_plain_copies_and_numpy(seed):
    rng = np.random.default_rng(seed)
    n_rows, row = 6, 1 << 16
    sizes = np.concatenate([rng.integers(1, 64, 40), rng.integers(1000, 1100, 40),
                            rng.integers(1024, 6000, 40), [1024, 1025, 1087, 1088, 4096]])
    rng.shuffle(sizes)
    sr, so, dr, do, nb = _table(rng, n_rows, row, sizes)
    src = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    want = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    start = want.copy()
    for i in range(nb.size):
        want[dr[i], do[i]:do[i] + nb[i]] = src[sr[i], so[i]:so[i] + nb[i]]
    for stream in (False, True):
        for bounds in (np.array([0, nb.size]), np.array([0, nb.size // 3, nb.size])):
            dst = start.copy()
            _exchange.copy_runs(dst, src, sr, so, dr, do, nb, bounds, True, stream)
            assert np.array_equal(dst, want), (stream, bounds)
