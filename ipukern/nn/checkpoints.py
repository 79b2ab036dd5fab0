"""Automatic recomputation checkpoints (``recompute="auto"``).

Checkpoints go where a network can be cut: a *block boundary* is a step after which the only
activation still needed by later steps is that step's own output (every residual branch has
rejoined: in ResNet-50 the ``add`` + ReLU ending each bottleneck block and the stem's layers;
in BERT each layer's final layer norm). Recomputing from such a point needs nothing but the
checkpoint's stashed output, the property PopART's and Graphcore's pipelined examples rely on
when they place recomputation checkpoints at layer or stage boundaries.

How many: Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016, arXiv:1604.06174)
split a chain of n layers into about sqrt(n) segments, so the stash (the checkpoints) and one
segment's recomputed activations are both O(sqrt(n)). Here n is the number of block
boundaries and k = round(sqrt(n)) checkpoints are placed where the cumulative bytes of the
forward activations (up to the last boundary) cross j / (k + 1) of their total, j = 1..k, so
the recomputed segments hold similar activation bytes; a checkpoint followed by an activation
of its output moves to that activation (ResNet's ``add`` to its ``relu3``). The part after the last checkpoint
(ending at the loss) is not recomputed (:mod:`ipukern.nn.training`).
"""
from __future__ import annotations

import math

__all__ = ["auto_checkpoints", "block_boundaries", "network_checkpoints"]


def block_boundaries(prog) -> list[int]:
    """Indices of the steps after which only their own output is live (network inputs and
    host data, live throughout, are not counted); the last step is not one."""
    steps = prog.steps
    produced = {s.node: i for i, s in enumerate(steps)}
    last_use: dict[str, int] = {}
    for i, s in enumerate(steps):
        for src in s.srcs:
            if src in produced and prog.layouts.get(src) is not None:
                last_use[src] = i
    # open[i]: produced tensors alive across the cut after step i
    out = []
    alive: set[str] = set()
    ends: dict[int, list[str]] = {}
    for name, j in last_use.items():
        ends.setdefault(j, []).append(name)
    for i, s in enumerate(steps[:-1]):
        for name in ends.get(i, ()):
            alive.discard(name)
        if s.node in last_use:
            alive.add(s.node)
        if alive == {s.node}:
            out.append(i)
    return out


def _past_activation(prog, i: int, cuts: set[int]) -> int:
    """Step i, or the activation right after it when that is a boundary reading only step i:
    an activation's backward reads its own output (popnn differentiates ReLU from it), so
    stashing that output rather than the pre-activation (a residual add's, a batch norm's)
    keeps a tensor the backward needs anyway."""
    nxt = i + 1
    if nxt in cuts and prog.steps[nxt].op == "activation" and prog.steps[nxt].srcs == (prog.steps[i].node,):
        return nxt
    return i


def auto_checkpoints(prog) -> list[str]:
    """The checkpoint layer names ``recompute="auto"`` uses (module docstring); empty when the
    network has fewer than two block boundaries."""
    nt = prog.machine.n_tiles
    cuts = block_boundaries(prog)
    if len(cuts) < 2:
        return []
    k = min(len(cuts), max(1, round(math.sqrt(len(cuts)))))
    size = []
    for s in prog.steps[:cuts[-1] + 1]:
        lay = prog.layouts.get(s.node)
        size.append(0 if lay is None else int(lay.bytes_per_tile(nt).sum()))
    cum = [0]
    for b in size:
        cum.append(cum[-1] + b)
    total = cum[-1]
    chosen: list[int] = []
    for j in range(1, k + 1):
        target = total * j / (k + 1)
        # the first boundary whose cumulative bytes reach the target, not already taken
        pick = next((c for c in cuts if cum[c + 1] >= target and c not in chosen), None)
        if pick is not None:
            chosen.append(_past_activation(prog, pick, set(cuts)))
    return [prog.steps[i].layers[-1] for i in sorted(set(chosen))]


def network_checkpoints(net, batch: int, machine, dtype, partials, amp=None) -> list[str]:
    """:func:`auto_checkpoints` of ``net``'s training program (``fold_bn=False``, the one
    :func:`ipukern.estimate_training`'s per-layer costs come from)."""
    from .layers import plan_context
    from .compile import compile_network
    ctx = plan_context(dtype, partials, machine, amp)
    return auto_checkpoints(compile_network(net, batch, ctx, fold_bn=False))
