"""Global average pools planned as popops::reduce (issue 31): vertex costs by hand from
the PopLibs estimator, bit-identical execution, and the pool's share of EfficientNet."""
from __future__ import annotations

import numpy as np
import pytest

import ipukern as ik
from ipukern.machine import GC200
from ipukern.nn import cycles
from ipukern.nn.layout import Resident, linear_layout
from ipukern.nn.ops import pool_plan


def test_continuous_reduce_matches_the_estimator_by_hand():
    # getCycleEstimateReduceAllRegionsContinuous: outputs * (partials // min(acc, 64-bit
    # path)) + 2 (odd partials) + 12 * outputs + 10 + 7
    assert int(cycles.continuous_reduce_cycles(GC200, 3, 100, "float16")) == 3 * 25 + 36 + 17
    assert int(cycles.continuous_reduce_cycles(GC200, 1, 7, "float32")) == 3 + 2 + 12 + 17
    assert int(cycles.continuous_reduce_cycles(GC200, 0, 7, "float32")) == 0


def test_tile_reduce_splits_few_outputs_over_the_workers():
    # 2 runs of 100 halves on 6 workers: each run in 3 pieces of 34 (1 piece per worker),
    # then 1 output of 3 float32 pieces per worker
    first = 6 * (1 * (34 // 4) + 0 + 12 + 17)
    second = 6 * (1 * (3 // 2) + 2 + 12 + 17)
    assert int(cycles.tile_reduce_cycles(GC200, 2, 100, "float16")) == first + second
    # 12 runs: 2 per worker, no split
    assert int(cycles.tile_reduce_cycles(GC200, 12, 50, "float16")) == 6 * (2 * 12 + 2 * 0 + 24 + 17)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reduce_pool_is_bit_identical_to_the_planes_path(dtype):
    nt = GC200.n_tiles
    shape = (2, 24, 14, 14)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    src = linear_layout(shape, dtype, nt)          # spread over tiles, planes split
    red = pool_plan(GC200, shape, dtype, "avg", None, None, None, src=src)
    planes = pool_plan(GC200, shape, dtype, "avg", None, None, None)
    assert red.method == "popops::reduce" and planes.method == "SumPooling"

    def run(plan):
        from ipukern.nn.layout import Rearrangement
        r = Rearrangement(GC200, src, plan.inputs[0])
        return plan.run([Resident.from_host(src, nt, x)], [r], {}).to_host()
    a, b = run(red), run(planes)
    assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    assert red.cycles < planes.cycles


def test_no_pool_dominates_efficientnet_b0():
    prof = ik.estimate_network(ik.models.efficientnet_b0(), batch=1)
    pools = [r["cycles"] for r in prof.layers if r["op"] in ("global_avgpool", "avgpool")]
    assert pools and max(pools) < 0.05 * prof.total_cycles


def test_g16_efficientnet_replaces_depthwise_by_groups_of_16():
    from ipukern.nn import layers as L
    net = ik.models.efficientnet_b4_g16()
    assert net.name == "efficientnet_b4_g16" and "efficientnet_b4_g16" in ik.models.MODELS
    convs = [n.layer for n in net.nodes.values()
             if isinstance(getattr(n, "layer", None), L.Conv2d) and n.layer.groups > 1]
    assert len(convs) == 31        # every MBConv block of B4 but one of 24 channels (1 group)
    for c in convs:
        assert c.in_channels // c.groups == 16
    with pytest.raises(ValueError, match="group_size"):
        from ipukern.nn.zoo_cnn import _efficientnet
        _efficientnet("b0", None, 10, group_size=12)
