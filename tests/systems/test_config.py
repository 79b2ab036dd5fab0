"""TrainingConfig: one frozen, validated record behind the training entry points' keywords."""
from __future__ import annotations

import dataclasses

import pytest

import ipukern as ik
from ipukern.systems import TrainingConfig


def test_the_record_is_frozen_hashable_and_normalised():
    c = TrainingConfig(micro_batch=4, pipeline=[["a"], ["b"]], recompute=["x"], dtype="fp16")
    assert c.pipeline == (("a",), ("b",)) and c.recompute == ("x",) and c.dtype == "float16"
    assert c.optimizer_state_dtype == ("float32",)        # sgd_momentum's one slot
    assert hash(c) == hash(TrainingConfig(micro_batch=4, pipeline=(("a",), ("b",)), recompute=("x",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.micro_batch = 5
    assert c.replace(micro_batch=8).micro_batch == 8 and c.micro_batch == 4


@pytest.mark.parametrize("kw, exc, match", [
    ({"micro_batch": 0}, ValueError, "micro_batch must be an int >= 1"),
    ({"micro_batch": 2.0}, TypeError, "micro_batch must be an int"),
    ({"ipus_per_replica": 3}, ValueError, "GCL replica sizes"),
    ({"optimizer": "adagrad"}, ValueError, "optimizer must be one of"),
    ({"optimizer_state": "disk"}, ValueError, "optimizer_state must be"),
    ({"optimizer": "adam", "optimizer_state_dtype": ("float16",)}, ValueError, "2 state slot"),
    ({"recompute": "sometimes"}, ValueError, "recompute must be"),
    ({"allow_overflow": 1}, TypeError, "allow_overflow must be True or False"),
    ({"available_memory_proportion": 0}, ValueError, "available_memory_proportion"),
    ({"dtype": "int8"}, (TypeError, ValueError), "int8"),
])
def test_bad_options_are_one_line_errors(kw, exc, match):
    with pytest.raises(exc, match=match):
        TrainingConfig(**kw)


def test_keywords_and_the_record_give_the_same_estimate():
    net = ik.models.resnet18() if hasattr(ik.models, "resnet18") else ik.models.resnet50()
    kw = dict(micro_batch=2, gradient_accumulation=4, optimizer="lamb", replicas=2)
    a = ik.estimate_training(net, "POD16", **kw)
    b = ik.estimate_training(net, "POD16", TrainingConfig(**kw))
    c = ik.estimate_training(net, "POD16", TrainingConfig(micro_batch=1, optimizer="lamb"),
                             micro_batch=2, gradient_accumulation=4, replicas=2)
    assert a.step_seconds == b.step_seconds == c.step_seconds and a.breakdown == b.breakdown


def test_unknown_options_name_themselves():
    with pytest.raises(TypeError, match="unknown training option.*micro_batches"):
        ik.estimate_training(ik.models.resnet50(), "POD16", micro_batches=4)
    with pytest.raises(TypeError, match="config must be"):
        ik.estimate_training(ik.models.resnet50(), "POD16", {"micro_batch": 4})
    with pytest.raises(ValueError, match="needs micro_batch"):
        ik.estimate_training(ik.models.resnet50(), "POD16")
