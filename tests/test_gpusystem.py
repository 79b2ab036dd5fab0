"""GPU systems: a network on N GPUs, NVSwitch all-reduce, hand-computed composition."""
import dataclasses

import pytest

import ipukern as ik
from ipukern.gpu import estimate_conv, estimate_matmul

gpu = ik.gpu


def tiny():
    net = ik.Network("tiny")
    x = net.input("x", (3, 32, 32))
    y = net.add(ik.nn.Conv2d(3, 64, 3, padding=1), x, name="c1")
    y = net.add(ik.nn.ReLU(), y, name="r")
    y = net.add(ik.nn.GlobalAvgPool(), y, name="gap")
    y = net.add(ik.nn.Flatten(), y, name="fl")
    y = net.add(ik.nn.Linear(64, 10), y, name="fc")
    net.output(y)
    return net


def test_dgx_a100_preset_and_all_reduce_formula():
    d = gpu.DGX_A100
    assert d.n_gpus == 8 and d.gpu is gpu.A100_40GB and d.link_bytes_per_second == 300e9
    assert d.peak_flops("float16") == pytest.approx(8 * 312e12)
    # ring over the switch: 2 (N-1)/N x bytes / rate + 2 (N-1) x step latency
    assert gpu.gpu_all_reduce_seconds(d, 100e6) == pytest.approx(2 * 7 / 8 * 100e6 / 300e9 + 14 * 5e-6)
    assert gpu.gpu_all_reduce_seconds(d, 100e6, 1) == 0.0


def test_network_forward_is_the_sum_of_per_layer_estimates():
    net, b = tiny(), 256
    e = gpu.estimate_network_gpu(net, b, "DGX_A100", dtype="float16")
    conv = estimate_conv(dataclasses.replace(
        ik.ConvParams.from_shapes((b, 3, 32, 32), (64, 3, 3, 3), padding=1), dtype="float16")).seconds
    fc = estimate_matmul(b, 64, 10, 1, "float16").seconds
    relu = max(2 * b * 64 * 32 * 32 * 2 / (0.8 * 1.555e12), 10e-6)
    gap = max((b * 64 * 32 * 32 + b * 64) * 2 / (0.8 * 1.555e12), 10e-6)
    assert [r["name"] for r in e.layers] == ["c1", "r", "gap", "fl", "fc"]
    assert e.forward_seconds == pytest.approx(conv + relu + gap + fc)
    assert e.step_seconds == e.forward_seconds
    assert e.samples_per_second == pytest.approx(8 * b / e.step_seconds)


def test_training_step_composition():
    net, b = tiny(), 256
    e = gpu.estimate_network_gpu(net, b, "DGX_A100", training=True, overlap=False)
    n_params = 64 * 3 * 9 + 64 * 10 + 10
    assert e.n_params == n_params
    assert e.backward_seconds == pytest.approx(2 * e.forward_seconds)
    assert e.optimizer_seconds == pytest.approx(20 * n_params / (0.8 * 1.555e12))
    assert e.all_reduce_seconds == pytest.approx(gpu.gpu_all_reduce_seconds(gpu.DGX_A100, 2 * n_params))
    assert e.step_seconds == pytest.approx(e.forward_seconds + e.backward_seconds + e.optimizer_seconds
                                           + e.all_reduce_seconds)
    ov = gpu.estimate_network_gpu(net, b, "DGX_A100", training=True)
    assert ov.step_seconds <= e.step_seconds
    # LARS: momentum's 5 fp32 words plus the norms' second read of w and g
    lars = gpu.estimate_network_gpu(net, b, "DGX_A100", training=True, overlap=False, optimizer="lars")
    assert lars.optimizer_seconds == pytest.approx(28 * n_params / (0.8 * 1.555e12))
    assert lars.step_seconds - e.step_seconds == pytest.approx(8 * n_params / (0.8 * 1.555e12))
    assert e.time_to_train(epochs=2, dataset_size=1000) == pytest.approx(2000 / e.samples_per_second)


def test_bad_input():
    with pytest.raises(ValueError, match="cannot use 9"):
        gpu.estimate_network_gpu(tiny(), 8, "DGX_A100", n_gpus=9)
    with pytest.raises(ValueError, match="batch"):
        gpu.estimate_network_gpu(tiny(), 0)
    with pytest.raises(ValueError, match="unknown GPU system"):
        gpu.estimate_network_gpu(tiny(), 8, "DGX_H100")
    with pytest.raises(TypeError, match="Network"):
        gpu.estimate_network_gpu("resnet50", 8)
    with pytest.raises(ValueError, match="samples"):
        gpu.estimate_network_gpu(tiny(), 8).time_to_train(epochs=1)
    with pytest.raises(ValueError, match="n_gpus"):
        gpu.GPUSystem("x", "A100_40GB", 0, 1e9)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        gpu.estimate_network_gpu(tiny(), 8, training=True, optimizer="rmsprop")


def test_resnet50_training_on_dgx_a100_runs():
    models = pytest.importorskip("ipukern.nn.models")
    e = gpu.estimate_network_gpu(models.resnet50(), 256, "DGX_A100", training=True)
    assert e.n_params > 25_000_000 and len(e.layers) > 100
    assert e.all_reduce_seconds == pytest.approx(gpu.gpu_all_reduce_seconds(gpu.DGX_A100, 2 * e.n_params))
    assert 0 < e.samples_per_second < 8 * 312e12 / (3 * 2 * 4.1e9)   # below the FP16 peak bound


def test_one_optimizer_traffic_table():
    """The IPU and GPU system models stream the words the executed update vertices move."""
    from ipukern.gpu import system as gpu_system
    from ipukern.ops import optim
    from ipukern.systems import training
    assert training.OPTIMIZER_WORDS is optim.OPTIMIZER_WORDS is gpu_system.OPTIMIZER_WORDS
    assert set(optim.OPTIMIZER_WORDS) == set(optim.OPTIMIZERS) == set(optim.OPTIMIZER_STATE_WORDS)
    # w, g -> w; each state slot read and written; LAMB's apply pass re-reads w and the update
    # and writes w; LARS' norm pass re-reads w and g
    assert optim.OPTIMIZER_WORDS == {"sgd": 3, "sgd_momentum": 5, "adam": 7, "lamb": 10, "lars": 7}
    for name, words in optim.OPTIMIZER_WORDS.items():
        assert words >= 3 + 2 * optim.OPTIMIZER_STATE_WORDS[name]
