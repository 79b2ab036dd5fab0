"""Recomputation in an executed pipeline stage (:func:`~ipukern.run_training_step`).

``recompute=True`` (stage recomputation, as :func:`~ipukern.estimate_training` costs it):
after a micro-batch's forward the stage keeps only what it received (its inputs) and what
its backward needs from nowhere else; every activation the stage produced is dropped from
its tiles, and just before the backward the stage's forward runs again from the kept
inputs. ``recompute=[layer, ...]`` (checkpoints, the rule of :mod:`ipukern.nn.training`):
segments end at the checkpoint layers; in every segment but the last, the activations used
only inside their segment (not a checkpoint's output) are dropped after the forward and the
segment's forward (its part in this stage) runs again just before the segment's backward.

The recomputed forward runs the same compiled programs on the same inputs, so it produces
the same bits and the step's weights equal those of the step without recomputation. Batch
norms' running statistics are computed from the step's parameters, so the second forward
writes the same values; with ``bn_replica_group`` its group all-reduce runs again.
"""
from __future__ import annotations

from typing import Any

from .bn_group import forward_syncs

__all__ = ["StagePlan", "bn_syncs", "stage_plan"]


def bn_syncs(step: Any, pass_: str) -> list[tuple[str, int, int]]:
    """The replica-group sync points of a step in a pass ("fwd" or "bwd"): (node, channels,
    values per channel) per group all-reduce; none for a step that is not a batch norm."""
    if step.op != "batchnorm":
        return []
    c = step.layer.num_features
    per = forward_syncs(c, bool(getattr(step.layer, "stable", False))) if pass_ == "fwd" else [2]
    return [(step.node, c, k) for k in per]


class StagePlan:
    """One stage's recomputation: ``segments`` = [(steps, recomputed)] in forward order,
    ``drop`` = nodes freed after the forward, ``bn_backward`` = the batch norms' group sync
    points met in the backward pass (:func:`bn_syncs`; a recomputed forward's first), in order."""

    def __init__(self, segments: list[tuple[list, bool]], drop: set[str]):
        self.segments, self.drop = segments, drop
        order: list[tuple[str, int, int]] = []
        for steps, again in reversed(segments):
            if again:
                order += [y for st in steps for y in bn_syncs(st, "fwd")]
            order += [y for st in reversed(steps) for y in bn_syncs(st, "bwd")]
        self.bn_backward = order


def stage_plan(prog: Any, steps: list, recompute: Any, keep: set[str]) -> StagePlan:
    """The recomputation of a stage made of ``steps`` (program order). ``recompute``: False,
    True or a list of checkpoint layers; ``keep``: nodes never dropped (the loss)."""
    if recompute is True:
        return StagePlan([(list(steps), True)], {st.node for st in steps} - keep)
    if not recompute:
        return StagePlan([(list(steps), False)], set())
    from ..nn.training import checkpoint_segments
    seg, ckpt = checkpoint_segments(prog, recompute)
    index = {st.node: i for i, st in enumerate(prog.steps)}
    consumers: dict[str, list[int]] = {}
    for i, st in enumerate(prog.steps):
        for src in st.srcs:
            consumers.setdefault(src, []).append(i)
    last = seg[-1]
    segments: list[tuple[list, bool]] = []
    for st in steps:
        k = seg[index[st.node]]
        if segments and seg[index[segments[-1][0][0].node]] == k:
            segments[-1][0].append(st)
        else:
            segments.append(([st], k != last))
    drop = {st.node for st in steps
            if seg[index[st.node]] != last and st.node not in ckpt and st.node not in keep
            and all(seg[c] == seg[index[st.node]] for c in consumers.get(st.node, []))}
    return StagePlan(segments, drop)
