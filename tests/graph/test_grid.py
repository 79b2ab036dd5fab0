"""Grid geometry: block mappings, grid choice, halo rings and boundary runs (pure NumPy)."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.graph.grid import GridGeometry, split_bounds


@pytest.mark.parametrize("shape, grid", [((13, 22), (3, 4)), ((1024, 4096), (46, 32)), ((5, 7), (5, 7)),
                                         ((9, 1), (2, 1))])
def test_grid_mapping_matches_per_element_assignment(shape, grid):
    h, w = shape
    gy, gx = grid
    m = ik.grid_mapping(shape, grid)
    rb, cb = split_bounds(h, gy), split_bounds(w, gx)
    bi = np.searchsorted(rb, np.arange(h), side="right") - 1
    bj = np.searchsorted(cb, np.arange(w), side="right") - 1
    want = (bi[:, None] * gx + bj[None, :]).ravel()
    got = np.repeat(m.tile, m.count)
    np.testing.assert_array_equal(got, want)
    assert m.tile.size == h * gx                       # one interval per block row


def test_grid_mapping_errors_and_choose_grid():
    with pytest.raises(ValueError, match="does not fit"):
        ik.grid_mapping((4, 4), (5, 1))
    with pytest.raises(ValueError, match="needs 4 tiles"):
        ik.grid_mapping((4, 4), (2, 2), tiles=[0, 1, 2])
    assert ik.choose_grid((4096, 4096), 1472) in ((46, 32), (32, 46))
    assert ik.choose_grid((3, 1000), 1472) == (2, 736)    # most tiles first: 1472 > 3 x 490
    assert ik.choose_grid((1, 1000), 1472) == (1, 1000)   # never more blocks than rows / columns
    assert ik.choose_grid((2, 2), 1472) == (2, 2)


def padded_cells(geo, tile_offset, itemsize):
    """Brute force: (tile, byte offset) -> padded-image cell (py, px) of every ring/block cell."""
    h = geo.halo
    cells = {}
    for i in range(geo.gy):
        for j in range(geo.gx):
            tile = int(geo.tiles[i, j])
            ph, pw = int(geo.bh[i]) + 2 * h, int(geo.bw[j]) + 2 * h
            for y in range(ph):
                for x in range(pw):
                    cells[(tile, int(tile_offset[tile]) + (y * pw + x) * itemsize)] = (
                        int(geo.rows[i]) + y, int(geo.cols[j]) + x)
    return cells


@pytest.mark.parametrize("shape, grid, halo", [((13, 22), (3, 4), 2), ((5, 7), (1, 1), 1),
                                               ((9, 4), (3, 1), 1), ((6, 6), (2, 3), 2)])
def test_boundary_runs_and_halo_copies_against_brute_force(shape, grid, halo):
    tiles = np.arange(grid[0] * grid[1])[::-1]
    geo = GridGeometry(shape, grid, tiles, halo)
    ph, pw = geo.block_shapes(padded=True)
    tile_offset = np.zeros(tiles.max() + 1, np.int64)
    tile_offset[tiles] = 8 * np.arange(tiles.size)            # any offsets: checks they are used
    cells = padded_cells(geo, tile_offset, 4)
    h, w = shape
    inside = {k for k, (py, px) in cells.items() if halo <= py < h + halo and halo <= px < w + halo}
    # boundary runs cover exactly the cells outside the array, once each
    covered = []
    for t, off, n in zip(*geo.boundary_runs(tile_offset, 4)):
        covered += [(int(t), int(off) + 4 * k) for k in range(int(n))]
    assert len(covered) == len(set(covered)) and set(covered) == set(cells) - inside
    # halo copies fill every ring cell inside the array from the block cell holding it
    block = {}
    for i in range(geo.gy):
        for j in range(geo.gx):
            for k, (py, px) in cells.items():
                if k[0] == geo.tiles[i, j] and geo.rows[i] + halo <= py < geo.rows[i + 1] + halo \
                        and geo.cols[j] + halo <= px < geo.cols[j + 1] + halo:
                    block[(py, px)] = k
    written = []
    for st, so, dt, do, nb in zip(*geo.halo_copies(tile_offset, 4)):
        for k in range(int(nb) // 4):
            src, dst = (int(st), int(so) + 4 * k), (int(dt), int(do) + 4 * k)
            assert block[cells[dst]] == src and dst not in block.values()
            written.append(dst)
    ring_inside = inside - set(block.values())
    assert len(written) == len(set(written)) and set(written) == ring_inside


def test_padded_mapping_and_interior_runs():
    geo = GridGeometry((13, 22), (3, 4), np.arange(12), 2)
    m = geo.padded_mapping()
    ph, pw = geo.block_shapes(padded=True)
    assert m.n_elems == int((ph * pw).sum()) and list(m.count) == list(ph * pw)
    start, count, tile, off = geo.interior_runs(np.zeros(12, np.int64), 4)
    assert count.sum() == 13 * 22 and np.all(np.diff(start) > 0)
    assert int(off[0]) == (2 * int(pw[0]) + 2) * 4       # first block cell: past 2 ring rows + 2 cells
