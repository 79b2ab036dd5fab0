"""Tests for the grouped-conv scaling sweep (ipukern/scaling.py).

Small sweeps only (estimate mode; a point costs tens of milliseconds). The module-scoped
``resnext`` fixture runs the default ResNeXt layer once for the trend tests.
"""
import csv
import io
import json

import pytest

import ipukern as ik
from ipukern.gpu import estimate_conv
from ipukern.conv import ConvParams
from ipukern.scaling import (DEFAULT_LAYERS, ConvLayer, SweepResult, SweepRow, format_table,
                             get_layer, grouped_conv_sweep, read_csv, to_csv, to_json,
                             with_exchange_bandwidth)

SMALL = ConvLayer("small", channels=32, height=14, width=14, kernel=3)


@pytest.fixture(scope="module")
def resnext():
    return grouped_conv_sweep("resnext50_c128", channels_per_group=(1, 2, 4, 8, 16, 32, 64, "dense"),
                              batch=(1, 32))


@pytest.fixture(scope="module")
def small():
    return grouped_conv_sweep(SMALL, channels_per_group=(1, 3, 4, "dense"), batch=(2,),
                              machines=("GC200",), gpus=("A100_40GB", "V100"))


# ----------------------------------------------------------------------------- layers
def test_default_layers_cover_the_issue():
    names = [layer.name for layer in DEFAULT_LAYERS]
    assert names[0] == "resnext50_c128"                      # the README's default layer
    by = {layer.name: layer for layer in DEFAULT_LAYERS}
    assert (by["resnext50_c128"].channels, by["resnext50_c128"].height) == (128, 56)
    assert (by["resnext50_c256"].channels, by["resnext50_c256"].height) == (256, 28)
    assert {by["effnet_b0_dw3"].kernel, by["effnet_b0_dw5"].kernel} == {3, 5}
    assert by["effnet_b0_dw5"].padding == 2 and by["mobilenet_v1_dw_s2"].stride == 2
    assert get_layer("RESNEXT50_C128") is DEFAULT_LAYERS[0]
    with pytest.raises(ValueError, match="unknown layer 'nope'.*resnext50_c128"):
        get_layer("nope")


def test_conv_layer_defaults_and_params():
    layer = ConvLayer("x", channels=64, height=10, width=12, kernel=5, stride=2, batch=3)
    assert (layer.padding, layer.out_channels) == (2, 64)
    p = layer.params(4, dtype="half", partials="float")
    assert p == ConvParams(batch=3, in_channels=64, out_channels=64, in_h=10, in_w=12,
                           kernel_h=5, kernel_w=5, stride=2, padding=2, groups=16,
                           dtype="float16", partials="float32")
    assert layer.params(4, batch=7).batch == 7
    assert layer.groups_for(3) is None and layer.groups_for(64) == 1
    # groups must divide the output channels too
    assert ConvLayer("y", channels=8, out_channels=12, height=4, width=4).groups_for(1) is None
    with pytest.raises(ValueError, match="3 channels per group does not divide 64"):
        layer.params(3)


def test_conv_layer_rejects_impossible_shapes():
    with pytest.raises(ValueError, match="channels must be >= 1"):
        ConvLayer("bad", channels=0, height=4, width=4)
    with pytest.raises(TypeError, match="kernel must be an int"):
        ConvLayer("bad", channels=4, height=4, width=4, kernel=3.0)
    with pytest.raises(ValueError):                       # kernel larger than padded input
        ConvLayer("bad", channels=4, height=2, width=2, kernel=7, padding=0)


# ----------------------------------------------------------------------------- rows
def test_row_contents(small):
    assert isinstance(small, SweepResult) and all(isinstance(r, SweepRow) for r in small)
    # cpg 3 does not divide 32: skipped, and said so
    assert small.skipped == [{"layer": "small", "channels_per_group": 3,
                              "reason": "3 does not divide 32 input channels"}]
    assert [r.channels_per_group for r in small.ipu()] == [1, 4, 32]
    assert [r.device for r in small[:3]] == ["GC200", "A100_40GB", "V100"]
    for r in small:
        assert r.groups * r.channels_per_group == r.in_channels == 32
        assert r.dense == (r.groups == 1)
        p = SMALL.params(r.channels_per_group, batch=2)
        assert r.macs == 2 * 32 * 14 * 14 * r.channels_per_group * 9 == p.macs   # conventional
        assert r.flops == 2 * r.macs
        assert r.tflops == pytest.approx(r.flops / r.seconds / 1e12)
        assert r.utilisation == pytest.approx(r.tflops / r.peak_tflops)
        d = r.to_dict()
        assert "ratios" not in d and d["ipu_gpu_ratio"] == r.ipu_gpu_ratio
    for r in small.ipu():
        assert r.kind == "ipu" and r.gpu_bound is None
        assert r.cycles > 0 and r.seconds == pytest.approx(r.cycles / 1.325e9)
        assert r.method.split()[0] == r.vertex_method in ("AMP", "SLIC", "VMAC", "HMAC")
        assert 0 < r.tiles_used <= 1472 and r.serial_splits >= 1
        assert 48 * 1024 < r.max_bytes_per_tile <= r.tile_bytes == 638_976
        assert 0 <= r.exchange_share < 1 and r.exchange_tbps == pytest.approx(47.5)
        assert r.peak_tflops == pytest.approx(ik.GC200.peak_flops("float16", "float32") / 1e12)
        # the row is what estimate_conv2d reports for the same layer
        p = SMALL.params(r.channels_per_group, batch=2)
        prof = ik.estimate_conv2d(p.input_shape, p.weight_shape, padding=1, groups=p.groups)
        assert r.cycles == prof.total_cycles and r.method == prof.info["method"]
        assert r.max_bytes_per_tile == prof.memory.max_bytes
    for r in small.gpu():
        assert r.kind == "gpu" and r.cycles is None and r.method is None
        est = estimate_conv(SMALL.params(r.channels_per_group, batch=2), r.device)
        assert (r.seconds, r.gpu_bound, r.gpu_curve) == (est.seconds, est.bound, "cudnn")


def test_ratios_are_ipu_over_gpu(small):
    by = {(r.channels_per_group, r.device): r for r in small}
    for cpg in (1, 4, 32):
        ipu = by[cpg, "GC200"]
        for g in ("A100_40GB", "V100"):
            want = ipu.tflops / by[cpg, g].tflops
            assert ipu.ratios[g] == pytest.approx(want)
            assert by[cpg, g].ratios == {"GC200": pytest.approx(want)}
        assert ipu.ipu_gpu_ratio == ipu.ratios["A100_40GB"]   # first GPU
    assert small.ratio("small", 2, "dense") == by[32, "GC200"].ipu_gpu_ratio
    assert small.ratio("small", 2, 4, gpu="V100") == by[4, "GC200"].ratios["V100"]
    with pytest.raises(KeyError, match="no IPU row"):
        small.ratio("small", 5, 4)


def test_gpu_row_by_hand():
    # batch 2, 32 -> 32 channels, 14x14, 3x3, depthwise fp16 on the A100: the kernel model's
    # direct grouped kernel on the cudnn curve (cpg-1 point e_c = 0.062, e_m = 0.34), never at
    # a higher rate than the dense conv of the same channels, plus the 1 us launch
    from ipukern.gpu import A100_40GB
    from ipukern.gpu.gemm import GemmProblem, gemm_seconds
    rows = grouped_conv_sweep(SMALL, channels_per_group=(1,), batch=2, machines=())
    (r,) = rows
    nbytes = (2 * 32 * 14 * 14 * 2) * 2 + 32 * 9 * 2          # in + out + weights, fp16
    m, n, k = 2 * 14 * 14, 32, 32 * 9
    dense = gemm_seconds(A100_40GB, GemmProblem(m, n, k, elem=2, peak=312e12, tensor=True))
    t_c = max(r.flops / (0.062 * 312e12), dense.compute_seconds * r.flops / (2 * m * n * k))
    t = max(t_c, nbytes / (0.34 * 1.555e12)) + 1e-6
    assert r.seconds == pytest.approx(t, rel=1e-12)
    assert r.gpu_bound == ("compute" if t_c >= nbytes / (0.34 * 1.555e12) else "memory")
    assert r.ratios == {} and r.ipu_gpu_ratio is None


# ----------------------------------------------------------------------------- trends
def _curve(rows, batch, device="GC200", field="tflops"):
    pts = sorted((r.channels_per_group, getattr(r, field)) for r in rows
                 if r.batch == batch and r.device == device)
    return [v for _, v in pts]


@pytest.mark.parametrize("batch", [1, 32])
def test_ipu_rate_falls_as_cpg_shrinks(resnext, batch):
    ipu = _curve(resnext, batch)
    # strictly up to cpg 64; the dense layer at batch 32 is planned under PopLibs' 0.6
    # temporary-memory bound (availableMemoryProportion), which costs it ~2% against the
    # unbounded plan and leaves it level with cpg 64, not above it
    assert all(a < b for a, b in zip(ipu[:-1], ipu[1:-1])), ipu
    assert ipu[-1] >= 0.95 * ipu[-2], ipu
    gpu = _curve(resnext, batch, "A100_40GB")
    assert all(a <= b for a, b in zip(gpu, gpu[1:])), gpu


@pytest.mark.parametrize("batch", [1, 32])
def test_ratio_grows_as_cpg_shrinks_on_the_default_layer(resnext, batch):
    # cpg: 1, 2, 4, 8, 16, 32, 64, 128 (dense)
    ratio = _curve(resnext, batch, field="ipu_gpu_ratio")
    # from 64 down to 4 channels per group the IPU's advantage grows at every step (dense and
    # cpg 64 tie within 2% at batch 1: the dense GEMM fills under one wave there)...
    down_to_4 = ratio[2:7][::-1]
    assert all(a < b for a, b in zip(down_to_4, down_to_4[1:])), ratio
    assert ratio[-1] < ratio[2]
    assert ratio[-1] < 1 < ratio[2]                    # the GPU wins dense, the IPU at cpg 4
    # ...and below 4 it stays above the cpg-16 and dense values. It does not keep growing:
    # the IPU's SLIC vertex takes the same time at cpg 1, 2 and 4, while the GPU model's
    # depthwise point (cpg 1) is faster than its cpg-2..4 points (see README).
    assert min(ratio[:2]) > ratio[4] > ratio[-1]


def test_method_switches_from_amp_to_slic(resnext):
    methods = {r.channels_per_group: r.vertex_method for r in resnext.ipu() if r.batch == 32}
    assert methods[128] == methods[16] == "AMP"
    assert methods[4] == methods[2] == methods[1] == "SLIC"


# ----------------------------------------------------------------------------- options
def test_exchange_bandwidth_variant_is_named_and_slower():
    slow = with_exchange_bandwidth(ik.GC200, 8e12)
    assert slow.name == "GC200-xch8TB" and slow.exchange_bandwidth == pytest.approx(8e12)
    assert with_exchange_bandwidth("GC200", 47.5e12) is ik.GC200
    rows = grouped_conv_sweep(SMALL, channels_per_group=("dense",), batch=1,
                              machines=(ik.GC200, slow), gpus=())
    fast, slow_row = rows
    assert (fast.device, slow_row.device) == ("GC200", "GC200-xch8TB")
    assert slow_row.exchange_tbps == pytest.approx(8.0)
    assert slow_row.cycles >= fast.cycles
    with pytest.raises(ValueError, match="positive"):
        with_exchange_bandwidth(ik.GC200, 0)


def test_layer_batch_none_uses_the_layers_batch():
    layer = ConvLayer("b3", channels=8, height=8, width=8, batch=3)
    rows = grouped_conv_sweep(layer, channels_per_group=(8,), batch=None, gpus=())
    assert [r.batch for r in rows] == [3]


def test_sweep_argument_errors():
    with pytest.raises(ValueError, match="unique"):
        grouped_conv_sweep(SMALL, machines=(ik.GC200, ik.GC200), batch=1)
    with pytest.raises(ValueError, match="unknown machine"):
        grouped_conv_sweep(SMALL, machines=("GC9000",), batch=1)
    with pytest.raises(ValueError, match="ints or 'dense'"):
        grouped_conv_sweep(SMALL, channels_per_group=("sparse",), batch=1)
    with pytest.raises(ValueError, match="batch sizes"):
        grouped_conv_sweep(SMALL, batch=0)
    with pytest.raises(ValueError, match="no devices"):
        grouped_conv_sweep(SMALL, machines=(), gpus=(), batch=1)
    with pytest.raises(TypeError, match="ConvLayer"):
        grouped_conv_sweep([42], batch=1)


def test_progress_callback():
    seen = []
    grouped_conv_sweep(SMALL, channels_per_group=(4, 8), batch=(1,), gpus=(),
                       progress=lambda d, t, what: seen.append((d, t, what)))
    assert seen == [(1, 2, "small N1 cpg 4"), (2, 2, "small N1 cpg 8")]


# ----------------------------------------------------------------------------- outputs
def test_csv_json_round_trip(small, tmp_path):
    text = to_csv(small, tmp_path / "s.csv")
    back = read_csv(tmp_path / "s.csv")
    assert text == (tmp_path / "s.csv").read_text()
    assert len(back) == len(small)
    header = next(csv.reader(io.StringIO(text)))
    assert header[-3:] == ["ratio_vs_A100_40GB", "ratio_vs_V100", "ratio_vs_GC200"]
    for rec, row in zip(back, small):
        assert rec["device"] == row.device and rec["channels_per_group"] == row.channels_per_group
        assert rec["dense"] is row.dense
        assert rec["tflops"] == pytest.approx(row.tflops, rel=1e-12)
        assert rec["cycles"] == row.cycles                    # None on GPU rows
    doc = json.loads(to_json(small, tmp_path / "s.json"))
    assert json.loads((tmp_path / "s.json").read_text()) == doc
    assert doc["skipped"] == small.skipped
    assert doc["meta"]["dtype"] == "float16" and doc["meta"]["gpu_curve"] == "cudnn"
    assert [m["name"] for m in doc["meta"]["machines"]] == ["GC200"]
    assert doc["rows"] == json.loads(json.dumps(small.to_dicts()))


def test_short_method_labels():
    from ipukern.scaling import _short_method
    assert _short_method("AMP 8u 16x8 half->float") == "AMP 8u 16x8"
    assert _short_method("AMP 8u 8x8 float->float F8") == "AMP 8u 8x8 F8"
    assert _short_method(None) == "-"


def test_format_table_one_line_per_point(small):
    text = format_table(small)
    lines = text.splitlines()
    header = lines[0]
    for col in ("layer", "cpg", "groups", "GC200 TF/s", "A100_40GB TF/s", "V100 TF/s",
                "GC200/A100_40GB", "GC200/V100", "method"):
        assert col in header
    body = [line for line in lines[2:] if line.startswith("small")]
    assert len(body) == 3                                  # cpg 1, 4, 32 (dense)
    assert body[-1].split()[2] == "32*"
    r = small.ipu()[0]
    assert f"{r.ratios['A100_40GB']:.2f}x" in body[0]
    widths = {len(line) for line in lines[:2]}
    assert len(widths) <= 2                                 # aligned header and rule
    assert "IPU/GPU = IPU TFLOP/s / GPU TFLOP/s" in text


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_sweep_on_an_executor_equals_serial(kind, small):
    import concurrent.futures as cf
    pool = cf.ThreadPoolExecutor(2) if kind == "thread" else cf.ProcessPoolExecutor(2)
    seen = []
    with pool:
        res = grouped_conv_sweep(SMALL, channels_per_group=(1, 3, 4, "dense"), batch=(2,),
                                 machines=("GC200",), gpus=("A100_40GB", "V100"), executor=pool,
                                 progress=lambda i, n, label: seen.append((i, n)))
    assert res.to_dicts() == small.to_dicts() and res.skipped == small.skipped
    assert seen == [(i + 1, len(seen)) for i in range(len(seen))]
    with pytest.raises(TypeError, match="Executor"):
        grouped_conv_sweep(SMALL, channels_per_group=(4,), batch=(2,), executor=4)
