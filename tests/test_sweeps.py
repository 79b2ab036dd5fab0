"""network_sweep / training_sweep: a process pool gives the serial results; bad input."""
import concurrent.futures

import pytest

import ipukern as ik

CHIP = ik.GC200.replace(n_tiles=16, name="GC200-16")
SMALL = {"net": "resnet8", "model_kwargs": {"image_size": 8}}


def tiny():
    net = ik.Network("tiny")
    h = net.add(ik.nn.Conv2d(3, 8, 3, padding=1), net.input("x", (3, 8, 8)), name="conv1")
    h = net.add(ik.nn.ReLU(), h, name="relu1")
    h = net.add(ik.nn.Conv2d(8, 16, 3, stride=2, padding=1), h, name="conv2")
    h = net.add(ik.nn.GlobalAvgPool(), h, name="gap")
    h = net.add(ik.nn.Flatten(), h, name="flat")
    net.output(net.add(ik.nn.Linear(16, 4), h, name="fc"))
    return net


NET_CONFIGS = [{**SMALL, "batch": 1, "machine": CHIP},
               {"net": tiny(), "batch": 2, "machine": CHIP, "dtype": "float32", "partials": "float"},
               {"net": tiny(), "batch": 2, "machine": CHIP, "training": True, "optimizer": "adam"}]
SYSTEM = ik.System.pod(4, CHIP)
TRAIN_CONFIGS = [{"net": tiny(), "system": SYSTEM, "micro_batch": 2, "replicas": 4},
                 {"net": tiny(), "system": SYSTEM, "micro_batch": 1, "replicas": 2, "ipus_per_replica": 2,
                  "gradient_accumulation": 4, "pipeline": "auto"}]


@pytest.fixture(scope="module")
def pool():
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        yield ex


def test_network_sweep_on_a_process_pool_equals_serial(pool):
    serial = ik.network_sweep(NET_CONFIGS)
    assert [p.batch for p in serial] == [1, 2, 2] and serial[2].training
    direct = ik.estimate_network(ik.models.resnet8(image_size=8), 1, machine=CHIP)
    assert serial[0].total_cycles == direct.total_cycles
    got = ik.network_sweep(NET_CONFIGS, executor=pool)
    assert [p.to_dict() for p in got] == [p.to_dict() for p in serial]


def test_network_sweep_fills_max_batch_when_asked(pool):
    configs = NET_CONFIGS[:2]
    assert [p.memory["max_batch"] for p in ik.network_sweep(configs)] == [None, None]
    direct = ik.estimate_network(ik.models.resnet8(image_size=8), 1, machine=CHIP).memory["max_batch"]
    assert direct >= 1
    serial = ik.network_sweep(configs, max_batch=True)
    assert serial[0].memory["max_batch"] == direct
    assert all(isinstance(p.memory["max_batch"], int) and p.memory["max_batch"] >= 1 for p in serial)
    got = ik.network_sweep(configs, executor=pool, max_batch=True)
    assert [p.memory for p in got] == [p.memory for p in serial]
    with pytest.raises(TypeError, match="max_batch"):
        ik.network_sweep(configs, max_batch="yes")


def test_training_sweep_on_a_process_pool_equals_serial(pool):
    seen = []
    serial = ik.training_sweep(TRAIN_CONFIGS, progress=lambda i, n, label: seen.append((i, n, label)))
    assert [s[:2] for s in seen] == [(1, 2), (2, 2)]
    assert serial[1].ipus_per_replica == 2 and len(serial[1].stages) == 2
    assert ik.training_sweep(TRAIN_CONFIGS, executor=pool) == serial


@pytest.mark.parametrize("configs,executor,err,match", [
    ({"net": "resnet8"}, None, TypeError, "list of dicts"),
    ([["resnet8"]], None, TypeError, "config 0 must be a dict"),
    ([{"net": "resnet8", "batchsize": 2}], None, TypeError, "batchsize"),
    ([{"net": "nope"}], None, ValueError, "unknown model 'nope'"),
    ([{**SMALL, "machine": CHIP}], "threads", TypeError, "executor"),
])
def test_bad_sweeps_are_clear_errors(configs, executor, err, match):
    with pytest.raises(err, match=match):
        ik.network_sweep(configs, executor=executor)
