"""The kernel-level GPU model: tiles in waves, memory kernels by size, stacks, the timeline.

Hand-computed cases take the calibration constants from the module (they are fitted) and
spell out every other factor.
"""
import dataclasses
import math

import numpy as np
import pytest

import ipukern as ik
from ipukern.conv import ConvParams
from ipukern.gpu import A100_40GB, H100, L4, T4, V100, get_stack
from ipukern.gpu.calibration import GEMM_CALIBRATION, LAUNCH_S, MEMORY_CALIBRATION, POWER_LIMITED_W
from ipukern.gpu.gemm import GemmProblem, Tile, gemm_seconds
from ipukern.gpu.kernels import conv_kernels, kernel_seconds
from ipukern.gpu.memory import MEMORY_KINDS, memory_seconds
from ipukern.gpu.network import play_launches

cal = GEMM_CALIBRATION


def _rate(gpu, peak, warps, reuse):
    clock = cal.clock_fraction(gpu.name, gpu.tdp_watts) * reuse / (reuse + cal.simt_reuse)
    return peak / gpu.sm_count * clock * cal.simt_efficiency * (1 - math.exp(-warps / cal.simt_warps))


def test_one_tile_by_hand():
    # 4096 x 4096 x 4096 fp32 on an A100 40 GB with only the 128x128 SIMT tile and no split:
    # 1024 tiles, 2 blocks/SM by registers (256 threads x 128 regs = 32768 of 65536)
    g = A100_40GB
    t = gemm_seconds(g, GemmProblem(4096, 4096, 4096, peak=g.fp32_flops, tensor=False))
    assert t.seconds > 0 and t.bound in ("compute", "memory") and t.tile.startswith("simt_")
    tile = Tile(128, 128, 8, 256, 128, 2, "simt")
    from ipukern.gpu.gemm import _candidate
    c = _candidate(g, GemmProblem(4096, 4096, 4096, peak=g.fp32_flops), tile, 1, cal)
    assert c.blocks_per_sm == 2 and c.tiles == 1024
    full, rest = divmod(1024, 108 * 2)                   # 4 full waves, then 160 tiles
    per_tile = 2 * 128 * 128 * (4096 + cal.k_overhead)
    wave = lambda blocks: per_tile * blocks / _rate(g, g.fp32_flops, blocks * 8, 64.0)  # noqa: E731
    assert c.compute_seconds == pytest.approx(full * wave(2) + wave(math.ceil(rest / 108)), rel=1e-12)
    assert c.waves == pytest.approx(1024 / 216)
    # A and B (64 MiB each) do not fit half the 40 MiB L2: streamed once per wave
    assert c.dram_bytes >= 3 * 4096 * 4096 * 4
    assert c.seconds == pytest.approx(max(c.compute_seconds, c.memory_seconds) + LAUNCH_S, rel=1e-12)
    assert t.seconds <= c.seconds                       # the heuristic's pick is no worse


def test_wave_quantisation_and_split_k():
    g = A100_40GB
    # one tile's worth of output but a long K: split-K fills the SMs
    t = gemm_seconds(g, GemmProblem(64, 64, 1 << 20, peak=g.fp32_flops, tensor=False))
    assert t.split_k > 1 and t.reduce_seconds > 0
    # one more tile than fills a wave costs a partial wave
    a = gemm_seconds(g, GemmProblem(128 * 108, 128, 4096, peak=g.fp32_flops, tensor=False))
    b = gemm_seconds(g, GemmProblem(128 * 108 + 1, 128, 4096, peak=g.fp32_flops, tensor=False))
    assert b.seconds > a.seconds


@pytest.mark.parametrize("gpu", [A100_40GB, V100, H100])
def test_tensor_cores_are_faster_and_below_peak(gpu):
    peak = gpu.fp16_tensor_flops
    t16 = gemm_seconds(gpu, GemmProblem(8192, 8192, 8192, elem=2, peak=peak, tensor=True))
    t32 = gemm_seconds(gpu, GemmProblem(8192, 8192, 8192, peak=gpu.fp32_flops, tensor=False))
    flops = 2 * 8192 ** 3
    assert t16.seconds < t32.seconds
    assert flops / t16.seconds <= cal.tensor_efficiency * peak
    assert flops / t16.seconds > 0.5 * cal.tensor_efficiency * peak      # a large GEMM is near it


def test_split_k_only_where_the_library_splits():
    # cuBLAS' FP32 SIMT GEMMs run one kernel over the whole K (NeuSight's traces), so a
    # linear launch never splits; cuDNN's weight gradient and tensor-core GEMMs may
    from ipukern.gpu.kernels import KernelCall
    g = A100_40GB
    long_k = dict(m=64, n=64, k=1 << 20)
    lin = kernel_seconds(KernelCall("gemm", "linear", **long_k), g, "float32")
    wgrad = kernel_seconds(KernelCall("gemm", "implicit GEMM wgrad", **long_k), g, "float32")
    tc = kernel_seconds(KernelCall("gemm", "linear", **long_k), g, "float16")
    assert "split-k 1," in lin.detail
    assert "split-k 1," not in wgrad.detail and wgrad.seconds < lin.seconds
    assert "split-k 1," not in tc.detail
    no_split = gemm_seconds(g, GemmProblem(64, 64, 1 << 20, peak=g.fp32_flops, split_k=False))
    assert no_split.split_k == 1 and no_split.seconds == pytest.approx(lin.seconds, rel=1e-12)
    with pytest.raises(TypeError, match="split_k must be a bool"):
        GemmProblem(4, 4, 4, peak=1e12, split_k=1)


def test_gemm_is_deterministic_and_cached():
    a = gemm_seconds(H100, GemmProblem(1000, 333, 77, batch=5, peak=H100.fp32_flops, tensor=False))
    b = gemm_seconds(H100, GemmProblem(1000, 333, 77, batch=5, peak=H100.fp32_flops, tensor=False))
    assert a == b


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_gemm_bad_sizes(bad):
    with pytest.raises(ValueError, match="GEMM m must be an int >= 1"):
        gemm_seconds(A100_40GB, GemmProblem(bad, 4, 4, peak=1e12, tensor=False))


def test_memory_kernel_by_hand():
    g = A100_40GB
    e = MEMORY_CALIBRATION.efficiency_of("elementwise")
    n = 400e6                                            # far above half the L2: DRAM-bound
    ramp = 1 - math.exp(-n / (MEMORY_CALIBRATION.bytes_per_sm * g.sm_count))
    t = memory_seconds(g, "elementwise", n)
    assert t.ceiling == "DRAM"
    assert t.seconds == pytest.approx(LAUNCH_S + n / (e * g.hbm_bandwidth * ramp), rel=1e-12)
    small = memory_seconds(g, "elementwise", 1e6)        # L2-resident, but far from the ramp's top
    assert small.ceiling == "L2" and small.bandwidth < e * g.l2_bandwidth
    assert memory_seconds(g, "norm", 0).seconds == LAUNCH_S


@pytest.mark.parametrize("kind,nbytes,match", [("fft", 10, "unknown memory-kernel class"),
                                               ("copy", -1, "finite number >= 0"),
                                               ("copy", float("nan"), "finite number >= 0")])
def test_memory_bad_input(kind, nbytes, match):
    with pytest.raises(ValueError, match=match):
        memory_seconds(A100_40GB, kind, nbytes)


def test_every_memory_class_has_an_efficiency():
    for kind in MEMORY_KINDS:
        assert 0 < MEMORY_CALIBRATION.efficiency_of(kind) <= 1


def test_conv_algorithms():
    dense = ConvParams(batch=32, in_channels=256, out_channels=256, in_h=28, in_w=28, kernel_h=3,
                       kernel_w=3, padding=1)
    # FP32 on CUDA cores: Winograd is a candidate (and wins this layer), four launches
    calls = conv_kernels(dense, "forward", A100_40GB, "float32")
    assert any("winograd" in c.label for c in calls)
    # FP16 runs on tensor cores as implicit GEMM only
    (call,) = conv_kernels(dense, "forward", A100_40GB, "float16")
    assert call.kind == "gemm" and (call.m, call.n, call.k) == (32 * 28 * 28, 256, 256 * 9)
    # grouped: the direct kernel on the curve, never at a higher rate than the dense conv
    grouped = dataclasses.replace(dense, groups=32)
    (d,) = conv_kernels(grouped, "forward", A100_40GB, "float16")
    assert d.kind == "direct_conv" and d.cpg == 8 and (d.m, d.n, d.k) == (call.m, call.n, call.k)
    p = kernel_seconds(d, A100_40GB, "float16")
    dense_t = gemm_seconds(A100_40GB, GemmProblem(d.m, d.n, d.k, elem=2, peak=312e12, tensor=True))
    assert p.compute_seconds >= dense_t.compute_seconds / 32 * (1 - 1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("gpu", ["A100_40GB", "V100", "H100"])
def test_grouped_rate_falls_with_cpg_up_to_tile_quantisation(gpu, dtype):
    # the tile model quantises N and K to tile edges, so a neighbouring cpg may be a little
    # faster (NVIDIA's "dimension quantization"); across a factor of 4 in cpg it always falls
    rates = []
    for g in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        p = ConvParams(batch=32, in_channels=256, out_channels=256, in_h=28, in_w=28, kernel_h=3, kernel_w=3,
                       padding=1, groups=g, dtype=dtype)
        rates.append(ik.gpu.estimate_conv(p, gpu).tflops)
    assert all(b <= a * 1.15 for a, b in zip(rates, rates[1:])), rates
    assert all(c < a for a, c in zip(rates, rates[2:])), rates
    assert rates[-1] < rates[0] / 5


def test_estimate_conv_explains_the_kernel_choice():
    p = ConvParams(batch=32, in_channels=256, out_channels=256, in_h=28, in_w=28, kernel_h=3, kernel_w=3,
                   padding=1, dtype="float16")
    e = ik.gpu.estimate_conv(p, "A100_40GB")
    assert e.algorithm.startswith("implicit GEMM (tensor_") and "implicit GEMM" in e.explain()
    assert e.seconds == pytest.approx(kernel_seconds(conv_kernels(p, "forward", A100_40GB, "float16")[0],
                                                     A100_40GB, "float16").seconds, rel=1e-12)
    assert ik.gpu.estimate_conv_curve(p, "A100_40GB").algorithm == ""
    with pytest.raises(ValueError, match="no TF32"):
        ik.gpu.estimate_conv(dataclasses.replace(p, dtype="float32"), "V100", tf32=True)
    m = ik.gpu.estimate_matmul(1024, 1024, 1024, dtype="float16")
    assert m.algorithm.startswith("GEMM (tensor_")


def test_play_launches_by_hand():
    t = np.array([1.0, 1.0, 5.0, 1.0])
    # host issues every 2 s: kernel 0 ends 1, 1 starts at 2 ends 3, 2 starts 4 ends 9, 3 at 9 ends 10
    ends, waited = play_launches(t, 2.0, 0.0, 0.0)
    assert ends.tolist() == [1.0, 3.0, 9.0, 10.0] and waited == 2
    ends, waited = play_launches(t, 0.0, 0.0, 3.0)       # no host cost, GPU busy until 3
    assert ends.tolist() == [4.0, 5.0, 10.0, 11.0] and waited == 0


def test_stacks():
    eager, graphs, mlperf = (get_stack(s) for s in ("pytorch-eager", "cuda-graphs", "mlperf"))
    assert eager.host_per_op_s > 0 == graphs.host_per_op_s == mlperf.host_per_op_s
    assert not eager.fusions and mlperf.layout == "NHWC" and mlperf.fuses("attention")
    assert get_stack(" MLPerf ") is mlperf and get_stack(eager) is eager
    with pytest.raises(ValueError, match="unknown GPU software stack"):
        get_stack("xla")
    with pytest.raises(ValueError, match="unknown fusions"):
        ik.gpu.SoftwareStack("x", "", 0.0, fusions=frozenset({"everything"}))


def test_fusion_removes_passes_and_unpadding_only_touches_token_models():
    from ipukern.gpu.lowering import lower_network
    net = ik.models.resnet50()
    eager = lower_network(net, 8, A100_40GB, get_stack("pytorch-eager"), "float16", training=True)
    fused = lower_network(net, 8, A100_40GB, get_stack("mlperf"), "float16", training=True)
    n = lambda lk: sum(len(x.forward) + len(x.backward) for x in lk)  # noqa: E731
    assert n(fused) < n(eager)
    conv_m = lambda lk: next(c.m for x in lk for c in x.forward if c.kind == "gemm")  # noqa: E731
    assert conv_m(fused) == conv_m(eager) == 8 * 112 * 112     # no unpadding of images
    bert = ik.models.bert_base(seq_len=128) if hasattr(ik.models, "bert_base") else None
    if bert is not None:
        rows = lambda lk: next(c.m for x in lk if x.op == "linear" for c in x.forward)  # noqa: E731
        e = lower_network(bert, 8, A100_40GB, get_stack("pytorch-eager"), "float16", training=False)
        f = lower_network(bert, 8, A100_40GB, get_stack("mlperf"), "float16", training=False)
        assert rows(f) == math.ceil(rows(e) * get_stack("mlperf").token_fraction)


def test_network_estimate_is_deterministic():
    net = ik.models.resnet50()
    a = ik.gpu.estimate_network_gpu(net, 32, "DGX_A100", training=True)
    b = ik.gpu.estimate_network_gpu(net, 32, "DGX_A100", training=True)
    assert a == b


def test_training_a_token_model_adds_residual_dropout_by_stack():
    from ipukern.gpu.lowering import lower_network
    bert = ik.models.bert_base(seq_len=128)
    labels = lambda st, training: [c.label for x in lower_network(  # noqa: E731
        bert, 2, A100_40GB, get_stack(st), "float16", training=training) for c in x.forward]
    eager, fused = labels("pytorch-eager", True), labels("mlperf", True)
    n_res = sum(1 for n, layer in bert.layers if layer.op == "add")     # 2 per encoder layer
    assert eager.count("dropout") == fused.count("dropout + add") == n_res
    assert "dropout" not in fused and "dropout + add" not in eager
    assert not any("dropout" in s for s in labels("pytorch-eager", False))   # inference: none
    # the resnet (no embedding) is untouched: no dropout in training
    res = lower_network(ik.models.resnet8(), 2, A100_40GB, get_stack("pytorch-eager"), "float16",
                        training=True)
    assert not any("dropout" in c.label for x in res for c in x.forward + x.backward)


def test_distributed_lamb_is_sharded_and_after_the_backward_pass():
    net = ik.models.bert_base(seq_len=128)
    mlperf = get_stack("mlperf")
    assert mlperf.distributes("lamb") and not mlperf.distributes("lars")
    ddp = mlperf.replace(distributed_optimizers=frozenset())
    a = ik.gpu.estimate_network_gpu(net, 8, "DGX_A100", training=True, optimizer="lamb", stack=mlperf)
    b = ik.gpu.estimate_network_gpu(net, 8, "DGX_A100", training=True, optimizer="lamb", stack=ddp)
    assert a.exposed_all_reduce_seconds == pytest.approx(a.all_reduce_seconds)   # nothing hidden
    assert b.exposed_all_reduce_seconds < b.all_reduce_seconds
    assert a.optimizer_seconds < b.optimizer_seconds / 4           # 1/8 of the update per GPU
    with pytest.raises(ValueError, match="distributed_optimizers"):
        mlperf.replace(distributed_optimizers=frozenset({"adagrad"}))


def test_grouped_conv_backward_has_its_own_structure():
    from ipukern.gpu.kernels import GROUPED_WGRAD_TO_FORWARD
    # a channel multiplier of 4 (Cout/g = 4, Cin/g = 1): dgrad reduces over Cout/g
    p = ConvParams(batch=8, in_channels=32, out_channels=128, in_h=28, in_w=28, kernel_h=3,
                   kernel_w=3, padding=(1, 1), groups=32, dtype="float16")
    fwd, dgrad, wgrad = (conv_kernels(p, ph, A100_40GB, "float16") for ph in ("forward", "dgrad", "wgrad"))
    assert fwd[0].cpg == 1 and dgrad[0].cpg == 4 and wgrad[0].cpg == 1
    assert dgrad[0].m == 8 * 28 * 28 and dgrad[0].n == 32 and dgrad[0].k == 128 * 9
    t = lambda calls: sum(kernel_seconds(c, A100_40GB, "float16").seconds for c in calls)  # noqa: E731
    launch = kernel_seconds(ik.gpu.kernels.KernelCall("copy", nbytes=0), A100_40GB, "float16").seconds
    assert t(wgrad) - launch == pytest.approx(GROUPED_WGRAD_TO_FORWARD * (t(fwd) - launch), rel=1e-6)
    assert t(dgrad) != pytest.approx(t(fwd))        # read off the curve at its own width


def test_attention_fusion_takes_only_attention_matmuls():
    """Under the mlperf stack's attention fusion, BERT's scores product is the fused kernel
    and its context product launches nothing; a matmul of two activations outside an
    attention pattern (the HMC step's X theta and X^T r) stays a batched GEMM."""
    from ipukern.gpu import estimate_network_gpu
    bert = estimate_network_gpu(ik.models.bert_base(), 2, "DGX_A100", n_gpus=1, stack="mlperf")
    why = {row["name"]: row["why"] for row in bert.layers if row["op"] == "matmul"}
    assert set(why.values()) == {"fused attention", "no kernel (view or fused)"}
    hmc = estimate_network_gpu(ik.models.hmc_logistic(200, 25, 2, 8), 1, "DGX_A100", n_gpus=1, stack="mlperf")
    rows = [row for row in hmc.layers if row["op"] == "matmul"]
    assert len(rows) == 12 and all(row["why"] == "batched matmul" for row in rows)


def test_power_limited_clock_rule():
    # a training board keeps its own fitted fraction; a held-out board of 75 W or less (the
    # 72 W L4, never fitted) takes the geometric mean of the fitted ones; others run at boost
    fitted = dict(cal.sustained_clock)
    assert set(fitted) == {"T4", "P4"}
    assert cal.clock_fraction("T4", T4.tdp_watts) == fitted["T4"]
    geo = math.sqrt(fitted["T4"] * fitted["P4"])
    assert cal.clock_fraction("L4", L4.tdp_watts) == pytest.approx(geo, rel=1e-12)
    assert cal.clock_fraction("A100_40GB", A100_40GB.tdp_watts) == 1.0
    assert cal.clock_fraction("L4") == 1.0                       # no TDP known: boost clock
    assert cal.clock_fraction("X", POWER_LIMITED_W + 1) == 1.0
    # and the SIMT GEMM rate follows it: a compute-bound L4 GEMM slows by about that fraction
    pr = GemmProblem(8192, 8192, 4096, peak=L4.fp32_flops, tensor=False, split_k=False)
    boost = gemm_seconds(L4, pr, calibration=dataclasses.replace(cal, sustained_clock=()))
    held = gemm_seconds(L4, pr)
    assert held.bound == "compute"
    assert held.compute_seconds == pytest.approx(boost.compute_seconds / geo, rel=1e-9)
