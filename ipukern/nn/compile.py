"""Compile a network for one batch size, dtype and machine into a program of op steps
(:class:`~ipukern.nn.program.NetworkProgram`), cached by (network version, batch, context),
so estimating the same network twice costs a dictionary lookup; and the one clear of every
cache (:mod:`ipukern._memo`).
"""
from __future__ import annotations

from .. import _memo
from .plan_keys import prefetch_network_plans
from .layers import PlanContext
from .network import Network
from .program import NetworkProgram

__all__ = ["clear_network_caches", "compile_network", "trial_caches"]

PROGRAM_CACHE_SIZE = 16
_PROGRAMS = _memo.register(_memo.LruCache("nn.programs", maxsize=PROGRAM_CACHE_SIZE, **_memo.HOST_BOUND),
                           per_batch=True)


def clear_network_caches() -> None:
    """Forget every cache (:func:`ipukern._memo.clear_all`, the same as
    :func:`ipukern.clear_plan_cache`): op plans, rearrangements, compiled networks,
    training schedules, cross-tile reduction plans, conv programs and the residents'
    reusable host buffers."""
    _memo.clear_all()


#: what is compiled inside is dropped on exit (:func:`ipukern._memo.trial`)
trial_caches = _memo.trial


def compile_network(net: Network, batch: int, ctx: PlanContext, *, fold_bn: bool = True) -> NetworkProgram:
    """The compiled program (cached by network version, batch, context and folding)."""
    key = (id(net), net.version, batch, ctx, fold_bn)
    prog = _PROGRAMS.get(key)
    if prog is not None and prog.net is net:
        return prog
    with prefetch_network_plans(net, batch, ctx, fold_bn=fold_bn, backward=False):
        prog = NetworkProgram(net, batch, ctx, fold_bn)
    return _PROGRAMS.put(key, prog)
