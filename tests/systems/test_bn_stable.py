"""PopLibs' stable batch-norm statistics (``BatchNorm2d(stable=True)``, popnn ``stableAlgo``):
numerics against float64 NumPy, cost structure, and the replica-group all-reduces executed
(two of C values in the forward) == estimated, in one process and under MPI (train_check)."""

import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import layers as L
from ipukern.nn import train_step
from ipukern.nn.train_exec import PassState, forward_steps, training_program
from ipukern.systems.bn_group import bn_all_reduce_cycles
from ipukern.systems.train_run import with_loss
from ipukern.systems.training import _costs_from_network

from tests._support.nets import data, tiny_cnn
from tests._support.train_check import CHIP, SYSTEM

SGD = ik.Optimizer("sgd", lr=0.1)


def _bn_net(stable: bool, c: int = 4) -> ik.Network:
    net = ik.Network("bn_only")
    x = net.input("x", (c, 8, 8))
    h = net.add(L.BatchNorm2d(c, stable=stable), x, name="bn")
    h = net.add(L.GlobalAvgPool(), h, name="gap")
    h = net.add(L.Flatten(), h, name="flat")
    h = net.add(L.Linear(c, 3), h, name="fc")
    y = net.input("labels", (), kind="int")
    net.output(net.add(L.SoftmaxCrossEntropy(), h, y, name="loss"))
    return net


def _normalised(stable: bool, x: np.ndarray) -> np.ndarray:
    net = _bn_net(stable, x.shape[1])
    params = net.init_params(seed=0)
    params["bn.weight"][:] = 1
    params["bn.bias"][:] = 0
    prog, xn, ln = training_program(net, x.shape[0], CHIP)
    st = PassState(prog, params, xn, ln, np.zeros(x.shape[0], np.int64), CHIP)
    st.receive(xn, x)
    forward_steps(st, [s for s in prog.steps if s.node == "bn"])
    return st.host["bn"]


def _reference(x: np.ndarray) -> np.ndarray:
    """Batch norm's training-mode output (gamma 1, beta 0) in float64."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(0, 2, 3), keepdims=True)
    return (x64 - mean) / np.sqrt(x64.var(axis=(0, 2, 3), keepdims=True) + 1e-5)


def test_stable_statistics_survive_a_large_mean():
    rng = np.random.default_rng(0)
    x = (300 + 0.05 * rng.standard_normal((4, 4, 8, 8))).astype(np.float32)
    ref = _reference(x)
    stable = _normalised(True, x)
    plain = _normalised(False, x)
    # E[x^2] - E[x]^2 in float32 sums cancels: the plain variance is noise at this mean
    assert np.abs(plain - ref).max() > 0.5
    np.testing.assert_allclose(stable, ref, atol=0.02)
    # and on ordinary data the two agree with NumPy to float32 rounding
    y = rng.standard_normal((4, 4, 8, 8)).astype(np.float32)
    want = _reference(y)
    for got in (_normalised(True, y), _normalised(False, y)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_stable_statistics_cost_two_reductions_and_a_centring_pass():
    rows = {}
    for stable in (False, True):
        prof = ik.estimate_network(_bn_net(stable, 16), 4, "float32", "float", machine=CHIP, training=True,
                                   optimizer=None)
        rows[stable] = next(r for r in prof.layers if r["name"] == "bn.stats")
    from ipukern.nn.grad_ops import bn_stats_row
    prog, _, _ = training_program(_bn_net(True, 16), 4, CHIP)
    step = next(s for s in prog.steps if s.node == "bn")
    r = bn_stats_row(step, prog.ctx)
    kinds = [rec.name for rec in r.records]
    # mean: partials to owners, broadcast back; the centring pass; centred power: partials to
    # owners, scale/shift broadcast back: twice the exchanges of the one-pass row
    assert any("centre" in k for k in kinds) and r.info["group_sync"] == (1, 2)
    ex = sum(rec.category == "exchange" for rec in r.records)
    plain = next(s for s in training_program(_bn_net(False, 16), 4, CHIP)[0].steps if s.node == "bn")
    assert ex == 2 * sum(rec.category == "exchange" for rec in bn_stats_row(plain, prog.ctx).records)
    assert rows[True]["cycles"] > rows[False]["cycles"] and rows[True]["cycles"] == r.cycles


def test_stable_group_statistics_executed_equal_one_ipu_and_cost_two_all_reduces():
    net = tiny_cnn(bn=True, bn_stable=True)
    params = net.init_params(seed=2)
    x, labels = data(8, seed=3)
    ref = train_step(net, x, labels, params, optimizer=SGD, machine=CHIP)
    run = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, optimizer=SGD,
                               bn_replica_group=4)
    assert run.loss == pytest.approx(ref.loss, rel=1e-6)
    for k in ref.params:
        np.testing.assert_allclose(run.params[k], ref.params[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # forward: the mean (8 values) and the centred power (8 values); backward: 2 x 8 values
    one, two = bn_all_reduce_cycles(SYSTEM, 4, 1, 4, 0, 8, 1), bn_all_reduce_cycles(SYSTEM, 4, 1, 4, 0, 8)
    assert run.phases["bn all-reduce"] == 2 * one + two == run.info["bn_all_reduce_executed"]
    costs = _costs_from_network(with_loss(net), 2, CHIP, "float32", "float")
    assert next(c for c in costs if c.name == "bn1").bn_stable == 1
    est = ik.estimate_training(system=SYSTEM, micro_batch=2, replicas=4, dtype="float32", costs=costs,
                               optimizer="sgd", bn_replica_group=4, sample_bytes=0)
    assert round(est.info["parts_s"]["bn all-reduce"] * CHIP.clock_hz) == 2 * one + two
    # recomputation re-runs both forward all-reduces
    rec = ik.run_training_step(net, x, labels, params, system=SYSTEM, replicas=4, optimizer=SGD,
                               bn_replica_group=4, recompute=True)
    assert rec.phases["bn all-reduce"] == 4 * one + two
    assert all(np.array_equal(rec.params[k], run.params[k]) for k in params)


def test_bad_stable_flag():
    with pytest.raises(TypeError, match="stable must be a bool"):
        L.BatchNorm2d(4, stable="yes")
