"""Engine: built-in vertices against NumPy, multi-superstep reduction, profiles, modes."""
import json

import numpy as np
import pytest

import ipukern as ik
from ipukern import ComputeSet, Exchange, Superstep, TileMapping
from ipukern.core import cost
from ipukern.core import vertices as V
from ipukern.core.collectives import reduce_sum


def make(dev, name, n, dtype="float32", tiles=None):
    n_tiles = dev.machine.n_tiles if tiles is None else tiles
    return dev.add_tensor(name, (n,), dtype, TileMapping.linear(n, n_tiles))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_binary_ops_match_numpy(rng, op, dtype):
    dev = ik.Device()
    n = 10_007
    a, b, out = (make(dev, k, n, dtype) for k in "abo")
    av = rng.standard_normal(n).astype(dtype)
    bv = rng.standard_normal(n).astype(dtype)
    av[3], bv[4] = np.nan, np.nan
    dev.write(a, av)
    dev.write(b, bv)
    batch = V.binary_op(dev.machine, op, out, a, b)
    prog = dev.program([Superstep(op, compute=ComputeSet(dev.machine, [batch]))])
    dev.run(prog)
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum}[op](av.astype(np.float32), bv.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(dev.read(out), ref)


def test_fill_and_scale(rng):
    dev = ik.Device(ik.GC2)
    a, o = make(dev, "a", 999, "float16"), make(dev, "o", 999, "float16")
    av = rng.standard_normal(999).astype(np.float16)
    dev.write(a, av)
    m = dev.machine
    dev.run(dev.program([Superstep("s", compute=ComputeSet(m, [V.scale(m, o, a, 0.5)]))]))
    np.testing.assert_array_equal(dev.read(o), (av.astype(np.float32) * 0.5).astype(np.float16))
    dev.run(dev.program([Superstep("f", compute=ComputeSet(m, [V.fill(m, o, 3.25)]))]))
    assert (dev.read(o) == np.float16(3.25)).all()


@pytest.mark.parametrize("n, tiles, fan_in", [(100_000, 1472, 16), (5, 1472, 2), (4096, 7, 3)])
def test_reduce_sum_over_tiles(rng, n, tiles, fan_in):
    dev = ik.Device()
    x = make(dev, "x", n, tiles=tiles)
    xv = rng.standard_normal(n).astype(np.float32)
    dev.write(x, xv)
    steps, part = reduce_sum(dev, x, fan_in=fan_in)
    prog = dev.program(steps)
    prof = dev.run(prog)
    total = dev.read(part)[0]
    assert total == pytest.approx(xv.astype(np.float64).sum(), rel=1e-5, abs=1e-4)
    active = min(n, tiles)
    stages = 0
    k = active
    while k > 1:
        k = -(-k // fan_in)
        stages += 1
    assert len(prof.supersteps) == stages + 1
    # deterministic: same value and cycles on every run and thread count
    ik.set_num_threads(1)
    try:
        prof1 = dev.run(prog)
        assert dev.read(part)[0] == total
    finally:
        ik.set_num_threads(None)
    assert prof1.total_cycles == prof.total_cycles


def test_estimate_equals_execute():
    dev = ik.Device()
    x = make(dev, "x", 50_000)
    dev.write(x, np.ones(50_000, np.float32))
    steps, _ = reduce_sum(dev, x)
    prog = dev.program(steps, label="r")
    e = dev.run(prog, mode="estimate")
    r = dev.run(prog, mode="execute")
    assert e.total_cycles == r.total_cycles
    assert [s.total_cycles for s in e.supersteps] == [s.total_cycles for s in r.supersteps]
    assert e.bytes_exchanged == r.bytes_exchanged > 0
    with pytest.raises(ValueError, match="mode"):
        dev.run(prog, mode="fast")
    with pytest.raises(ValueError, match="needs the device"):
        ik.run_program(prog, mode="execute")


def test_profile_hand_computed():
    m = ik.GC200.replace(exchange_bytes_per_cycle=4.0, sync_cycles=90, exchange_overhead_cycles=100)
    dev = ik.Device(m)
    a, b, o = (make(dev, k, 6 * 2 * 100, tiles=1) for k in "abo")  # 1200 floats on tile 0
    cs = ComputeSet(m, [V.binary_op(m, "add", o, a, b)])
    # 1200 floats: 200 per worker = 100 64-bit vectors x 2 loads + 58 overhead, x6, + 33
    assert cs.cycles == 6 * (58 + 100 * 2) + 33 == cost.elementwise_cycles(m, 1200, "float32", 2)
    x = Exchange(m, [0], [0], [1], [0], [4800])        # 4800 B at 4 B/cycle
    prof = dev.run(dev.program([Superstep("add+send", compute=cs, exchange=x),
                                Superstep("empty")]), mode="estimate")
    s0, s1 = prof.supersteps
    assert (s0.compute_cycles, s0.sync_cycles, s0.exchange_cycles) == (1581, 90, 1300)
    assert (s1.compute_cycles, s1.sync_cycles, s1.exchange_cycles) == (0, 90, 0)
    assert prof.total_cycles == 1581 + 90 + 1300 + 90
    assert prof.seconds == pytest.approx(prof.total_cycles / m.clock_hz)
    assert s0.compute_tile == 0 and s0.exchange_tile in (0, 1) and s0.bytes_exchanged == 4800
    assert "tile 0 sends 4800 B" in s0.exchange_why
    d = json.loads(prof.to_json())
    assert d["total_cycles"] == prof.total_cycles and len(d["supersteps"]) == 2
    assert "add+send" in prof.summary()


def test_vertices_cannot_reach_outside_their_tile():
    m = ik.GC200
    dev = ik.Device(m)
    a = make(dev, "a", 16, tiles=1)
    batch = V.binary_op(m, "add", a, a, a)
    batch.args["out"][:] = m.tile_bytes - 8          # 64 B write from 8 B before the end
    batch.regions = [(batch.args["out"], np.array([64]))]
    with pytest.raises(ValueError, match="outside the tile"):
        ComputeSet(m, [batch])
    with pytest.raises(ValueError, match="differently"):
        V.binary_op(m, "add", a, a, make(dev, "b", 16, tiles=2))


def test_overflowing_program_still_runs_and_reports():
    m = ik.GC2
    dev = ik.Device(m, allow_overflow=True)
    n = m.tile_bytes // 4                      # more than the budget on tile 0
    x = dev.add_tensor("x", (n,), "float32", TileMapping.single(n, 0))
    dev.write(x, np.arange(n, dtype=np.float32))
    steps, part = reduce_sum(dev, x)
    prof = dev.run(dev.program(steps))
    assert list(prof.memory.overflow_tiles) == [0]
    assert dev.read(part)[0] == pytest.approx(float(np.arange(n, dtype=np.float64).sum()), rel=1e-4)
