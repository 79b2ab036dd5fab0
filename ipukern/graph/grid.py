"""Grid and halo geometry of user graphs: which tile holds which block, and which bytes
move in a halo exchange. Pure NumPy over byte offsets; nothing here touches data.

A grid tensor splits an (H, W) array into a (gy, gx) grid of blocks (:func:`split_bounds`
per axis). With a halo of width h, every tile stores its block inside a padded buffer of
``(bh + 2h, bw + 2h)`` cells, row-major; the ring holds copies of the neighbours' cells
(or the pad value outside the array).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core import TileMapping, expand, split_bounds

__all__ = ["split_bounds", "choose_grid", "grid_mapping", "GridGeometry"]

#: the 8 neighbour directions (di, dj) of a block, row-major
_DIRECTIONS = tuple((di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1) if (di, dj) != (0, 0))


def choose_grid(shape: Sequence[int], n_tiles: int) -> tuple[int, int]:
    """A (gy, gx) tile grid for an (H, W) array: as many tiles as possible (at most
    ``n_tiles``), then the smallest block perimeter (least halo traffic)."""
    h, w = (int(s) for s in shape)
    best = None
    for gy in range(1, min(h, n_tiles) + 1):
        gx = min(w, n_tiles // gy)
        score = (-(gy * gx), -(-h // gy) + -(-w // gx), gy)
        if best is None or score < best[0]:
            best = (score, (gy, gx))
    return best[1]


def grid_mapping(shape: Sequence[int], grid: Sequence[int],
                 tiles: Sequence[int] | np.ndarray | None = None) -> TileMapping:
    """Map an (H, W) array onto a (gy, gx) grid of tiles, one block per tile.

    Block (i, j) holds rows ``split_bounds(H, gy)[i:i+2]`` and columns
    ``split_bounds(W, gx)[j:j+2]`` and lives on ``tiles[i * gx + j]`` (default: tile
    ``i * gx + j``). It is one interval per block row, so a block is not contiguous in the
    global array; on its tile it is (rows stored one after another, row-major).
    """
    h, w = (int(s) for s in shape)
    gy, gx = (int(g) for g in grid)
    if gy < 1 or gx < 1 or gy > h or gx > w:
        raise ValueError(f"grid {gy}x{gx} does not fit a {h}x{w} array (need 1 <= gy <= H, 1 <= gx <= W)")
    tile_ids = (np.arange(gy * gx, dtype=np.int64) if tiles is None
                else np.asarray(tiles, dtype=np.int64).reshape(-1))
    if tile_ids.size != gy * gx:
        raise ValueError(f"grid {gy}x{gx} needs {gy * gx} tiles, got {tile_ids.size}")
    if np.unique(tile_ids).size != tile_ids.size:
        raise ValueError("grid tiles must be distinct")
    rb, cb = split_bounds(h, gy), split_bounds(w, gx)
    row_block = np.repeat(np.arange(gy), np.diff(rb))                  # (H,)
    rows = np.repeat(np.arange(h, dtype=np.int64), gx)                 # (H * gx,)
    j = np.tile(np.arange(gx), h)
    start = rows * w + cb[j]
    count = (cb[j + 1] - cb[j])
    tile = tile_ids[row_block[rows] * gx + j]
    return TileMapping(h * w, tile, start, count)


class GridGeometry:
    """Geometry of a grid tensor: block bounds, the tile of each block, the halo width.

    Attributes
    ----------
    shape : (H, W)
    gy, gx : int
        Blocks per column and per row.
    rows, cols : int64 ndarray of shape (gy + 1,), (gx + 1,)
        Block boundaries (:func:`split_bounds`).
    tiles : int64 ndarray of shape (gy, gx)
        Tile of block (i, j).
    halo : int
        Ring width around each block in tile memory (0: plain blocks).
    """

    def __init__(self, shape: tuple[int, int], grid: tuple[int, int], tiles: np.ndarray, halo: int):
        self.shape = shape
        self.gy, self.gx = grid
        self.rows = split_bounds(shape[0], self.gy)
        self.cols = split_bounds(shape[1], self.gx)
        self.tiles = np.asarray(tiles, dtype=np.int64).reshape(self.gy, self.gx)
        self.halo = halo

    @property
    def bh(self) -> np.ndarray:
        """Block heights, int64 (gy,)."""
        return np.diff(self.rows)

    @property
    def bw(self) -> np.ndarray:
        """Block widths, int64 (gx,)."""
        return np.diff(self.cols)

    def block_shapes(self, padded: bool) -> tuple[np.ndarray, np.ndarray]:
        """Height and width of every block (row-major, (gy * gx,)), with the ring if ``padded``."""
        ring = 2 * self.halo if padded else 0
        return np.repeat(self.bh, self.gx) + ring, np.tile(self.bw, self.gy) + ring

    def padded_mapping(self) -> TileMapping:
        """Storage of a halo tensor: one interval per tile, its whole padded buffer."""
        ph, pw = self.block_shapes(padded=True)
        cells = ph * pw
        tile_ids = self.tiles.reshape(-1)
        order = np.argsort(tile_ids, kind="stable")
        starts = np.zeros(tile_ids.size, dtype=np.int64)
        starts[order] = np.cumsum(cells[order]) - cells[order]
        return TileMapping(int(cells.sum()), tile_ids, starts, cells)

    def interior_runs(self, tile_offset: np.ndarray, itemsize: int) -> tuple[np.ndarray, ...]:
        """Home copy of every element of a halo tensor, one run per block row:
        (global start, count, tile, byte offset in the tile), sorted by start."""
        h, w = self.halo, self.shape[1]
        bi = np.repeat(np.arange(self.gy), self.bh)            # block row of each image row
        rows = np.repeat(np.arange(self.shape[0], dtype=np.int64), self.gx)
        j = np.tile(np.arange(self.gx), self.shape[0])
        i = bi[rows]
        tile = self.tiles[i, j].astype(np.int32)
        pw = self.bw[j] + 2 * h
        y = rows - self.rows[i] + h
        offset = tile_offset[tile] + (y * pw + h) * itemsize
        return rows * w + self.cols[j], self.bw[j].astype(np.int64), tile, offset

    def padded_row_runs(self, tile_offset: np.ndarray, itemsize: int) -> tuple[np.ndarray, ...]:
        """Copies placing the padded image (H + 2h, W + 2h) into every tile's buffer, one per
        buffer row: (byte offset in the padded image, tile, byte offset in the tile, bytes)."""
        h = self.halo
        pw_global = self.shape[1] + 2 * h
        bi, y = expand(self.bh + 2 * h)                      # block row, row within the buffer
        prow = self.rows[bi] + y                              # row in the padded image
        j = np.tile(np.arange(self.gx), prow.size)
        prow, y, bi = np.repeat(prow, self.gx), np.repeat(y, self.gx), np.repeat(bi, self.gx)
        tile = self.tiles[bi, j]
        pw = self.bw[j] + 2 * h
        host_off = (prow * pw_global + self.cols[j]) * itemsize
        dev_off = tile_offset[tile] + y * pw * itemsize
        return host_off, tile, dev_off, pw * itemsize

    def boundary_runs(self, tile_offset: np.ndarray, itemsize: int) -> tuple[np.ndarray, ...]:
        """The ring cells outside the array, as runs (tile, byte offset, elements): whole
        buffer rows above / below the array, ``halo`` cells left / right of it."""
        h = self.halo
        ph, pw = self.block_shapes(padded=True)
        tile = self.tiles.reshape(-1)
        base = tile_offset[tile]
        bi, bj = np.divmod(np.arange(tile.size), self.gx)
        blk, y = expand(ph)                                  # every buffer row of every block
        top = (bi[blk] == 0) & (y < h)
        bottom = (bi[blk] == self.gy - 1) & (y >= ph[blk] - h)
        full = top | bottom
        left = ~full & (bj[blk] == 0)
        right = ~full & (bj[blk] == self.gx - 1)
        row_off = base[blk] + y * pw[blk] * itemsize
        tiles = np.concatenate([tile[blk[full]], tile[blk[left]], tile[blk[right]]])
        offs = np.concatenate([row_off[full], row_off[left],
                               row_off[right] + (pw[blk[right]] - h) * itemsize])
        n = np.concatenate([pw[blk[full]], np.full(int(left.sum()), h), np.full(int(right.sum()), h)])
        return tiles, offs, n.astype(np.int64)

    def halo_copies(self, tile_offset: np.ndarray, itemsize: int, *,
                    corners: bool = True) -> tuple[np.ndarray, ...]:
        """Copy table refreshing every ring from the neighbouring blocks.

        For each of the 8 neighbours (4 without ``corners``) the strip of the neighbour's
        block next to the shared edge goes to the matching part of the ring, one copy per
        strip row. Returns (src_tile, src_offset, dst_tile, dst_offset, nbytes).
        """
        h, isz = self.halo, itemsize
        cols: list[list[np.ndarray]] = [[], [], [], [], []]
        bi, bj = np.meshgrid(np.arange(self.gy), np.arange(self.gx), indexing="ij")
        bi, bj = bi.ravel(), bj.ravel()
        for di, dj in _DIRECTIONS:
            if not corners and di and dj:
                continue
            ni, nj = bi + di, bj + dj
            ok = (ni >= 0) & (ni < self.gy) & (nj >= 0) & (nj < self.gx)
            i, j, ni, nj = bi[ok], bj[ok], ni[ok], nj[ok]
            bh, bw = self.bh[i], self.bw[j]
            # destination rows / first column of the strip in the padded buffer
            y0 = np.where(di < 0, 0, np.where(di == 0, h, h + bh))
            ny = np.where(di == 0, bh, h)
            x0 = np.where(dj < 0, 0, np.where(dj == 0, h, h + bw))
            width = np.where(dj == 0, bw, h)
            # same global cell in the neighbour's buffer: shift by the block origin difference
            dy = self.rows[i] - self.rows[ni]
            dx = self.cols[j] - self.cols[nj]
            rep, k = expand(ny)
            y, x = y0[rep] + k, x0[rep]
            dtile, stile = self.tiles[i, j][rep], self.tiles[ni, nj][rep]
            pw_d = self.bw[j][rep] + 2 * h
            pw_s = self.bw[nj][rep] + 2 * h
            cols[0].append(stile)
            cols[1].append(tile_offset[stile] + ((y + dy[rep]) * pw_s + x + dx[rep]) * isz)
            cols[2].append(dtile)
            cols[3].append(tile_offset[dtile] + (y * pw_d + x) * isz)
            cols[4].append(width[rep] * isz)
        return tuple(np.concatenate(c) if c else np.zeros(0, np.int64) for c in cols)
