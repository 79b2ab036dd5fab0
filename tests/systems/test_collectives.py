"""Cross-IPU BSP and collectives: numerics against NumPy, costs against hand computation."""
import math

import numpy as np
import pytest

import ipukern as ik
from ipukern.core.cost import reduce_cycles

CHIP = ik.GC200.replace(n_tiles=16, name="GC200-16")
LANE = 128 * 2**30 / 8 * 0.85
CLOCK = 1.325e9


def make(n, e=1000, dtype="float32", tiles=16, seed=0, **pod_kw):
    dev = ik.SystemDevice(ik.System.pod(n, CHIP, **pod_kw))
    t = dev.add_tensor("g", (e,), dtype, ik.TileMapping.linear(e, tiles))
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(e).astype(dtype) for _ in range(n)]
    for i, x in enumerate(xs):
        dev.write(t, i, x)
    return dev, t, xs


def chunk_index(t, frac):
    """Flat indices of a chunk: part c1 of n1 of every tile interval, then part c2 of n2 of
    that... (the documented split)."""
    m = t.mapping
    idx = []
    for s, k in zip(m.start, m.count):
        a, b = s, s + k
        for c, n in frac:
            a, b = a + (b - a) * c // n, a + (b - a) * (c + 1) // n
        idx.append(np.arange(a, b))
    return np.concatenate(idx)


def ring_fold(xs, ring, t, method="bidirectional"):
    """NumPy sum of each chunk in its ring's order: chunk c starts at ring position c; the
    bidirectional pair folds half 0 clockwise and half 1 round the reversed ring."""
    n = len(ring)
    dirs = [(ring, ())] if method == "ring" else [(ring, ((0, 2),)), (ring[:1] + ring[:0:-1], ((1, 2),))]
    out = np.empty_like(xs[0])
    for r, prefix in dirs:
        for c in range(n):
            sel = chunk_index(t, (*prefix, (c, n)))
            acc = xs[r[c]][sel].copy()
            for k in range(1, n):
                acc = xs[r[(c + k) % n]][sel] + acc
            out[sel] = acc
    return out


@pytest.mark.parametrize("n, e, method", [(2, 1000, "ring"), (4, 1000, "bidirectional"), (8, 333, "ring"),
                                          (16, 4099, "bidirectional"), (4, 3, "bidirectional")])
def test_all_reduce_equals_numpy(n, e, method):
    dev, t, xs = make(n, e)
    prof = dev.run(ik.all_reduce(dev, t, method=method))
    ref = ring_fold(xs, dev.system.ring(), t, method)
    for i in range(n):
        out = dev.read(t, i)
        np.testing.assert_array_equal(out, ref)         # bitwise: the documented order
    np.testing.assert_allclose(ref, np.sum(np.array(xs, np.float64), 0), rtol=1e-5, atol=1e-5)
    assert prof.total_cycles > 0


def test_all_reduce_float16_and_integers_exact():
    dev, t, _ = make(4, 512, "float16")
    xs = [np.arange(512, dtype=np.float16) % 7 + i for i in range(4)]
    for i, x in enumerate(xs):
        dev.write(t, i, x)
    dev.run(ik.all_reduce(dev, t))
    np.testing.assert_array_equal(dev.read(t, 3), np.sum(np.array(xs, np.float64), 0).astype(np.float16))


def test_hierarchical_all_reduce_across_gw_links():
    dev, t, xs = make(8, 640, domain_ipus=4)
    prog = ik.all_reduce(dev, t)
    kinds = {dev.system.link(u, v).kind for st in prog.steps if st.links is not None
             for s, d, _, _ in st.links.segments
             for u, v in zip(dev.system.route(s, d)[:-1], dev.system.route(s, d)[1:])}
    assert kinds == {"ipu-link", "gw-link"}
    dev.run(prog)
    ref = np.sum(np.array(xs, np.float64), 0)
    outs = [dev.read(t, i) for i in range(8)]
    for o in outs:
        np.testing.assert_array_equal(o, outs[0])
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)


def test_reduce_scatter_all_gather_broadcast():
    dev, t, xs = make(4, 101)
    prog, owned = ik.reduce_scatter(dev, t)
    dev.run(prog)
    full = ring_fold(xs, dev.system.ring(), t)
    for ipu, sel in owned.items():
        np.testing.assert_array_equal(dev.read(t, ipu)[sel], full[sel])
    assert np.array_equal(np.sort(np.concatenate(list(owned.values()))), np.arange(101))
    dev.run(ik.all_gather(dev, t))
    for i in range(4):
        np.testing.assert_array_equal(dev.read(t, i), full)
    dev2, t2, xs2 = make(4, 77, seed=3)
    dev2.run(ik.broadcast(dev2, t2, root=2))
    for i in range(4):
        np.testing.assert_array_equal(dev2.read(t2, i), xs2[2])


def test_execute_and_estimate_same_cycles_and_repeatable():
    dev, t, xs = make(4, 500)
    prog = ik.all_reduce(dev, t)
    est = dev.run(prog, "estimate")
    ex = dev.run(prog)
    assert est.total_cycles == ex.total_cycles
    assert [r.total_cycles for r in est.supersteps] == [r.total_cycles for r in ex.supersteps]


def test_link_cost_hand_computed_two_ipus():
    # one superstep moving 32 KiB from IPU 0 to IPU 1, spread over 16 tiles (2 KiB each):
    # the 6-lane rung carries it; each tile port sends 2 KiB at 24.35 B/cycle (less)
    dev = ik.SystemDevice(ik.System.pod(2, CHIP))
    buf = [d.alloc("b", np.full(16, 2048), "user") for d in dev.devices]
    tiles = np.arange(16)
    lx = dev.link_exchange(np.zeros(16), tiles, buf[0], np.ones(16), tiles, buf[1], np.full(16, 2048))
    link = math.ceil((32768 / (6 * LANE) + 15e-9) * CLOCK)
    assert lx.link_cycles == link
    assert lx.port_cycles < link
    assert lx.cycles == link + CHIP.exchange_overhead_cycles
    rec = ik.SystemSuperstep("x", links=lx).record(0, dev.system, 2)
    assert rec.sync_cycles == math.ceil(15e-9 * CLOCK * 1 * 2) == 40
    assert rec.exchange_cycles == lx.cycles and "rung" not in rec.exchange_why


def test_concurrent_transfers_share_a_link():
    # POD16 ladder: 0->4 routes [0, 2, 4], 2->6 routes [2, 4, 6]; both cross rail 2->4
    dev = ik.SystemDevice(ik.System.pod(16, CHIP))
    b = [d.alloc("b", np.full(16, 4096), "user") for d in dev.devices]
    lx = dev.link_exchange([0, 2], [0, 0], [b[0][0], b[2][0]], [4, 6], [1, 1], [b[4][1], b[6][1]],
                           [4096, 4096])
    assert dev.system.route(0, 4) == [0, 2, 4] and dev.system.route(2, 6) == [2, 4, 6]
    assert lx.link_cycles == math.ceil((2 * 4096 / (2 * LANE) + 2 * 15e-9) * CLOCK)
    assert lx.busiest_link == (2, 4)


def test_closed_form_ring_all_reduce():
    # M2000 ring 0-2-3-1: rails (2 lanes) are its slowest links; 2 (N - 1) = 6 steps of 1/4
    nbytes = 100e6
    c = ik.collective_seconds(ik.IPU_M2000, "all_reduce", nbytes, method="ring")
    chunk = nbytes / 4
    assert c.add_seconds == pytest.approx(3 * reduce_cycles(ik.GC200, math.ceil(chunk / 4 / 1472), 2,
                                                            "float32", "float32") / CLOCK)
    assert c.steps == 6 and c.algorithm == "ring"
    assert c.link_seconds == pytest.approx(6 * (chunk / (2 * LANE) + 15e-9))
    # the bidirectional pair sends half of each chunk each way: half the link time
    b = ik.collective_seconds(ik.IPU_M2000, "all_reduce", nbytes)
    assert b.algorithm == "bidirectional ring pair"
    assert b.link_seconds == pytest.approx(6 * (chunk / 2 / (2 * LANE) + 15e-9))
    sync = (math.ceil(15e-9 * CLOCK * 2 * 2) + 100) / CLOCK
    assert c.sync_seconds == pytest.approx(6 * sync)
    add = reduce_cycles(ik.GC200, math.ceil(chunk / 4 / 1472 / 2), 2, "float32", "float32") / CLOCK
    assert b.add_seconds == pytest.approx(3 * 2 * add)
    assert ik.collective_seconds(ik.IPU_M2000, "all_gather", nbytes).steps == 3
    assert ik.collective_seconds(ik.IPU_M2000, "broadcast", nbytes).steps == 6
    h = ik.collective_seconds(ik.System.pod(128), "all_reduce", nbytes)
    assert h.algorithm.startswith("hierarchical") and h.steps == 63 + 1 + 1 + 63


def test_closed_form_tracks_built_program_for_large_tensors():
    dev = ik.SystemDevice(ik.System.pod(4, CHIP))
    e = 1 << 20
    t = dev.add_tensor("g", (e,), "float32", ik.TileMapping.linear(e, 16))
    prof = dev.run(ik.all_reduce(dev, t), "estimate")
    closed = ik.collective_seconds(dev.system, "all_reduce", 4 * e)
    assert prof.seconds == pytest.approx(closed.seconds, rel=0.1)


def test_bad_input():
    dev, t, _ = make(4, 100)
    with pytest.raises(ik.ExchangeError, match="stays on IPU 1"):
        dev.link_exchange([1], [0], [0], [1], [1], [0], [4])
    with pytest.raises(ik.ExchangeError, match="outside 0..3"):
        dev.link_exchange([0], [0], [0], [7], [1], [0], [4])
    with pytest.raises(ik.ExchangeError, match="overlapping writes"):
        dev.link_exchange([0, 2], [0, 0], [0, 0], [1, 1], [3, 3], [0, 2], [4, 4])
    with pytest.raises(ik.SystemConfigError, match="root 9"):
        ik.broadcast(dev, t, root=9)
    with pytest.raises(ik.SystemConfigError, match="no part on IPU"):
        ik.all_reduce(dev, t, ipus=[0, 5])
    with pytest.raises(TypeError, match="SystemTensor"):
        ik.all_reduce(dev, t.on(0))
    with pytest.raises(ValueError, match="mode"):
        dev.run(ik.all_reduce(dev, t), "fast")
    with pytest.raises(ValueError, match="unknown collective"):
        ik.collective_seconds(ik.IPU_POD16, "gather", 10)


def test_concurrent_groups_share_links_closed_form_and_built_program():
    # ladder of 8: rails 0-2-4-6 and 1-3-5-7 (2 lanes each). Groups {0, 4} and {2, 6} (two
    # pipeline stages' IPUs in 2 replicas of 4 stages) route over 0-2-4 and 2-4-6: both use
    # the rail 2-4. A ring of two sends both half chunks over each direction: chunk = B / 2
    # per link direction and step alone, B on 2->4 when both groups run at once.
    pod = ik.System.pod(8, CHIP)
    bw, lat = pod.link(2, 4).bytes_per_second, pod.link(2, 4).latency_s
    B = 1e8
    alone = ik.collective_seconds(pod, "all_reduce", B, [0, 4])
    both = ik.systems.collectives.concurrent_seconds(pod, "all_reduce", [(B, [0, 4]), (B, [2, 6])])
    assert alone.steps == both.steps == 2
    assert alone.link_seconds == pytest.approx(2 * (B / 2 / bw + 2 * lat))
    assert both.link_seconds == pytest.approx(2 * (B / bw + 2 * lat))
    # groups on different rails ({0, 4} and {1, 5}) share nothing: the cost of one
    apart = ik.systems.collectives.concurrent_seconds(pod, "all_reduce", [(B, [0, 4]), (B, [1, 5])])
    assert apart.link_seconds == pytest.approx(alone.link_seconds)   # (the sync spans 4 IPUs)
    with pytest.raises(ik.SystemConfigError, match="overlap"):
        ik.systems.collectives.concurrent_seconds(pod, "all_reduce", [(B, [0, 4]), (B, [4, 6])])
    # the built programs, run at once: real sums per group, and the shared rail in the cost
    e = 64 * 16
    dev = ik.SystemDevice(pod)
    rng = np.random.default_rng(3)
    ts, progs, want = [], [], {}
    for g in ([0, 4], [2, 6]):
        t = dev.add_tensor(f"g{g[0]}", (e,), "float32", ik.TileMapping.linear(e, 16), ipus=g)
        xs = [rng.standard_normal(e).astype(np.float32) for _ in g]
        for i, x in zip(g, xs):
            dev.write(t, i, x)
        ts.append(t)
        progs.append(ik.all_reduce(dev, t, name=f"ar{g[0]}"))
        want[g[0]] = xs[0].astype(np.float64) + xs[1]
    alone_cyc = [sum(r.total_cycles for r in p.records) for p in progs]
    prog = ik.systems.collectives.concurrent(dev, progs, label="both")
    prof = dev.run(prog)
    for t, g in zip(ts, ([0, 4], [2, 6])):
        for i in g:
            np.testing.assert_allclose(dev.read(t, i), want[g[0]], rtol=1e-6)
    lx = prog.steps[0].links
    shared = math.ceil((2 * e * 4 / 2 / bw + 2 * lat) * CLOCK)     # both groups' n/2 floats on 2->4
    assert lx.link_cycles == shared > progs[0].steps[0].links.link_cycles
    assert prof.total_cycles > max(alone_cyc)
    with pytest.raises(ik.SystemConfigError, match="both compute on IPU"):
        ik.systems.collectives.concurrent(dev, [progs[0], progs[0]])


def test_grouped_all_reduce_sums_each_group():
    dev, t, xs = make(8, 1000)
    prog = ik.all_reduce(dev, t, groups=[[0, 1, 2, 3], [4, 5, 6, 7]])
    dev.run(prog)
    for g in ([0, 1, 2, 3], [4, 5, 6, 7]):
        want = sum(xs[i].astype(np.float64) for i in g)
        for i in g:
            np.testing.assert_allclose(dev.read(t, i), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ik.SystemConfigError, match="overlap"):
        ik.all_reduce(dev, t, groups=[[0, 1], [1, 2]])


def _used(dev):
    return [d.memory.used.copy() for d in dev.devices]


@pytest.mark.parametrize("build", [
    lambda dev, t: ik.all_reduce(dev, t),
    lambda dev, t: ik.reduce_scatter(dev, t)[0],
    lambda dev, t: ik.all_gather(dev, t),
    lambda dev, t: ik.broadcast(dev, t, 0),
    lambda dev, t: ik.all_reduce(dev, t, groups=[[0, 1], [2, 3]]),
])
def test_collectives_built_again_take_no_more_tile_memory(build):
    """Issue 36 item 5: each collective built on a SystemDevice allocated a new receive
    buffer on every IPU, so a loop building one per step ran the tiles out of memory. They
    share the device's receive area now: the 2nd..10th build leave every tile's use as the
    first left it, and the last program built still runs."""
    dev, t, xs = make(4, 1000)
    build(dev, t)
    after_first = _used(dev)
    for _ in range(9):
        prog = build(dev, t)
    for a, b in zip(after_first, _used(dev)):
        np.testing.assert_array_equal(a, b)
    dev.run(prog)


def test_a_larger_collective_grows_the_shared_receive_area_once():
    dev, t, xs = make(4, 1000)
    big = dev.add_tensor("big", (4000,), "float32", ik.TileMapping.linear(4000, 16))
    for i, x in enumerate(xs):
        dev.write(big, i, np.tile(x, 4))
    ik.all_reduce(dev, t)
    small_used = _used(dev)
    prog = ik.all_reduce(dev, big)
    grown = _used(dev)
    assert all((g >= s).all() and (g > s).any() for g, s in zip(grown, small_used))
    ik.all_reduce(dev, t)              # fits the grown area: nothing more
    ik.all_reduce(dev, big)
    for a, b in zip(grown, _used(dev)):
        np.testing.assert_array_equal(a, b)
    dev.run(prog)
    ref = ring_fold([np.tile(x, 4) for x in xs], dev.system.ring(), big)
    for i in range(4):
        np.testing.assert_allclose(dev.read(big, i), ref, rtol=1e-6)
