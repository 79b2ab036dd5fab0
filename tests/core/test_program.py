"""Exchange tables: correctness against tests/_support/reference.py, validation, costs."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.core import cost
from ipukern.core.engine import get_num_threads
from ipukern.core.program import Exchange, ExchangeError

from tests._support.reference import exchange as ref_exchange

ROW = 200 * 1024          # arena row used by these tests (offsets stay below it)
DST_AREA = 132 * 1024     # destinations live in [0, DST_AREA), sources above it


def random_bytes(rng, shape):
    return np.frombuffer(rng.bytes(int(np.prod(shape))), dtype=np.uint8).reshape(shape).copy()


def random_table(rng, n_tiles, max_copy, row=ROW, dst_area=DST_AREA, n_broadcasts=8):
    """Random copy table: per tile a few non-overlapping destinations (misaligned starts,
    gaps) in the lower half of the destination area; a few source regions broadcast to
    16 tiles each into the upper half. Sources may overlap each other (reads are free)."""
    half = dst_area // 2
    rows = []
    for tile in range(n_tiles):
        pos = int(rng.integers(0, 7))
        for _ in range(int(rng.integers(1, 5))):
            n = int(rng.integers(1, max_copy + 1))
            if pos + n > half:
                break
            rows.append((int(rng.integers(0, n_tiles)), int(rng.integers(dst_area, row - n + 1)),
                         tile, pos, n))
            pos += n + int(rng.integers(0, 9))
    strip: dict[int, int] = {}
    for _ in range(n_broadcasts):
        n = int(rng.integers(1, min(max_copy, 2048) + 1))
        src = (int(rng.integers(0, n_tiles)), int(rng.integers(dst_area, row - n + 1)))
        for tile in rng.choice(n_tiles, size=min(n_tiles, 16), replace=False):
            pos = strip.get(int(tile), half + int(rng.integers(0, 5)))
            if pos + n <= dst_area:
                rows.append((src[0], src[1], int(tile), pos, n))
                strip[int(tile)] = pos + n + 1
    return tuple(np.array(col, dtype=np.int64) for col in zip(*rows))


@pytest.mark.parametrize("max_copy", [1, 64, 4096, 64 * 1024])
def test_exchange_matches_reference(rng, max_copy):
    m = ik.GC200
    # all 1472 tiles for small copies; 64 KiB copies on 64 tiles keep host memory small
    if max_copy <= 4096:
        n_used, row, dst_area = m.n_tiles, 24 * 1024, 16 * 1024
    else:
        n_used, row, dst_area = 64, ROW, DST_AREA
    table = random_table(rng, n_used, max_copy, row, dst_area)
    data = random_bytes(rng, (n_used, row))   # rows beyond n_used are never addressed
    want = ref_exchange(data, *table)
    x = Exchange(m, *table, row_bytes=row)
    for threads in (1, 2):
        got = data.copy()
        x.run(got, threads)
        np.testing.assert_array_equal(got, want)


def test_broadcast_and_large_copies(rng):
    m = ik.GC200
    data = random_bytes(rng, (m.n_tiles, 48 * 1024))
    # tile 5 broadcasts 40 KiB to every other tile; the 40 KiB copy is split on the host
    dst = np.array([t for t in range(m.n_tiles) if t != 5])
    n = dst.size
    table = (np.full(n, 5), np.full(n, 3), dst, np.full(n, 1), np.full(n, 40 * 1024))
    x = Exchange(m, *table, row_bytes=48 * 1024)
    got = data.copy()
    x.run(got, get_num_threads())
    np.testing.assert_array_equal(got, ref_exchange(data, *table))
    # the source sends once; every receiver pairs with its bus partner except tile 4 (partner 5)
    assert x.send_bytes[5] == 40 * 1024
    assert x.paired_bytes[4] == 0 and x.paired_bytes[6] == 40 * 1024


@pytest.mark.parametrize("bad, match", [
    (dict(nbytes=[-1]), "negative size"),
    (dict(dst_tile=[1472]), "destination tile 1472"),
    (dict(src_tile=[-1]), "source tile -1"),
    (dict(dst_offset=[ROW - 4]), "outside the tile"),
    (dict(src_offset=[-8]), "outside the tile"),
])
def test_bad_copies_rejected(bad, match):
    cols = dict(src_tile=[0], src_offset=[DST_AREA], dst_tile=[1], dst_offset=[0], nbytes=[16])
    cols.update(bad)
    with pytest.raises(ExchangeError, match=match):
        Exchange(ik.GC200, cols["src_tile"], cols["src_offset"], cols["dst_tile"],
                 cols["dst_offset"], cols["nbytes"], row_bytes=ROW)


def test_overlapping_writes_rejected_before_anything_is_written(rng):
    m = ik.GC200
    data = random_bytes(rng, (m.n_tiles, 1024))
    before = data.copy()
    with pytest.raises(ExchangeError, match="overlapping writes on tile 7"):
        Exchange(m, [0, 1], [DST_AREA, DST_AREA], [7, 7], [100, 110], [16, 16], row_bytes=ROW)
    # a long interval followed by a short one inside it is also an overlap
    with pytest.raises(ExchangeError, match="overlapping writes"):
        Exchange(m, [0, 1, 2], [DST_AREA] * 3, [7, 7, 7], [0, 10, 50], [100, 5, 5], row_bytes=ROW)
    with pytest.raises(ExchangeError, match="also reads"):
        Exchange(m, [3, 7], [DST_AREA, 0], [7, 8], [0, 0], [16, 16], row_bytes=ROW)
    np.testing.assert_array_equal(data, before)


def test_table_shape_errors():
    with pytest.raises(ExchangeError, match="differ in length"):
        Exchange(ik.GC200, [0, 1], [0], [2], [0], [4])
    with pytest.raises(ExchangeError, match="integers"):
        Exchange(ik.GC200, [0.5], [0], [2], [0], [4])


def test_exchange_cycles_hand_computed():
    m = ik.GC200.replace(exchange_bytes_per_cycle=4.0, exchange_overhead_cycles=100)
    # tile 3 receives 1000 B from tile 0 and 600 B from tile 1: 1600 / 4 = 400 cycles + 100
    x = Exchange(m, [0, 1], [0, 0], [3, 3], [0, 1000], [1000, 600])
    assert x.cycles == 500 and x.busiest_tile == 3
    assert x.total_bytes == 1600 and x.n_copies == 2
    # tile 0 sends 1000 B to tiles 2..9: sends once (1000 B); tiles 2/3, 4/5... share buses,
    # so each receiver is charged 500 B -> 125 cycles; the sender's 1000 B -> 250 cycles
    y = Exchange(m, [0] * 8, [0] * 8, list(range(2, 10)), [0] * 8, [1000] * 8)
    assert int(y.tile_cycles[2]) == 125 and int(y.tile_cycles[0]) == 250
    assert y.cycles == 350 and y.busiest_tile == 0
    # fractional rates: 47.5 TB/s -> 24.35 B/cycle, stored x16 as 390 -> ceil(16*1000/390)
    assert cost.exchange_cycles(1000, ik.GC200) == -(-16000 // 390) == 42


def test_empty_exchange_costs_nothing():
    x = Exchange(ik.GC200, [], [], [], [], [])
    assert x.cycles == 0 and x.busiest_tile == -1
    z = Exchange(ik.GC200, [0], [0], [1], [0], [0])   # zero-byte copies are dropped
    assert z.cycles == 0 and z.n_copies == 0


def test_shared_bus_rate_only_for_eligible_copies_hand_computed():
    """PopLibs grants the 2x shared-bus rate to a conv's inputs only (ExchangeEstimator.hpp):
    ``shared_bus`` selects the copies that may use it."""
    m = ik.GC200.replace(exchange_bytes_per_cycle=4.0, exchange_overhead_cycles=100)
    # tiles 2 and 3 share a bus; both receive an 800 B "input" region from tile 0 and a
    # 400 B "weight" region from tile 1
    args = ([0, 0, 1, 1], [0, 0, 0, 0], [2, 3, 2, 3], [0, 0, 800, 800], [800, 800, 400, 400])
    both = Exchange(m, *args)                                   # default: every copy eligible
    assert int(both.tile_cycles[2]) == (400 + 200) // 4         # 600 B charged -> 150
    inputs_only = Exchange(m, *args, shared_bus=[True, True, False, False])
    assert int(inputs_only.tile_cycles[2]) == (400 + 400) // 4  # 800 B -> 200
    assert int(inputs_only.paired_bytes[2]) == 800
    none = Exchange(m, *args, shared_bus=False)                 # e.g. an odd out-channel split
    assert int(none.tile_cycles[2]) == 1200 // 4 and int(none.paired_bytes.sum()) == 0
    # senders: tile 0 sends its 800 B region once (200 cycles), below the receivers' 300
    assert int(none.tile_cycles[0]) == 800 // 4 and none.cycles == 300 + 100
    assert none.transfer_cycles == none.cycles - 100 and none.overhead_cycles == 100
    with pytest.raises(ExchangeError, match="shared_bus"):
        Exchange(m, *args, shared_bus=[True, False])


def test_profile_categories_sum_to_total():
    """PopLibs-equivalent categories plus ipukern's additions (sync, exchange overhead) add up
    to the total, for a conv, a reduced matmul and a hand-built program."""
    from ipukern.core.profile import ADDITION_CATEGORIES
    profiles = [ik.estimate_conv2d((2, 64, 14, 14), (64, 4, 3, 3), padding=1, groups=16),
                ik.estimate_matmul((64, 16384), (16384, 64))]
    m = ik.GC200.replace(exchange_bytes_per_cycle=4.0, exchange_overhead_cycles=100)
    dev = ik.Device(m)
    tiles = np.arange(m.n_tiles)
    src = dev.alloc("src", np.where(tiles == 0, 256, 0))
    dst = dev.alloc("dst", np.where(tiles == 5, 256, 0))
    x = dev.exchange([0], [src[0]], [5], [dst[5]], [256], name="x")
    profiles.append(dev.run(dev.program([ik.Superstep("s", exchange=x)]), "estimate"))
    for p in profiles:
        b = p.breakdown()
        assert sum(b.values()) == p.total_cycles
        assert b["sync"] == p.sync_cycles == len(p.supersteps) * p.machine.sync_cycles
        n_xch = sum(1 for s in p.supersteps if s.exchange_cycles)
        assert b["exchange overhead"] == n_xch * p.machine.exchange_overhead_cycles
        assert p.poplibs_equivalent_cycles == p.total_cycles - sum(b[c] for c in ADDITION_CATEGORIES)
        assert "PopLibs-equivalent terms" in p.summary()
    assert profiles[2].breakdown() == {"exchange": 64, "sync": m.sync_cycles, "exchange overhead": 100}


def test_copy_kernel_every_short_size_and_alignment(rng):
    """copy_runs copies runs up to 64 bytes inline (size classes 1-3, 4-7, 8-16, 17-32,
    33-64) and longer ones with memcpy, prefetching ahead: every size 0..200 at random
    unaligned offsets, in one array and between two, one and two threads, equals NumPy."""
    from ipukern._kernels import _exchange
    n = 201
    nb = np.arange(n, dtype=np.int64)
    src_off = rng.integers(0, 64, n) + np.cumsum(np.r_[0, nb[:-1] + 64])
    dst_off = rng.integers(0, 64, n) + np.cumsum(np.r_[0, nb[:-1] + 64])
    row = int(max(src_off[-1], dst_off[-1]) + 300)
    src_row = rng.integers(0, 2, n).astype(np.int32)
    dst_row = (1 - src_row).astype(np.int32)        # within one array: the other row
    data = random_bytes(rng, (2, row))
    want = data.copy()
    for i in range(n):
        want[dst_row[i], dst_off[i]:dst_off[i] + nb[i]] = data[src_row[i], src_off[i]:src_off[i] + nb[i]]
    for bounds in (np.array([0, n]), np.array([0, 77, n])):
        got = data.copy()
        _exchange.copy_runs(got, got, src_row, src_off, dst_row, dst_off, nb, bounds)
        np.testing.assert_array_equal(got, want)
        other = data.copy()
        _exchange.copy_runs(other, data.copy(), src_row, src_off, dst_row, dst_off, nb, bounds)
        np.testing.assert_array_equal(other, want)


def test_trusted_exchange_equals_the_validated_one_and_public_entry_points_still_check():
    """``validate=False`` (ipukern's own builders) keeps every field and cost of the
    validated exchange; the public Device.exchange keeps validating."""
    from ipukern.conv import build_conv_program
    from ipukern.conv import ConvParams
    from ipukern.conv import plan_conv

    m = ik.GC200
    for p in (ConvParams.from_shapes((2, 16, 14, 14), (32, 16, 3, 3), padding=1),
              ConvParams.from_shapes((4, 64, 8, 8), (64, 1, 3, 3), padding=1, groups=64)):
        prog = build_conv_program(plan_conv(p, m))
        for step in prog.program.steps:
            ex = step.exchange
            if ex is None:
                continue
            cols = (ex.src_tile, ex.src_offset, ex.dst_tile, ex.dst_offset, ex.nbytes)
            rng = np.random.default_rng(0)
            perm = rng.permutation(ex.nbytes.size)             # any input order
            cols = tuple(c[perm] for c in cols)
            a = Exchange(m, *cols, row_bytes=ex.row_bytes, shared_bus=ex.shared_bus[perm])
            b = Exchange(m, *cols, row_bytes=ex.row_bytes, shared_bus=ex.shared_bus[perm],
                          validate=False)
            for f in ("src_tile", "src_offset", "dst_tile", "dst_offset", "nbytes", "shared_bus",
                      "recv_bytes", "paired_bytes", "send_bytes", "tile_cycles"):
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
            assert (a.cycles, a.why, a.row_needed, a.rows_needed) == \
                (b.cycles, b.why, b.row_needed, b.rows_needed)
    dev = ik.Device(m)
    off = dev.alloc("x", np.full(m.n_tiles, 64, np.int64))
    with pytest.raises(ExchangeError, match="overlapping writes"):
        dev.exchange([0, 1], [off[0], off[1]], [2, 2], [off[2], off[2]], [8, 8])
