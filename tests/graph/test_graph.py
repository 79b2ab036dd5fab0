"""Graph: tensor mappings and local views, host I/O, exchange helpers, all-reduce."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.graph.grid import split_bounds


@pytest.fixture(scope="module")
def m64():
    return ik.GC200.replace(n_tiles=64, name="GC200-64")


def tile_buffer(g, t, tile):
    """A tile's whole local block of t, read straight from tile memory."""
    shape = t.local_shape(tile)
    off = int(t.tile_offset[tile])
    return g.device.arena.data[tile, off:off + 4 * int(np.prod(shape))].view(np.float32).reshape(shape)


# --------------------------------------------------------------------------- tensors
def test_local_views_and_round_trips(m64, rng):
    g = ik.Graph(m64)
    lin = g.linear_tensor("lin", (10, 7))
    grd = g.grid_tensor("grd", (13, 22), grid=(3, 4), tiles=np.arange(12)[::-1])
    hal = g.grid_tensor("hal", (13, 22), grid=(3, 4), halo=2, pad_value=-1.0)
    per = g.tile_tensor("per", (3, 5), tiles=[5, 9, 60])
    assert lin.local_shape(0) == (1,) and lin.local_shape(63) == (2,) and lin.local_ndim == 1
    assert grd.local_shape(11) == (4, 5) and grd.local_shape(0) == (5, 6)   # block (0,0) on tile 11
    assert hal.local_shape(0) == (8, 9) and hal.local_shape(12) == ()
    assert per.shape == (3, 3, 5) and per.local_shape(9) == (3, 5) and list(per.tiles) == [5, 9, 60]
    for t in (lin, grd, hal, per):
        v = rng.standard_normal(t.shape).astype(np.float32)
        g.write(t, v)
        np.testing.assert_array_equal(g.read(t), v)
    # a halo tensor's write fills every tile's buffer with the padded neighbourhood
    v = rng.standard_normal((13, 22)).astype(np.float32)
    g.write(hal, v)
    p = np.pad(v, 2, constant_values=-1.0)
    rb, cb = split_bounds(13, 3), split_bounds(22, 4)
    for i in range(3):
        for j in range(4):
            np.testing.assert_array_equal(tile_buffer(g, hal, i * 4 + j),
                                          p[rb[i]:rb[i + 1] + 4, cb[j]:cb[j + 1] + 4])
    # block of a grid tensor is row-major contiguous on its tile
    np.testing.assert_array_equal(tile_buffer(g, grd, 11), g.read(grd)[:4, :5])


def test_tensor_errors(m64):
    g = ik.Graph(m64)
    g.linear_tensor("x", 10)
    with pytest.raises(ValueError, match="already exists"):
        g.linear_tensor("x", 10)
    with pytest.raises(ValueError, match="halo 2 is wider than the smallest block"):
        g.grid_tensor("h", (8, 8), grid=(8, 1), halo=2)
    with pytest.raises(ValueError, match="grid 8x9 needs 72 tiles"):
        g.grid_tensor("big", (100, 100), grid=(8, 9))
    budget = m64.tile_budget_bytes
    with pytest.raises(ik.TileMemoryError,
                       match=r"tensor 'huge' does not fit: tile 0: allocating .* exceeds budget.*more tiles"):
        g.grid_tensor("huge", (budget // 4 + 1, 2), grid=(1, 1))
    with pytest.raises(ValueError, match="2-D shape"):
        g.grid_tensor("cube", (2, 2, 2))


# --------------------------------------------------------------------------- halo exchange
@pytest.mark.parametrize("shape, grid, halo", [((13, 22), (3, 4), 1), ((16, 16), (4, 4), 2),
                                               ((7, 30), (1, 5), 1), ((30, 7), (6, 1), 1)])
def test_halo_exchange_refreshes_every_ring(m64, rng, shape, grid, halo):
    g = ik.Graph(m64)
    t = g.grid_tensor("t", shape, grid=grid, halo=halo, pad_value=7.0)
    g.write(t, np.zeros(shape, np.float32))
    x = g.halo_exchange(t)
    prog = g.program([ik.Superstep("halo", exchange=x)])
    # change every block's interior in tile memory (as a compute step would), then exchange
    new = rng.standard_normal(shape).astype(np.float32)
    rb, cb = split_bounds(shape[0], grid[0]), split_bounds(shape[1], grid[1])
    for i in range(grid[0]):
        for j in range(grid[1]):
            buf = tile_buffer(g, t, i * grid[1] + j)
            buf[halo:-halo, halo:-halo] = new[rb[i]:rb[i + 1], cb[j]:cb[j + 1]]
    g.run(prog)
    p = np.pad(new, halo, constant_values=7.0)
    for i in range(grid[0]):
        for j in range(grid[1]):
            np.testing.assert_array_equal(tile_buffer(g, t, i * grid[1] + j),
                                          p[rb[i]:rb[i + 1] + 2 * halo, cb[j]:cb[j + 1] + 2 * halo])
    # bytes moved: every ring cell inside the array, once
    inner = sum(((rb[i + 1] - rb[i] + 2 * halo) * (cb[j + 1] - cb[j] + 2 * halo)
                 - (rb[i + 1] - rb[i]) * (cb[j + 1] - cb[j])) for i in range(grid[0]) for j in range(grid[1]))
    outside = sum(((min(rb[i + 1] + halo, shape[0]) - max(rb[i] - halo, 0))
                   * (min(cb[j + 1] + halo, shape[1]) - max(cb[j] - halo, 0)))
                  for i in range(grid[0]) for j in range(grid[1])) - shape[0] * shape[1]
    assert x.total_bytes == 4 * outside and outside <= inner


def test_halo_exchange_without_corners_and_errors(m64):
    g = ik.Graph(m64)
    t = g.grid_tensor("t", (6, 6), grid=(2, 2), halo=1)
    g.write(t, np.arange(36, dtype=np.float32).reshape(6, 6))
    assert g.halo_exchange(t, corners=False).total_bytes == 4 * 4 * 3 * 2   # 4 tiles x 2 strips x 3 cells
    plain = g.grid_tensor("p", (6, 6), grid=(2, 2))
    with pytest.raises(ValueError, match="halo >= 1; 'p' is a grid tensor with halo 0"):
        g.halo_exchange(plain)
    with pytest.raises(ValueError, match="needs a grid tensor"):
        g.halo_exchange(g.linear_tensor("l", 6))


def test_unwritten_halo_tensor_gets_its_boundary_before_the_first_run(m64):
    g = ik.Graph(m64)
    t = g.grid_tensor("t", (6, 8), grid=(2, 2), halo=1, pad_value=3.0)
    g.device.arena.data[:] = 0xFF                       # garbage (NaN) everywhere
    g.run(g.program([ik.Superstep("nothing")]))
    for tile in range(4):
        buf = tile_buffer(g, t, tile)
        i, j = divmod(tile, 2)
        if i == 0:
            assert (buf[0] == 3).all()
        if j == 1:
            assert (buf[:, -1] == 3).all()
        assert np.isnan(buf[1:-1, 1:-1]).all()          # interior untouched


# --------------------------------------------------------------------------- other exchanges
def test_copy_gather_between_any_mappings(m64, rng):
    g = ik.Graph(m64)
    a = g.grid_tensor("a", (12, 20), grid=(4, 5))
    b = g.linear_tensor("b", (12, 20), tiles=np.arange(63, 30, -1))
    h = g.grid_tensor("h", (12, 20), grid=(2, 2), halo=1, tiles=[40, 41, 42, 43])
    one = g.linear_tensor("one", 240, tiles=[50])
    v = rng.standard_normal((12, 20)).astype(np.float32)
    g.write(a, v)
    steps = [ik.Superstep("a->b", exchange=g.copy(a, b)), ik.Superstep("b->h", exchange=g.copy(b, h)),
             ik.Superstep("h->one", exchange=g.gather(h, one))]
    prof = g.run(g.program(steps))
    np.testing.assert_array_equal(g.read(b), v)
    np.testing.assert_array_equal(g.read(h), v)
    np.testing.assert_array_equal(g.read(one), v.ravel())
    assert prof.supersteps[2].bytes_exchanged == 240 * 4
    assert "tile 50 receives 960 B" in prof.supersteps[2].exchange_why
    with pytest.raises(ValueError, match="must live on one tile"):
        g.gather(a, b)
    with pytest.raises(ValueError, match="same element count"):
        g.copy(a, g.linear_tensor("short", 10))


def test_broadcast_send_join(m64, rng):
    g = ik.Graph(m64)
    w = g.linear_tensor("w", 6, tiles=[3])
    rep = g.tile_tensor("rep", 6, tiles=range(8))
    wv = rng.standard_normal(6).astype(np.float32)
    g.write(w, wv)
    bx = g.broadcast(w, rep)
    g.run(g.program([ik.Superstep("bcast", exchange=bx)]))
    np.testing.assert_array_equal(g.read(rep), np.tile(wv, (8, 1)))
    assert int(bx.send_bytes[3]) == 24                   # sent once, received by 8 tiles
    # send: element 1..3 of tile 2's slab -> positions 0..2 of tile 5's and tile 6's slabs
    g.write(rep, np.arange(48, dtype=np.float32).reshape(8, 6))
    sx = g.send(rep, rep, src_tiles=2, dst_tiles=[5, 6], src_start=1, dst_start=0, n_elems=3)
    back = g.send(rep, rep, src_tiles=0, dst_tiles=7, src_start=0, dst_start=3, n_elems=3)
    g.run(g.program([ik.Superstep("send", exchange=g.join(sx, back))]))
    r = g.read(rep)
    np.testing.assert_array_equal(r[5, :3], [13, 14, 15])
    np.testing.assert_array_equal(r[6, :3], [13, 14, 15])
    np.testing.assert_array_equal(r[7], [42, 43, 44, 0, 1, 2])
    # errors users hit: unmapped source or destination tiles, ranges outside the block
    with pytest.raises(ValueError, match="exchange source 'w' is not mapped on tile 4"):
        g.broadcast(w, rep, from_tile=4)
    with pytest.raises(ValueError, match=r"exchange destination 'rep' is not mapped on tile 20"):
        g.broadcast(w, rep, to_tiles=[1, 20])
    with pytest.raises(ValueError, match="spans 8 tiles; say which"):
        g.broadcast(rep, rep)
    with pytest.raises(ValueError, match=r"destination elements \[4, 7\) fall outside 'rep'.s block "
                                         r"of 6 elements on tile 1"):
        g.send(rep, rep, 0, 1, src_start=0, dst_start=4, n_elems=3)
    with pytest.raises(ValueError, match="not mapped on tile 9"):
        g.send(rep, rep, 9, 1)
    with pytest.raises(ik.ExchangeError, match="overlapping writes"):
        g.join(sx, sx)


# --------------------------------------------------------------------------- all-reduce
def fixed_order_sum(v):
    p, n = v.shape
    b = split_bounds(n, p)
    out = np.empty(n, v.dtype)
    for j in range(p):
        acc = v[j, b[j]:b[j + 1]].astype(np.float32)
        for i in range(p):
            if i != j:
                acc = acc + v[i, b[j]:b[j + 1]].astype(np.float32)
        out[b[j]:b[j + 1]] = acc.astype(v.dtype)
    return out


@pytest.mark.parametrize("p, n", [(16, 100), (7, 5), (1, 9), (64, 64)])
def test_all_reduce_equals_numpy(m64, rng, p, n):
    g = ik.Graph(m64)
    x = g.tile_tensor("x", n, tiles=range(p))
    v = rng.standard_normal((p, n)).astype(np.float32)
    g.write(x, v)
    prog = g.program(g.all_reduce(x))
    prof = g.run(prog)
    out = g.read(x)
    np.testing.assert_array_equal(out, np.broadcast_to(fixed_order_sum(v), (p, n)))
    np.testing.assert_allclose(out[0], v.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    assert [s.category for s in prof.supersteps] == ["exchange", "reduction"]
    assert g.run(prog, mode="estimate").total_cycles == prof.total_cycles
    if p > 1:
        assert "reduce-scatter: tile" in prof.supersteps[0].exchange_why
        assert f"{p - 1} received chunks" in prof.supersteps[1].compute_why


def test_all_reduce_half_and_errors(m64, rng):
    g = ik.Graph(m64)
    x = g.tile_tensor("x", 40, dtype="float16", tiles=range(8))
    v = rng.standard_normal((8, 40)).astype(np.float16)
    g.write(x, v)
    g.run(g.program(g.all_reduce(x)))
    np.testing.assert_allclose(g.read(x)[3].astype(np.float32), v.astype(np.float32).sum(0),
                               rtol=3e-3, atol=3e-3)
    with pytest.raises(ValueError, match="same number of elements"):
        g.all_reduce(g.linear_tensor("uneven", 10, tiles=range(3)))
