"""GPU specs (ipukern/gpu/specs.py): datasheet figures, per-SM limits, names and validation."""
import pytest

from ipukern.gpu import (A100_40GB, A100_80GB, A100_PCIE_40GB, A100_PCIE_80GB, GPU_PRESETS, H100,
                         H100_PCIE, L4, P4, P100, T4, TITAN_RTX, V100, V100_PCIE, GPUSpec, get_gpu)
from ipukern.gpu import model, specs


def test_presets_and_their_datasheet_figures():
    assert set(GPU_PRESETS) == {"A100_40GB", "A100_80GB", "A100_PCIE_40GB", "A100_PCIE_80GB", "V100",
                                "V100_PCIE", "H100", "H100_PCIE", "L4", "T4", "P100", "P4", "TITAN_RTX"}
    v = V100_PCIE
    assert (v.fp32_flops, v.fp16_tensor_flops, v.hbm_bandwidth) == (14e12, 112e12, 900e9)
    assert v.boost_clock_hz == 1.38e9 and v.nvlink_bytes_per_s is None
    assert (A100_PCIE_40GB.hbm_bandwidth, A100_PCIE_40GB.tdp_watts) == (1.555e12, 250.0)
    assert (A100_PCIE_80GB.hbm_bandwidth, A100_PCIE_80GB.tdp_watts) == (1.935e12, 300.0)
    assert (H100_PCIE.sm_count, H100_PCIE.fp16_tensor_flops, H100_PCIE.hbm_bandwidth) == (114, 756e12, 2.0e12)
    assert (L4.sm_count, L4.fp16_tensor_flops, L4.l2_bytes, L4.tdp_watts) == (58, 121e12, 48 * 2**20, 72.0)
    assert (T4.sm_count, T4.fp16_tensor_flops, T4.hbm_bandwidth, T4.tdp_watts) == (40, 65e12, 320e9, 70.0)
    assert (P100.fp16_flops, P100.fp16_tensor_flops, P100.hbm_bandwidth) == (18.7e12, None, 732e9)
    assert (P4.sm_count, P4.hbm_bandwidth, P4.l2_bytes, P4.tdp_watts) == (20, 192e9, 2 * 2**20, 75.0)
    # the FP32 peak is SMs x FP32 lanes (64 before Ampere's GA10x/Hopper, 128 on GP104, Ada,
    # Hopper) x 2 x boost clock
    lanes = {"P100": 64, "P4": 128, "V100": 64, "V100_PCIE": 64, "T4": 64, "TITAN_RTX": 64,
             "A100_40GB": 64, "A100_80GB": 64, "A100_PCIE_40GB": 64, "A100_PCIE_80GB": 64,
             "L4": 128, "H100": 128, "H100_PCIE": 128}
    for name, spec in GPU_PRESETS.items():
        assert spec.fp32_flops == pytest.approx(spec.sm_count * lanes[name] * 2 * spec.boost_clock_hz,
                                                rel=1.5e-2), name
        assert spec.sources and spec.name == name


def test_per_sm_limits_follow_the_compute_capability():
    # CUDA C++ Programming Guide, technical specifications per compute capability
    assert (V100.smem_per_sm_bytes, V100.max_warps_per_sm, V100.max_blocks_per_sm) == (96 * 1024, 64, 32)
    assert (T4.smem_per_sm_bytes, T4.max_warps_per_sm, T4.max_blocks_per_sm) == (64 * 1024, 32, 16)
    assert (A100_80GB.smem_per_sm_bytes, A100_80GB.max_warps_per_sm) == (164 * 1024, 64)
    assert (L4.smem_per_sm_bytes, L4.max_warps_per_sm, L4.max_blocks_per_sm) == (100 * 1024, 48, 24)
    assert (H100.smem_per_sm_bytes, H100.max_blocks_per_sm) == (228 * 1024, 32)
    assert (P100.smem_per_sm_bytes, P4.smem_per_sm_bytes) == (64 * 1024, 96 * 1024)
    assert all(g.registers_per_sm == 65536 for g in GPU_PRESETS.values())
    assert [g.arch for g in (P4, V100, T4, A100_40GB, L4, H100)] == list(specs.ARCHS)


def test_float16_without_tensor_cores_runs_on_cuda_cores():
    assert P100.peak_flops("float16") == 18.7e12
    assert P100._peak("float16", False) == (18.7e12, "FP16 CUDA-core", False)
    assert P4.peak_flops("float16") == pytest.approx(5.5e12 / 64)      # cc 6.1: 2 vs 128 per clk
    assert P100.peak_flops("float32") == 9.3e12
    with pytest.raises(ValueError, match="P100 has no TF32"):
        P100.peak_flops("float32", tf32=True)
    assert L4.peak_flops("float16") == 121e12 and L4.peak_flops("float32", tf32=True) == 60e12
    # a GPU without tensor cores and no FP16 figure: FP16 at the FP32 rate
    plain = P100.replace(fp16_flops=None)
    assert plain.peak_flops("float16") == 9.3e12 and plain.name == "P100*"


def test_get_gpu_accepts_pytorch_device_names():
    names = {"NVIDIA H100 80GB HBM3": H100, "NVIDIA L4": L4, "NVIDIA A100-PCIE-40GB": A100_PCIE_40GB,
             "NVIDIA A100 80GB PCIe": A100_PCIE_80GB, "NVIDIA A100-SXM4-40GB": A100_40GB,
             "Tesla V100-PCIE-32GB": V100_PCIE, "Tesla T4": T4, "Tesla P100-PCIE-16GB": P100,
             "Tesla P4": P4}
    for name, spec in names.items():
        assert get_gpu(name) is spec
        assert get_gpu(name.replace(" ", "_")) is spec
    assert get_gpu("A100") is A100_40GB and get_gpu("h100-pcie") is H100_PCIE
    with pytest.raises(ValueError, match=r"unknown GPU 'Tesla K80'"):
        get_gpu("Tesla K80")


def test_old_import_paths_still_work():
    assert model.GPUSpec is GPUSpec and model.get_gpu is get_gpu and model.A100_40GB is A100_40GB
    assert model.GPU_PRESETS is GPU_PRESETS and model.TITAN_RTX is TITAN_RTX
    # the positional constructor of before still builds a spec (new fields defaulted)
    g = GPUSpec("x", 108, 1.41e9, 19.5e12, None, 312e12, 1.5e12, 40 * 2**20, 40 * 2**30)
    assert (g.arch, g.form, g.pcie_bytes_per_s, g.fp16_flops) == ("ampere", "SXM", 32e9, None)


def test_describe_lists_the_new_fields():
    d = P100.describe()
    assert "P100 (pascal, PCIe)" in d and "FP16 tensor (dense)  n/a" in d
    assert "64 KiB shared, 65536 registers, 64 warps, 32 blocks" in d and "250 W" in d
    assert "NVLink / PCIe        450 GB/s / 64 GB/s" in H100.describe()


@pytest.mark.parametrize("change, match", [
    ({"arch": "kepler"}, r"arch must be one of .*'kepler'"),
    ({"form": "OAM"}, r"form must be one of .*'OAM'"),
    ({"tdp_watts": -5.0}, r"tdp_watts must be a positive finite number, got -5.0"),
    ({"fp16_tensor_flops": 0.0}, "fp16_tensor_flops must be a positive"),
    ({"max_warps_per_sm": 0}, r"max_warps_per_sm must be a positive int, got 0"),
    ({"pcie_bytes_per_s": None}, "pcie_bytes_per_s must be a positive"),
])
def test_bad_fields(change, match):
    with pytest.raises(ValueError, match=match):
        A100_40GB.replace(**change)
