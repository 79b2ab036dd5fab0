"""Recomputation in executed multi-IPU training steps (``run_training_step(recompute=)``):
the dropped activations are computed again before the backward, the weights are bitwise
those without recomputation, and the cycles are the estimate's."""

import numpy as np
import pytest

import ipukern as ik
from ipukern.systems import train_run
from ipukern.systems.recompute import stage_plan
from ipukern.systems.train_run import with_loss
from ipukern.systems.training import _costs_from_network

from tests._support.nets import data, tiny_cnn
from tests._support.train_check import CHIP, SYSTEM

OPT = ik.Optimizer("sgd_momentum", lr=0.05)


@pytest.fixture(scope="module")
def net():
    return tiny_cnn(bn=True)


def test_stage_plan_by_hand(net):
    prog, _, _ = train_run.training_program(with_loss(net), 2, CHIP)
    steps = list(prog.steps)
    whole = stage_plan(prog, steps, True, {"loss"})
    assert whole.drop == {st.node for st in steps} - {"loss"} and whole.segments == [(steps, True)]
    # checkpoint relu1: segment 0 = conv1, bn1, relu1 (recomputed; relu1's output kept),
    # segment 1 = the rest (the last segment: not recomputed)
    ck = stage_plan(prog, steps, ["relu1"], {"loss"})
    assert ck.drop == {"conv1", "bn1"}
    assert [([st.node for st in s], again) for s, again in ck.segments] == [
        (["conv1", "bn1", "relu1"], True), ([st.node for st in steps[3:]], False)]
    # batch-norm sync points in the backward: the recomputed forward's, then the backward's
    assert ck.bn_backward == [("bn1", 8, 2), ("bn1", 8, 2)]
    assert stage_plan(prog, steps, None, {"loss"}).drop == set()


@pytest.mark.parametrize("recompute", [True, ["relu1"]])
@pytest.mark.parametrize("reps,ipr,pipe,bn", [(2, 1, None, 2), (1, 2, ["res"], 1), (2, 2, ["pool"], 2)])
def test_recomputed_step_is_bitwise_the_plain_step(net, recompute, reps, ipr, pipe, bn, monkeypatch):
    params = net.init_params(seed=3)
    x, labels = data(reps * 2 * 2, seed=4)
    kw = dict(system=SYSTEM, replicas=reps, ipus_per_replica=ipr, pipeline=pipe, gradient_accumulation=2,
              optimizer=OPT, bn_replica_group=bn)
    plain = ik.run_training_step(net, x, labels, params, **kw)
    calls = []
    real = train_run.forward_iter
    monkeypatch.setattr(train_run, "forward_iter", lambda st, steps: (calls.append(len(steps)),
                                                                      real(st, steps))[1])
    rec = ik.run_training_step(net, x, labels, params, recompute=recompute, **kw)
    # the forward really ran again: once per stage and micro-batch, and again per recomputed segment
    n_mb = reps * 2
    assert len(calls) == n_mb * ipr + n_mb * sum(
        1 for p in stage_plans(net, rec, recompute) for _, again in p.segments if again)
    assert rec.loss == plain.loss
    for k in plain.params:
        assert np.array_equal(rec.params[k], plain.params[k]), k
        assert np.array_equal(rec.grads.get(k, 0), plain.grads.get(k, 0)), k
    # cycles: recomputation costs what the estimate says, the rest is unchanged
    costs = _costs_from_network(with_loss(net), 2, CHIP, "float32", "float",
                                recompute if isinstance(recompute, list) else None)
    est = ik.estimate_training(with_loss(net), SYSTEM, micro_batch=2, gradient_accumulation=2, replicas=reps,
                               ipus_per_replica=ipr, pipeline=pipe, dtype="float32", partials="float",
                               optimizer="sgd_momentum", recompute=recompute, bn_replica_group=bn)
    slow = rec.info["slowest_stage"]
    assert est.stages == [r["layers"] for r in rec.stages]
    by = {c.name: c for c in costs}
    names = rec.stages[slow]["layers"]
    want = 2 * sum(by[n].fwd_cycles * (2 if recompute is True else 1) + by[n].bwd_cycles + by[n].wu_cycles
                   for n in names)
    assert rec.phases["compute"] == want > plain.phases["compute"]
    if ipr == 1:
        assert rec.phases["compute"] == round(est.info["parts_s"]["pipeline compute"] * CHIP.clock_hz)
        assert rec.phases["bn all-reduce"] == round(est.info["parts_s"]["bn all-reduce"] * CHIP.clock_hz)
    if bn > 1:       # the recomputed batch norm's group all-reduce runs again: 3 per micro-batch
        assert rec.phases["bn all-reduce"] == 3 * plain.phases["bn all-reduce"] // 2
        assert rec.info["bn_all_reduce_executed"] == 3 * plain.info["bn_all_reduce_executed"] // 2
    assert rec.cycles == sum(rec.phases.values())


def stage_plans(net, run, recompute):
    prog, _, _ = train_run.training_program(with_loss(net), run.micro_batch, CHIP)
    stage_of = {n: r["stage"] for r in run.stages for n in r["layers"]}
    return [stage_plan(prog, [st for st in prog.steps if stage_of[st.node] == r["stage"]], recompute,
                       {"loss"}) for r in run.stages]


def test_bad_recompute_is_a_clear_error(net):
    x, labels = data(4)
    with pytest.raises(ValueError, match="recompute must be"):
        ik.run_training_step(net, x, labels, system=SYSTEM, replicas=1, recompute="relu1")
    with pytest.raises(ValueError, match="not a layer"):
        ik.run_training_step(net, x, labels, system=SYSTEM, replicas=1, recompute=["nope"])
