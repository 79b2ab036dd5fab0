"""Batch norm statistics over groups of replicas (``bn_replica_group``): executed steps
equal one IPU computing batch norm over each group's concatenated batch, the group
all-reduce's cost (executed == estimated, latency-dominated) and bad input."""

import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import train_step
from ipukern.systems.bn_group import bn_all_reduce_cycles, replica_groups

from tests._support.nets import data, tiny_cnn
from tests._support.train_check import CHIP, SYSTEM

SGD = ik.Optimizer("sgd", lr=0.1)


@pytest.fixture(scope="module")
def setup():
    net = tiny_cnn(bn=True)
    params = net.init_params(seed=2)
    x, labels = data(8, seed=3)
    return net, params, x, labels


def _close(got, want, what):
    for k in want:       # float32 sums in another order (ring all-reduce): a few ulps
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=f"{what} {k}")


def test_group_of_all_replicas_equals_one_ipu_with_the_whole_batch(setup):
    net, params, x, labels = setup
    ref = train_step(net, x, labels, params, optimizer=SGD, machine=CHIP)
    run = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, optimizer=SGD,
                               bn_replica_group=4)
    assert run.loss == pytest.approx(ref.loss, rel=1e-6)
    _close(run.grads, ref.grads, "grad")
    _close(run.params, ref.params, "param")      # running statistics included (unbiased over 8)
    # the test can fail: per-replica statistics (2 samples each) give other weights
    own = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, optimizer=SGD)
    assert max(np.abs(own.params[k] - ref.params[k]).max() for k in ref.params) > 1e-4
    # cost: one forward and one backward group all-reduce per batch norm, executed == estimated
    per = bn_all_reduce_cycles(SYSTEM, 4, 1, 4, 0, 8)
    assert per > 0 and run.phases["bn all-reduce"] == 2 * per == run.info["bn_all_reduce_executed"]
    assert own.phases["bn all-reduce"] == 0
    assert run.cycles == sum(run.phases.values()) == own.cycles + 2 * per
    costs = ik.systems.training._costs_from_network(ik.systems.train_run.with_loss(net), 2, CHIP,
                                                    "float32", "float")
    est = ik.estimate_training(system=SYSTEM, micro_batch=2, replicas=4, dtype="float32", costs=costs,
                               optimizer="sgd", bn_replica_group=4, sample_bytes=0)
    assert round(est.info["parts_s"]["bn all-reduce"] * CHIP.clock_hz) == 2 * per
    assert all(r["bn_all_reduce_s"] == est.info["parts_s"]["bn all-reduce"] for r in est.breakdown)


def test_groups_of_two_equal_batch_norm_over_each_half(setup):
    net, params, x, labels = setup
    halves = [train_step(net, x[h:h + 4], labels[h:h + 4], params, optimizer=SGD, machine=CHIP)
              for h in (0, 4)]
    grads = {k: (halves[0].grads[k] + halves[1].grads[k]) / 2 for k in halves[0].grads}
    run = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, optimizer=SGD,
                               bn_replica_group=2)
    assert run.loss == pytest.approx((halves[0].loss + halves[1].loss) / 2, rel=1e-6)
    _close(run.grads, grads, "grad")
    want = {k: params[k] - np.float32(0.1) * grads[k] for k in grads}
    want.update({k: v for k, v in halves[0].params.items() if "running" in k})   # replica 0's group
    _close(run.params, want, "param")


def test_pipelined_groups_equal_unpipelined_groups(setup):
    net, params, x, labels = setup
    flat = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=2, gradient_accumulation=2,
                                optimizer=SGD, bn_replica_group=2)
    pp = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=2, ipus_per_replica=2,
                              pipeline=["pool"], gradient_accumulation=2, optimizer=SGD, bn_replica_group=2)
    assert pp.loss == flat.loss
    assert all(np.array_equal(pp.params[k], flat.params[k]) for k in params)
    # stage 0 holds the batch norm: its group is IPUs 0 and 2 (replica k's stage s on IPU 2k + s)
    per = bn_all_reduce_cycles(SYSTEM, 2, 2, 2, 0, 8)
    assert pp.stages[0]["bn_all_reduce_cycles"] == 2 * 2 * per and pp.stages[1]["bn_all_reduce_cycles"] == 0
    assert pp.info["bn_all_reduce_executed"] == 2 * 2 * per


def test_group_all_reduce_is_latency_dominated_and_shares_links():
    pod = ik.IPU_POD16
    small, big = bn_all_reduce_cycles(pod, 16, 1, 2, 0, 64), bn_all_reduce_cycles(pod, 16, 1, 2, 0, 2048)
    assert small < big < 1.5 * small            # 32x the bytes, far less than 32x the cycles
    # groups of 2 on a ladder: pairs are rungs, no two groups share a link -> one group's cost
    dev = ik.SystemDevice(pod)
    t = ik.systems.bn_group.stats_tensor(dev, "s", 64, [0, 1])
    assert dev.run(ik.all_reduce(dev, t), "estimate").total_cycles == small
    assert replica_groups(8, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_bad_groups_are_clear_errors(setup):
    net, params, x, labels = setup
    with pytest.raises(ik.SystemConfigError, match="must divide the 4 replicas"):
        ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, bn_replica_group=3)
    with pytest.raises(ValueError, match="bn_replica_group must be an int >= 1"):
        ik.estimate_training(system=SYSTEM, micro_batch=2, costs=[ik.LayerCost("a", 1, 1, 1, 1, 1, 1)],
                             bn_replica_group=0)
