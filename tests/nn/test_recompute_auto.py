"""recompute="auto": checkpoints at block boundaries (about sqrt(n) of them), listed in the
profile; peak memory below no recomputation, cycles above."""
import math

import pytest

import ipukern as ik
from ipukern.nn.checkpoints import auto_checkpoints, block_boundaries
from ipukern.nn.compile import compile_network
from ipukern.nn.layers import PlanContext
from tests._support.nets import tiny_cnn


def test_block_boundaries_by_hand():
    # tiny_cnn: conv1 bn1 relu1 conv2 relu2 res(add relu1, relu2) pool conv3 relu3 gap flat fc
    # loss. Inside the residual block relu1's output is still needed by the add, so neither
    # conv2 nor relu2 is a boundary; relu1 (before it) and res (where it rejoins) are
    net = tiny_cnn(bn=True)
    prog = compile_network(net, 2, PlanContext(ik.GC200, "float16", "float16"), fold_bn=False)
    names = [prog.steps[i].node for i in block_boundaries(prog)]
    assert {"conv1", "bn1", "relu1", "res", "pool", "conv3", "relu3", "gap"} <= set(names)
    assert not {"conv2", "relu2", "loss"} & set(names)
    ck = auto_checkpoints(prog)
    assert len(ck) == round(math.sqrt(len(names))) and set(ck) <= set(names)
    assert ck == sorted(ck, key=[s.node for s in prog.steps].index)


def test_auto_lowers_memory_raises_cycles_and_lists_checkpoints():
    net = tiny_cnn(bn=True, c=16, hw=32)
    kw = {"batch": 32, "dtype": "float32", "partials": "float", "training": True, "optimizer": "sgd",
          "allow_overflow": True}
    base = ik.estimate_network(net, **kw)
    auto = ik.estimate_network(net, recompute="auto", **kw)
    ck = auto.info["recompute_checkpoints"]
    assert ck and auto.info["recompute"] == "auto"
    assert auto.total_cycles > base.total_cycles
    assert auto.step_peak_bytes.max() < base.step_peak_bytes.max()
    assert "checkpoints " + ", ".join(ck) in auto.summary()
    # the same as naming those checkpoints
    same = ik.estimate_network(net, recompute=ck, **kw)
    assert same.total_cycles == auto.total_cycles
    assert (same.step_peak_bytes == auto.step_peak_bytes).all()
    assert base.info["recompute_checkpoints"] == []


def test_auto_in_the_system_estimate_and_errors():
    net = tiny_cnn(bn=True)
    pod = ik.System.pod(4, ik.GC200.replace(n_tiles=16, name="GC200-16"))
    kw = dict(micro_batch=4, replicas=1, dtype="float32", partials="float", allow_overflow=True)
    est = ik.estimate_training(net, pod, recompute="auto", **kw)
    ck = est.info["recompute_checkpoints"]
    assert ck and est.info["recompute"] == "auto"
    named = ik.estimate_training(net, pod, recompute=ck, **kw)
    assert named.step_seconds == est.step_seconds
    with pytest.raises(ValueError, match="need a network"):
        ik.estimate_training(system="M2000", micro_batch=1, recompute="auto",
                             costs=[ik.LayerCost("l", 1, 1, 1, 10, 0, 0)])
    with pytest.raises(ValueError, match="stage recomputation"):
        ik.estimate_network(net, batch=2, training=True, recompute=True)


def test_cli_spellings_of_auto():
    import argparse

    from ipukern.cli.train import _recompute
    ns = argparse.Namespace(recompute=False, checkpoints="auto")
    assert _recompute(ns) == "auto"
    ns.checkpoints = "relu1,res"
    assert _recompute(ns) == ["relu1", "res"]
