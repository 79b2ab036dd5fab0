"""Executed multi-IPU training steps (``ik.run_training_step``): data parallel equals one IPU
with the whole batch, pipelined equals unpipelined, MPI equals one process, bad input."""
import json

import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import train_step

from tests._support.mpi import mpirun
from tests._support.nets import data, tiny_cnn
from tests._support.train_check import CHIP, SYSTEM, run as run_configs

SGD = ik.Optimizer("sgd", lr=0.1)


@pytest.fixture(scope="module")
def net():
    return tiny_cnn()


def test_one_replica_is_train_step_bitwise():
    net = tiny_cnn(bn=True)                 # batch norm's running statistics are updated too
    params = net.init_params(seed=0)
    x, labels = data(4)
    ref = train_step(net, x, labels, params, optimizer=SGD, machine=CHIP)
    got = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=1, optimizer=SGD)
    assert got.loss == ref.loss
    for k in ref.params:
        assert np.array_equal(got.params[k], ref.params[k]), k
    # one IPU: no links, no all-reduce; compute is the training profile's fwd/bwd/wu rows
    assert got.phases["link exchange"] == got.phases["sync"] == got.phases["all-reduce"] == 0
    rows = sum(r["cycles"] for r in ref.profile.layers if r["pass"] in ("fwd", "bwd", "wu"))
    assert got.phases["compute"] == rows
    assert got.cycles == sum(got.phases.values())


def test_data_parallel_4_ipus_equals_one_ipu_with_4x_batch(net):
    params = net.init_params(seed=2)
    x, labels = data(8, seed=3)
    ref = train_step(net, x, labels, params, optimizer=SGD, machine=CHIP)
    dp = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, optimizer=SGD)
    assert dp.micro_batch == 2 and dp.stages[0]["ipus"] == [0, 1, 2, 3]
    assert dp.loss == pytest.approx(ref.loss, rel=1e-6)
    for k in ref.params:         # float32 sums in another order: a few ulps of the gradient
        np.testing.assert_allclose(dp.grads[k], ref.grads[k], rtol=1e-5, atol=1e-7, err_msg=k)
        np.testing.assert_allclose(dp.params[k], ref.params[k], rtol=1e-6, atol=1e-7, err_msg=k)
    # the all-reduce phase is the executed all-reduce program of this gradient size
    n = sum(int(np.prod(s)) for s in net.param_shapes().values())
    dev = ik.SystemDevice(SYSTEM)
    t = dev.add_tensor("g", (n,), "float32", ik.TileMapping.linear(n, CHIP.n_tiles))
    assert dp.phases["all-reduce"] == dev.run(ik.all_reduce(dev, t), "estimate").total_cycles > 0
    # and gradient accumulation over 2 micro-batches per replica lands on the same weights
    acc = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=2,
                               gradient_accumulation=2, optimizer=SGD)
    for k in ref.params:
        np.testing.assert_allclose(acc.params[k], ref.params[k], rtol=1e-6, atol=1e-7, err_msg=k)


@pytest.mark.parametrize("stages,pipeline", [(2, ["pool"]), (4, ["relu1", "res", "conv3"]), (4, "auto")])
def test_pipelined_step_equals_unpipelined(stages, pipeline):
    net = tiny_cnn(bn=True)
    params = net.init_params(seed=4)
    x, labels = data(6, seed=5)
    opt = ik.Optimizer("adam", lr=0.01)
    flat = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=1, gradient_accumulation=3,
                                optimizer=opt)
    pp = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=1, ipus_per_replica=stages,
                              pipeline=pipeline, gradient_accumulation=3, optimizer=opt)
    assert len(pp.stages) == stages
    # the same float32 operations in the same order: the same bits
    assert pp.loss == flat.loss
    for k in params:
        assert np.array_equal(pp.params[k], flat.params[k]), k
    # a pipeline costs link exchanges, cross-chip syncs and a fill/drain bubble
    assert pp.phases["link exchange"] > 0 and pp.phases["sync"] > 0 and pp.phases["fill/drain"] > 0
    assert len(pp.schedule) == 3 + 2 * stages - 2
    assert pp.info["link_bytes"] > 0
    assert pp.phases["compute"] == max(r["compute_cycles"] for r in pp.stages)
    assert pp.cycles == sum(pp.phases.values())


def test_logits_network_gets_a_loss(net):
    logits = tiny_cnn(loss=False)
    params = net.init_params(seed=0)
    x, labels = data(4)
    a = ik.run_training_step(logits, x, labels, params, system=SYSTEM, replicas=2, optimizer=SGD)
    b = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=2, optimizer=SGD)
    assert a.loss == b.loss and a.cycles == b.cycles
    assert all(np.array_equal(a.params[k], b.params[k]) for k in params)


@pytest.mark.parametrize("kw,match", [
    ({"replicas": 4, "ipus_per_replica": 2}, "8 IPUs"),
    ({"replicas": 2, "ipus_per_replica": 2, "pipeline": ["nope"]}, "layer 'nope'"),
    ({"replicas": 3}, "multiple of replicas"),
    ({"replicas": 2, "micro_batch": 3}, "micro_batch=3"),
    ({"replicas": 0}, "replicas"),
    ({"replicas": 1, "ipus_per_replica": 2, "pipeline": ["fc", "pool"]}, "order"),
])
def test_bad_configurations_are_clear_errors(net, kw, match):
    x, labels = data(4)
    with pytest.raises((ValueError, ik.SystemConfigError), match=match):
        ik.run_training_step(net, x, labels, system=SYSTEM, **kw)


def test_bad_data_is_a_clear_error(net):
    x, labels = data(4)
    with pytest.raises(ValueError, match="labels must lie"):
        ik.run_training_step(net, x, labels + 10, system=SYSTEM, replicas=1)
    with pytest.raises(ValueError, match="shape"):
        ik.run_training_step(net, x[:, :2], labels, system=SYSTEM, replicas=1)
    with pytest.raises(ValueError, match="labels must be 4 integers"):
        ik.run_training_step(net, x, labels.astype(np.float32), system=SYSTEM, replicas=1)


def test_stage_that_does_not_fit_names_stage_ipu_and_bytes(net):
    # every layer's passes fit 48 KiB tiles; stage 0's stash of 4 micro-batches in flight does not
    tiny = ik.System.pod(4, CHIP.replace(tile_bytes=96 * 1024, name="GC200-16-96K"))
    x, labels = data(32)
    want = r"stage 0 \(conv1 .. relu2\) on IPU 0 needs [\d,]+ B > budget"
    with pytest.raises(ik.StageMemoryError, match=want):
        ik.run_training_step(net, x, labels, system=tiny, replicas=1, ipus_per_replica=4,
                             pipeline=["res", "conv3", "fc"])


@pytest.fixture(scope="module")
def in_process():
    return json.loads(json.dumps(run_configs()))


@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_runs_are_bitwise_identical_to_in_process(ranks, in_process):
    pytest.importorskip("mpi4py", reason="MPI tests need the mpi extra: pip install 'ipukern[mpi]'")
    assert json.loads(mpirun(ranks, "-m", "tests._support.train_check", "--mpi")[-1]) == in_process


CLI = ["train", "resnet8", "--system", "M2000", "--replicas", "2", "--micro-batch", "1",
       "--image-size", "8", "--tiles", "16", "--bn-group", "2", "--execute"]


def test_cli_execute_in_process_and_under_mpiexec(capsys):
    from ipukern.cli import main
    assert main(CLI) == 0
    here = capsys.readouterr().out.splitlines()
    assert here[0].endswith("1 process(es)") and "2 replica(s) x 1 IPU(s)" in here[1]
    assert here[2].startswith("loss ") and "all-reduce" in "\n".join(here)
    assert any(ln.split()[:2] == ["bn", "all-reduce"] and int(ln.split()[2].replace(",", "")) > 0
               for ln in here)
    pytest.importorskip("mpi4py", reason="MPI tests need the mpi extra: pip install 'ipukern[mpi]'")
    mpi = mpirun(2, "-m", "ipukern", *CLI)   # rank 0 alone prints: the same loss and cycles
    assert mpi[0].endswith("2 process(es)") and mpi[1:] == here[1:]


@pytest.mark.parametrize("extra,match", [(["--replicas", "8"], "8 IPUs"),
                                         (["--pipeline", "nope", "--ipus-per-replica", "2"], "'nope'"),
                                         (["--image-size", "0"], "image-size"),
                                         (["--bn-group", "3"], "must divide the 2 replicas")])
def test_cli_execute_bad_input_is_one_line(capsys, extra, match):
    from ipukern.cli import main
    assert main(CLI + extra) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0] and err[0].startswith("ipukern train: error:")


def test_stage_all_reduces_share_links_when_executed():
    # 2 replicas x 4 stages on an 8-IPU ladder: stage s all-reduces over IPUs {s, 4 + s}; the
    # routes 0-2-4 / 2-4-6 (and 1-3-5 / 3-5-7) share a rail, so the concurrent all-reduce
    # program takes longer than any stage's alone
    net = tiny_cnn(bn=True)
    x, labels = data(4)
    run = ik.run_training_step(net, x, labels, net.init_params(seed=1), system=ik.System.pod(8, CHIP),
                               replicas=2, ipus_per_replica=4, pipeline=["relu1", "res", "conv3"],
                               optimizer=SGD)
    alone = [r["all_reduce_cycles"] for r in run.stages]
    assert min(alone) > 0 and run.phases["all-reduce"] > max(alone)
    assert run.cycles == sum(run.phases.values())
