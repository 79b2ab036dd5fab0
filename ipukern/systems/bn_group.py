"""Batch norm statistics over groups of replicas ("distributed batch norm").

With ``bn_replica_group=N`` the replicas ``[gN, (g+1)N)`` of a data-parallel run normalise
with the statistics of their concatenated micro-batches, as Graphcore's MLPerf ResNet-50
does over 2 replicas (``shared/reference/ipu-systems.md``; TensorFlow's
``experimental_distributed_batch_norm_replica_group_size`` calling PopLibs'
``popnn::bn::distributedBatchNormStatistics``). Following PopLibs
(``poplin::distributedNormStatistics`` / ``normStatisticsGradients``, default
``stableAlgo=false``):

- **forward**: every replica reduces its per-channel sum and sum of squares across its
  tiles (float32 partials); one all-reduce of these 2 x C values over the group; mean and
  variance from the group's sums and ``N x`` the replica's element count;
- **backward**: every replica reduces per-channel sums of dy and dy * x; one all-reduce of
  these 2 x C values over the group gives the input gradient's two per-channel terms. The
  parameter gradients (dgamma, dbeta) are the replica's own sums: they join the other
  weight gradients in the step's all-reduce over all replicas.

The statistics tensor (2 float32 per channel) lives on the channel owners (channels spread
linearly over ``min(tiles, C)`` tiles, as :mod:`ipukern.nn.tile_reduce` owns them). All
groups' all-reduces run at once as one :func:`~ipukern.systems.collectives.concurrent`
program (links shared); its cycles are what both :func:`~ipukern.estimate_training` and
:func:`~ipukern.run_training_step` charge per batch norm, pass and micro-batch. A batch norm
with ``stable=True`` (PopLibs' ``stableAlgo=true``, :mod:`ipukern.nn.bn_stable`) all-reduces
its mean (C values) and then its centred sum of squares (C values): two all-reduces in the
forward instead of one of 2 C.
"""
from __future__ import annotations

from typing import Any

from .. import _memo
from ..core import TileMapping
from .bsp import SystemDevice, SystemTensor
from .collectives import all_reduce, concurrent
from .spec import SystemConfigError

__all__ = ["bn_all_reduce_cycles", "check_bn_group", "forward_syncs", "layer_cycles", "replica_groups",
           "stats_program", "stats_tensor"]

#: costed group all-reduces, by system and shape (ints)
_CACHE = _memo.register(_memo.LruCache("systems.bn_all_reduce", maxsize=4096))


def check_bn_group(group: Any, replicas: int) -> int:
    """``group`` validated against the number of replicas (it must divide it)."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ValueError(f"bn_replica_group must be an int >= 1, got {group!r}")
    if replicas % group:
        raise SystemConfigError(f"bn_replica_group={group} must divide the {replicas} replicas")
    return group


def replica_groups(replicas: int, group: int) -> list[list[int]]:
    """Consecutive replicas, ``group`` per group."""
    return [list(range(g, g + group)) for g in range(0, replicas, group)]


def stats_tensor(dev: SystemDevice, name: str, channels: int, ipus: list[int],
                 per_channel: int = 2) -> SystemTensor:
    """The (per_channel x channels,) float32 statistics buffer on ``ipus``, on the channel
    owners: 2 values per channel (sum and sum of squares, or the backward's two sums), 1 for
    each of the stable variant's two forward all-reduces."""
    nt = dev.system.chip.n_tiles
    n = per_channel * channels
    return dev.add_tensor(name, (n,), "float32", TileMapping.linear(n, min(nt, channels), grain=per_channel),
                          ipus=ipus)


def forward_syncs(channels: int, stable: bool) -> list[int]:
    """Values per channel of each group all-reduce of a batch norm's forward statistics:
    one of 2 (sum, sum of squares), or with PopLibs' stable algorithm two of 1 (the mean,
    then the centred sum of squares). The backward always all-reduces 2 per channel."""
    return [1, 1] if stable else [2]


def layer_cycles(system: Any, replicas: int, ipus_per_replica: int, group: int, stage: int, channels: int,
                 stable: bool, recomputed: bool) -> int:
    """One micro-batch's group all-reduce cycles of one batch norm at stage ``stage``: its
    forward's (again when the forward is recomputed) and its backward's."""
    if group <= 1:
        return 0
    fwd = sum(bn_all_reduce_cycles(system, replicas, ipus_per_replica, group, stage, channels, k)
              for k in forward_syncs(channels, stable))
    return (1 + recomputed) * fwd + bn_all_reduce_cycles(system, replicas, ipus_per_replica, group, stage,
                                                         channels)


def stats_program(dev: SystemDevice, t: SystemTensor, replicas: int, ipus_per_replica: int, group: int,
                  stage: int, name: str):
    """All groups' all-reduces of ``t`` (stage ``stage``'s IPUs), concurrently (links shared)."""
    ipus = [[k * ipus_per_replica + stage for k in g] for g in replica_groups(replicas, group)]
    dom = dev.system.domain_ipus
    if all(len({i // dom for i in g}) == 1 for g in ipus):
        return all_reduce(dev, t, groups=ipus, name=name)
    return concurrent(dev, [all_reduce(dev, t, ipus=g, name=f"{name} group {i}") for i, g in enumerate(ipus)],
                      label=name)


def bn_all_reduce_cycles(system: Any, replicas: int, ipus_per_replica: int, group: int, stage: int,
                         channels: int, per_channel: int = 2) -> int:
    """Cycles of one batch norm's group all-reduce (``per_channel`` x ``channels`` float32)
    at pipeline stage ``stage``: the program :func:`~ipukern.run_training_step` runs, costed
    (cached)."""
    if group <= 1:
        return 0
    key = (system, replicas, ipus_per_replica, group, stage, channels, per_channel)
    hit = _CACHE.get(key)
    if hit is None:
        dev = SystemDevice(system, replicas * ipus_per_replica)
        t = stats_tensor(dev, "bn", channels, [k * ipus_per_replica + stage for k in range(replicas)],
                         per_channel)
        prog = stats_program(dev, t, replicas, ipus_per_replica, group, stage, "bn")
        hit = dev.run(prog, "estimate").total_cycles
        _CACHE.put(key, hit)
    return hit
