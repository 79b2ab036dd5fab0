"""GPU systems: a network on N GPUs, NVSwitch all-reduce, hand-computed composition."""
import dataclasses

import pytest

import ipukern as ik

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
    d = gpu.DGX_A100_40GB
    assert d.n_gpus == 8 and d.gpu is gpu.A100_40GB and d.link_bytes_per_second == 300e9
    assert gpu.DGX_A100.gpu is gpu.A100_80GB               # MLPerf's DGX A100 ran 80 GB parts
    assert d.peak_flops("float16") == pytest.approx(8 * 312e12)
    # NCCL's Simple ring (100 MB picks it): 2 (N-1)/N x bytes / (12 NVLinks x 20 GB/s NCCL counts)
    # + base 8.4 us + 2 (N-1) x 3.4 us per NVLink hop (tests/gpu/test_comm.py has the derivation)
    assert gpu.gpu_all_reduce_seconds(d, 100e6) == pytest.approx(
        2 * 7 / 8 * 100e6 / 240e9 + 8.4e-6 + 14 * 3.4e-6)
    assert gpu.gpu_all_reduce_seconds(d, 100e6, 1) == 0.0


def _kernels(net, b, stack, dtype="float16", training=False):
    from ipukern.gpu.kernels import kernel_seconds
    from ipukern.gpu.lowering import lower_network
    from ipukern.gpu.stacks import get_stack
    lk = lower_network(net, b, gpu.A100_40GB, get_stack(stack), dtype, training=training)
    price = lambda calls: sum(kernel_seconds(c, gpu.A100_40GB, dtype).seconds for c in calls)  # noqa: E731
    return lk, price


def test_network_forward_is_the_sum_of_its_kernels_without_host_cost():
    from ipukern.gpu.kernels import KernelCall, conv_kernels, kernel_seconds
    from ipukern.gpu.memory import memory_seconds
    net, b = tiny(), 256
    e = gpu.estimate_network_gpu(net, b, "DGX_A100_40GB", dtype="float16", stack="cuda-graphs")
    a100 = gpu.A100_40GB
    p = dataclasses.replace(ik.ConvParams.from_shapes((b, 3, 32, 32), (64, 3, 3, 3), padding=1),
                            dtype="float16")
    conv = sum(kernel_seconds(c, a100, "float16").seconds
               for c in conv_kernels(p, "forward", a100, "float16"))
    # cuDNN's tensor-core convs are NHWC: an NCHW stack transposes input and output
    conv += memory_seconds(a100, "copy", 2 * b * 3 * 32 * 32 * 2).seconds
    conv += memory_seconds(a100, "copy", 2 * b * 64 * 32 * 32 * 2).seconds
    relu = memory_seconds(a100, "elementwise", 2 * b * 64 * 32 * 32 * 2).seconds
    gap = memory_seconds(a100, "pool", (b * 64 * 32 * 32 + b * 64) * 2).seconds
    fc = kernel_seconds(KernelCall("gemm", m=b, n=10, k=64), a100, "float16").seconds
    assert [r["name"] for r in e.layers] == ["c1", "r", "gap", "fl", "fc"]
    assert e.forward_seconds == pytest.approx(conv + relu + gap + fc, rel=1e-12)
    assert e.step_seconds == e.forward_seconds and e.stack == "cuda-graphs"
    assert e.samples_per_second == pytest.approx(8 * b / e.step_seconds)


def test_eager_small_batch_is_host_bound():
    net = tiny()
    lk, price = _kernels(net, 1, "pytorch-eager")
    calls = [c for layer in lk for c in layer.forward]
    host = gpu.get_stack("pytorch-eager").host_per_op_s
    assert all(price([c]) < host for c in calls)
    e = gpu.estimate_network_gpu(net, 1, "DGX_A100_40GB", stack="pytorch-eager")
    # every kernel waits for its launch: the last one starts at (n-1) x host
    assert e.forward_seconds == pytest.approx((len(calls) - 1) * host + price(calls[-1:]), rel=1e-12)
    assert e.host_bound_fraction == pytest.approx(1.0 - 1 / len(calls))
    graphs = gpu.estimate_network_gpu(net, 1, "DGX_A100_40GB", stack="cuda-graphs")
    assert graphs.forward_seconds == pytest.approx(price(calls), rel=1e-12)


def test_training_step_composition():
    from ipukern.gpu.memory import memory_seconds
    net, b = tiny(), 256
    e = gpu.estimate_network_gpu(net, b, "DGX_A100_40GB", training=True, overlap=False, stack="cuda-graphs")
    lk, price = _kernels(net, b, "cuda-graphs", training=True)
    n_params = 64 * 3 * 9 + 64 * 10 + 10       # the conv has no bias
    assert e.n_params == n_params
    assert e.backward_seconds == pytest.approx(sum(price(layer.backward) for layer in lk), rel=1e-12)
    # the conv's data gradient is skipped: its input is the network input
    assert not any("dgrad" in c.label for c in lk[0].backward)
    # SGD with momentum: 5 fp32 words per parameter, one multi-tensor launch for 3 tensors
    opt = memory_seconds(gpu.A100_40GB, "optimizer", 20 * n_params).seconds
    assert e.optimizer_seconds == pytest.approx(opt, rel=1e-12)
    full = gpu.gpu_all_reduce_seconds(gpu.DGX_A100_40GB, 2 * n_params)
    assert e.all_reduce_seconds == pytest.approx(full)
    assert e.exposed_all_reduce_seconds == e.all_reduce_seconds
    assert e.step_seconds == pytest.approx(e.forward_seconds + e.backward_seconds + e.optimizer_seconds
                                           + e.all_reduce_seconds)
    ov = gpu.estimate_network_gpu(net, b, "DGX_A100_40GB", training=True, stack="cuda-graphs")
    assert 0 <= ov.exposed_all_reduce_seconds <= ov.all_reduce_seconds * (1 + 1e-12)
    assert ov.step_seconds == pytest.approx(ov.forward_seconds + ov.backward_seconds + ov.optimizer_seconds
                                            + ov.exposed_all_reduce_seconds)
    # LARS: momentum's 5 fp32 words plus the norms' second read of w and g
    lars = gpu.estimate_network_gpu(net, b, "DGX_A100_40GB", training=True, overlap=False, optimizer="lars",
                                    stack="cuda-graphs")
    assert lars.optimizer_seconds == pytest.approx(
        memory_seconds(gpu.A100_40GB, "optimizer", 28 * n_params).seconds, rel=1e-12)
    assert e.time_to_train(epochs=2, dataset_size=1000) == pytest.approx(2000 / e.samples_per_second)


def test_every_estimate_names_its_stack():
    for st in ("pytorch-eager", "cuda-graphs", "mlperf"):
        assert gpu.estimate_network_gpu(tiny(), 8, stack=st).stack == st
    assert gpu.estimate_network_gpu(tiny(), 8).stack == gpu.DEFAULT_STACK == "mlperf"
    with pytest.raises(ValueError, match="unknown GPU software stack"):
        gpu.estimate_network_gpu(tiny(), 8, stack="tensorrt")
    with pytest.raises(TypeError, match="float32 or float16"):
        gpu.estimate_network_gpu(tiny(), 8, dtype="float64")


def test_bad_input():
    with pytest.raises(ValueError, match="cannot use 9"):
        gpu.estimate_network_gpu(tiny(), 8, "DGX_A100_40GB", n_gpus=9)
    with pytest.raises(ValueError, match="batch"):
        gpu.estimate_network_gpu(tiny(), 0)
    with pytest.raises(ValueError, match="unknown GPU system"):
        gpu.estimate_network_gpu(tiny(), 8, "DGX_B200")
    with pytest.raises(TypeError, match="Network"):
        gpu.estimate_network_gpu("resnet50", 8)
    with pytest.raises(ValueError, match="samples"):
        gpu.estimate_network_gpu(tiny(), 8).time_to_train(epochs=1)
    with pytest.raises(ValueError, match="gpus_per_node must be a positive int"):
        gpu.GPUSystem("x", "A100_40GB", 0, nvlink_bytes_per_s=1e9)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        gpu.estimate_network_gpu(tiny(), 8, training=True, optimizer="rmsprop")


def test_resnet50_training_on_dgx_a100_runs():
    models = pytest.importorskip("ipukern.nn.models")
    e = gpu.estimate_network_gpu(models.resnet50(), 256, "DGX_A100_40GB", training=True)
    assert e.n_params > 25_000_000 and len(e.layers) > 100
    # DDP buckets: at least one all-reduce of every gradient, most of it under the backward pass
    one = gpu.gpu_all_reduce_seconds(gpu.DGX_A100_40GB, 2 * e.n_params)
    assert one <= e.all_reduce_seconds < 2 * one
    assert e.exposed_all_reduce_seconds < 0.5 * e.all_reduce_seconds
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


def test_repeated_estimate_reuses_launches_but_sees_a_changed_network():
    """A warm estimate replays cached launches: equal to the cold one, and a layer added to
    the same network object (a new version) is priced, as a fresh identical network is."""
    net = tiny()
    kw = dict(training=True, stack="pytorch-eager")
    cold = gpu.estimate_network_gpu(net, 4, "DGX_A100", **kw)
    assert gpu.estimate_network_gpu(net, 4, "DGX_A100", **kw) == cold
    y = net.add(ik.nn.Linear(10, 10), "fc", name="fc2")
    net.output(y)
    grown = gpu.estimate_network_gpu(net, 4, "DGX_A100", **kw)
    fresh = tiny()
    fresh.output(fresh.add(ik.nn.Linear(10, 10), "fc", name="fc2"))
    assert grown == gpu.estimate_network_gpu(fresh, 4, "DGX_A100", **kw)
    assert grown.n_params == cold.n_params + 110 and len(grown.layers) == len(cold.layers) + 1
    assert grown.step_seconds > cold.step_seconds
