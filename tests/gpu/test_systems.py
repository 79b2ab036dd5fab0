"""GPU systems (ipukern/gpu/systems.py): presets, NCCL's view of the links, multi-node."""
import pytest

from ipukern.gpu import (A100_40GB, A100_80GB, DGX_A100, DGX_A100_40GB, DGX_H100, GPU_SYSTEMS, H100,
                         GPUSystem, all_reduce_seconds, get_gpu_system, gpu_all_reduce_seconds)

GiB = 2**30


def test_presets():
    assert DGX_A100.gpu is A100_80GB and DGX_A100_40GB.gpu is A100_40GB and DGX_H100.gpu is H100
    assert set(GPU_SYSTEMS) == {"DGX_A100", "DGX_A100_40GB", "DGX_H100"}
    for s in GPU_SYSTEMS.values():
        assert (s.n_gpus, s.gpus_per_node, s.nodes) == (8, 8, 1) and s.sources
    # NCCL counts 12 NVLink3 x 20 GB/s of the 300, and 18 NVLink4 x 20.6 of the 450
    assert DGX_A100.nccl_intra_bytes_per_s == pytest.approx(240e9)
    assert DGX_H100.nccl_intra_bytes_per_s == pytest.approx(18 * 20.6e9)
    assert (DGX_A100.nic_bytes_per_s, DGX_H100.nic_bytes_per_s) == (200e9, 400e9)
    assert DGX_H100.peak_flops("float16") == pytest.approx(8 * 989.4e12)


def test_one_node_all_reduce_uses_nccls_model():
    t = DGX_A100.all_reduce_seconds(GiB)
    assert (t.algorithm, t.protocol) == ("ring", "Simple")
    assert t.seconds == pytest.approx(GiB * 14 / 8 / 240e9 + (8.4 + 14 * 3.4) * 1e-6, rel=1e-12)
    assert gpu_all_reduce_seconds(DGX_A100, GiB) == t.seconds
    assert gpu_all_reduce_seconds("DGX_A100", GiB, 1) == 0.0
    four = DGX_A100.all_reduce_seconds(GiB, n_gpus=4)
    assert four.bandwidth_s == pytest.approx(GiB * 6 / 4 / 240e9, rel=1e-12)
    assert DGX_A100.all_reduce_seconds(GiB, algorithm="tree").algorithm == "tree"


def test_cluster_all_reduce_over_the_nics():
    c = GPUSystem.cluster(DGX_A100, 4)
    assert (c.name, c.n_gpus, c.nodes) == ("DGX_A100x4", 32, 4)
    # 16 GPUs = 2 nodes: the ring is held to the node's 200 GB/s of NICs, latency x1.4 plateau
    t = c.all_reduce_seconds(GiB, n_gpus=16, algorithm="ring")
    assert t.bandwidth_s == pytest.approx(GiB * 30 / 16 / 200e9, rel=1e-12)
    assert t.latency_s == pytest.approx(1.4 * (8.4 + 28 * 3.4 + 2 * 14.0) * 1e-6, rel=1e-12)
    same = all_reduce_seconds(GiB, gpus_per_node=8, nodes=2, intra_bytes_per_s=240e9,
                              inter_bytes_per_s=200e9, algorithm="ring")
    assert t == same
    with pytest.raises(ValueError, match="n_gpus=12 is not whole nodes of 8 GPUs"):
        c.all_reduce_seconds(GiB, n_gpus=12)
    with pytest.raises(ValueError, match="has 32 GPUs; cannot use n_gpus=64"):
        c.all_reduce_seconds(GiB, n_gpus=64)
    with pytest.raises(ValueError, match="one-node base system"):
        GPUSystem.cluster(c, 2)


def test_pcie_system_without_nvlink():
    s = GPUSystem("T4x4", "T4", 4)
    assert s.intra_link == "pcie" and s.link_bytes_per_second == 16e9
    assert s.nccl_intra_bytes_per_s == pytest.approx(12e9)       # NCCL's PCI_BW
    t = s.all_reduce_seconds(GiB)
    assert t.latency_s == pytest.approx((8.4 + 6 * 5.7) * 1e-6, rel=1e-12)


def test_names_replace_describe():
    assert get_gpu_system("dgx-h100") is DGX_H100
    assert get_gpu_system("DGX_A100_80GB") is DGX_A100            # MLPerf's name for it
    with pytest.raises(ValueError, match=r"unknown GPU system 'DGX_B200'; presets are"):
        get_gpu_system("DGX_B200")
    r = DGX_A100.replace(nvlink_bytes_per_s=150e9)
    assert r.name == "DGX_A100*" and r.nccl_intra_bytes_per_s == pytest.approx(120e9)
    assert DGX_A100.replace(name="x").name == "x"
    d = DGX_A100.describe()
    assert "1 x 8 x A100_80GB" in d and "NCCL sees 240" in d and "200 GB/s per node" in d


@pytest.mark.parametrize("kw, match", [
    ({"gpus_per_node": 0}, r"gpus_per_node must be a positive int, got 0"),
    ({"nodes": 2}, "2 nodes need nic_bytes_per_s"),
    ({"nvlink_bytes_per_s": -1.0}, r"nvlink_bytes_per_s must be a positive .* got -1.0"),
    ({"gpu": "B200"}, "unknown GPU 'B200'"),
])
def test_bad_systems(kw, match):
    args = {"name": "x", "gpu": "A100_80GB", "gpus_per_node": 8} | kw
    with pytest.raises(ValueError, match=match):
        GPUSystem(**args)
    with pytest.raises(ValueError, match="nbytes must be a finite number >= 0"):
        gpu_all_reduce_seconds(DGX_A100, -1.0)
