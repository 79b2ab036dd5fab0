"""NCCL's all-reduce cost model and DDP bucketing (ipukern/gpu/comm.py), by hand.

Constants are NCCL's src/graph/tuning.cc at the commit of comm.NCCL_COMMIT: base latencies
(us) Tree 6.8/14.0/8.4, Ring 6.6/14.0/8.4 (LL/LL128/Simple); per hop NVLink Tree 0.6/1.25/4.0,
Ring 0.6/1.9/3.4; NET Tree 5.0/8.5/14, Ring 2.7/4.0/14.0.
"""
import math

import pytest

from ipukern.gpu import CollectiveTime, DDPOverlap, all_reduce_seconds, ddp_exposed_seconds

GiB, MiB = 2**30, 2**20


def one_node(nbytes, **kw):
    return all_reduce_seconds(nbytes, gpus_per_node=8, intra_bytes_per_s=300e9, **kw)


def test_ring_of_1gib_on_8_gpus_at_300_gbps():
    t = one_node(GiB)
    assert (t.algorithm, t.protocol) == ("ring", "Simple")
    # bus factor 2 (n-1)/n = 14/8 over each GPU's 300 GB/s; latency base 8.4 + 2 (n-1) x 3.4 us
    assert t.bandwidth_s == pytest.approx(GiB * 14 / 8 / 300e9, rel=1e-12)      # 6.2635 ms
    assert t.latency_s == pytest.approx((8.4 + 14 * 3.4) * 1e-6, rel=1e-12)     # 56 us
    assert t.seconds == pytest.approx(t.latency_s + t.bandwidth_s, rel=1e-12)
    assert t.bus_bytes_per_s == pytest.approx(300e9, rel=1e-12)
    # forcing the algorithm: the tree's Simple bus is min(0.92 x 300, 15 ch x 24) = 276 GB/s,
    # its algorithm bandwidth half that (no size correction at 2^24 x 64 B)
    tree = one_node(GiB, algorithm="tree")
    assert (tree.algorithm, tree.protocol) == ("tree", "Simple")
    assert tree.bandwidth_s == pytest.approx(GiB / (0.5 * 276e9), rel=1e-12)
    assert tree.latency_s == pytest.approx((8.4 + 2 * 7 * 4.0) * 1e-6, rel=1e-12)
    assert one_node(GiB, algorithm="ring") == t


def test_tiny_message_is_latency_bound():
    # one node: ring LL 6.6 + 14 x 0.6 = 15.0 us beats tree LL 6.8 + 2 x 7 x 0.6 = 15.2 us
    t = one_node(8)
    assert (t.algorithm, t.protocol) == ("ring", "LL")
    assert t.latency_s == pytest.approx(15.0e-6, rel=1e-12)
    # 4 nodes of 8: tree LL 6.8 + 2 x (7 x 0.6 + log2(4) x 5.0) = 35.2 us; ring LL would pay
    # 6.6 + 56 x max(0.6, 1.0 net overhead) + 6 x 2.7 = 78.8 us
    t = all_reduce_seconds(8, gpus_per_node=8, nodes=4, intra_bytes_per_s=300e9,
                           inter_bytes_per_s=200e9)
    assert (t.algorithm, t.protocol) == ("tree", "LL")
    assert t.latency_s == pytest.approx(35.2e-6, rel=1e-12)
    # tree LL bus: min(min(0.92 x 200, 200/24 ch x 17.8) / 3.8, llMaxBw 20.4) = 20.4 GB/s
    assert t.bandwidth_s == pytest.approx(8 / (0.5 * 20.4e9), rel=1e-12)
    ring = all_reduce_seconds(8, gpus_per_node=8, nodes=4, intra_bytes_per_s=300e9,
                              inter_bytes_per_s=200e9, algorithm="ring")
    assert (ring.protocol, ring.latency_s) == ("LL", pytest.approx(78.8e-6, rel=1e-12))


def test_multi_node_ring_is_held_to_the_nics_and_pays_the_plateau():
    t = all_reduce_seconds(GiB, gpus_per_node=8, nodes=2, intra_bytes_per_s=240e9,
                           inter_bytes_per_s=200e9, algorithm="ring")
    assert t.protocol == "Simple"
    assert t.bandwidth_s == pytest.approx(GiB * 30 / 16 / 200e9, rel=1e-12)
    # (8.4 + 28 x max(3.4, 3 x 1.0) + 2 x 14.0) x 1.4 (Ampere plateau)
    assert t.latency_s == pytest.approx(1.4 * (8.4 + 28 * 3.4 + 2 * 14.0) * 1e-6, rel=1e-12)


def test_pcie_node_has_no_ll128_and_pcie_latency():
    for nbytes in (64 * 2**10, 4 * MiB, GiB):
        assert all_reduce_seconds(nbytes, gpus_per_node=4, intra_bytes_per_s=12e9,
                                  intra_link="pcie", arch="turing").protocol != "LL128"
    t = all_reduce_seconds(GiB, gpus_per_node=4, intra_bytes_per_s=12e9, intra_link="pcie")
    assert t.latency_s == pytest.approx((8.4 + 6 * 5.7) * 1e-6, rel=1e-12)
    assert t.bandwidth_s == pytest.approx(GiB * 6 / 4 / 12e9, rel=1e-12)


def test_one_gpu_and_zero_bytes():
    t = all_reduce_seconds(GiB, gpus_per_node=1, intra_bytes_per_s=300e9)
    assert (t.seconds, t.algorithm) == (0.0, "none")
    z = one_node(0)
    assert z.bandwidth_s == 0.0 and z.seconds == z.latency_s == pytest.approx(15.0e-6)
    assert isinstance(z, CollectiveTime)


@pytest.mark.parametrize("kw, err, match", [
    ({"nbytes": -1}, ValueError, r"nbytes must be a finite number >= 0, got -1"),
    ({"nbytes": math.nan}, ValueError, "nbytes must be a finite"),
    ({"gpus_per_node": 0}, ValueError, r"gpus_per_node must be >= 1, got 0"),
    ({"gpus_per_node": 2.0}, TypeError, "gpus_per_node must be an int"),
    ({"nodes": 0}, ValueError, "nodes must be >= 1"),
    ({"nodes": 2}, ValueError, "inter_bytes_per_s is needed for 2 nodes"),
    ({"algorithm": "nvls"}, ValueError, r"algorithm must be one of .*'nvls'"),
    ({"arch": "blackwell"}, ValueError, "arch must be one of"),
    ({"intra_link": "ethernet"}, ValueError, "intra_link must be one of"),
    ({"intra_bytes_per_s": 0}, ValueError, "intra_bytes_per_s must be a positive"),
])
def test_bad_input(kw, err, match):
    args = {"nbytes": 1024, "gpus_per_node": 8, "intra_bytes_per_s": 300e9} | kw
    nbytes = args.pop("nbytes")
    with pytest.raises(err, match=match):
        all_reduce_seconds(nbytes, **args)


# ----------------------------------------------------------------------------- DDP
def per_mib(nbytes):
    return 1e-3 * nbytes / MiB                        # 1 ms per MiB


def test_last_bucket_sticks_out_by_its_all_reduce():
    # bucket 0 = [1 MiB] (reaches the 1 MiB first cap); bucket 1 = [10, 20 MiB] (reaches 25)
    r = ddp_exposed_seconds([1e-3, 2e-3, 3e-3], [MiB, 10 * MiB, 20 * MiB], all_reduce=per_mib)
    assert r.buckets == 2
    assert r.backward_s == 3e-3
    assert r.comm_s == pytest.approx(31e-3)
    # bucket 0 runs 1 -> 2 ms; bucket 1 starts at 3 ms (its last gradient) and runs 30 ms
    assert r.finish_s == pytest.approx(33e-3)
    assert r.exposed_s == pytest.approx(30e-3)
    assert isinstance(r, DDPOverlap)


def test_a_bucket_waits_for_the_previous_all_reduce():
    # three 25 MiB tensors: each one reaches its bucket's cap (1 MiB first, then 25 MiB), so
    # buckets [25], [25], [25] MiB ready at 1, 2, 3 ms, 25 ms each, back to back
    r = ddp_exposed_seconds([1e-3, 2e-3, 3e-3], [25 * MiB] * 3, all_reduce=per_mib)
    assert r.buckets == 3
    assert r.finish_s == pytest.approx(1e-3 + 75e-3)    # back to back from 1 ms
    assert r.exposed_s == pytest.approx(76e-3 - 3e-3)


def test_bucket_caps_and_a_short_last_bucket():
    # 400 tensors of 64 KiB ready every 1 ms: the first bucket takes 16 (1 MiB); the second
    # would close at 400 (25 MiB) but only 384 (24 MiB) are left, so it is the last
    ready = [1e-3 * (i + 1) for i in range(400)]
    r = ddp_exposed_seconds(ready, [64 * 2**10] * 400, all_reduce=per_mib)
    assert r.buckets == 2
    assert r.comm_s == pytest.approx(25e-3)
    assert r.finish_s == pytest.approx(0.4 + 24e-3)     # the last bucket: 24 MiB after 400 ms
    assert r.exposed_s == pytest.approx(24e-3)
    small = ddp_exposed_seconds(ready, [64 * 2**10] * 400, all_reduce=per_mib, bucket_bytes=MiB)
    assert small.buckets == 25 and small.exposed_s == pytest.approx(1e-3)
    assert ddp_exposed_seconds([], [], all_reduce=per_mib).buckets == 0


def test_ddp_bad_input():
    with pytest.raises(ValueError, match="differ in length: 2 vs 1"):
        ddp_exposed_seconds([0, 1], [4], all_reduce=per_mib)
    with pytest.raises(ValueError, match=r"grad_bytes\[1\] must be a finite number >= 0"):
        ddp_exposed_seconds([0, 1], [4, -4], all_reduce=per_mib)
    with pytest.raises(TypeError, match="all_reduce must be a callable"):
        ddp_exposed_seconds([0], [4], all_reduce=3.0)
    with pytest.raises(ValueError, match="bucket_bytes must be a positive"):
        ddp_exposed_seconds([0], [4], all_reduce=per_mib, bucket_bytes=0)
    with pytest.raises(ValueError, match=r"all_reduce\(4\) returned -1.0"):
        ddp_exposed_seconds([0], [4], all_reduce=lambda b: -1.0)
