"""Conv planner: choices, the grouped-conv efficiency curve, memory limits, serial splits."""
import pytest

import ipukern as ik
from ipukern.conv import ConvParams, plan_conv
from ipukern.conv.estimators import candidate_methods
from ipukern.core.tensor import split_candidates


def resnext(groups, dtype="float16", partials="float", n=8):
    return ConvParams.from_shapes((n, 128, 56, 56), (128, 128 // groups, 3, 3), padding=1,
                                  groups=groups, dtype=dtype, partials=partials)


def tflops(plan):
    return plan.params.flops / (plan.estimated_cycles / plan.machine.clock_hz) / 1e12


def test_split_candidates_are_smallest_divisors():
    assert list(split_candidates(8, 1472)) == [1, 2, 3, 4, 8]
    assert list(split_candidates(56, 100)) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 19, 28, 56]
    assert list(split_candidates(5, 3)) == [1, 2, 3]


def test_throughput_falls_as_channels_per_group_shrink():
    m = ik.GC200
    peak = m.peak_flops("float16", "float32") / 1e12
    rates = {g: tflops(plan_conv(resnext(g), m)) for g in (1, 4, 8, 16, 32, 64, 128)}
    order = [rates[g] for g in (1, 4, 8, 16, 32, 64, 128)]
    assert all(a >= b for a, b in zip(order, order[1:])), rates
    assert rates[1] > 0.5 * peak                 # dense: near the AMP peak
    assert rates[128] < 0.2 * peak               # depthwise: a small fraction of it
    assert rates[1] / rates[128] > 5


def test_methods_follow_channels_per_group():
    m = ik.GC200
    assert plan_conv(resnext(1), m).method.method == "AMP"
    assert plan_conv(resnext(32), m).method.method in ("SLIC", "AMP")   # 4 ch/group
    assert plan_conv(resnext(128), m).method.method in ("SLIC", "VMAC", "AMP")
    # fp32 has no SLIC/VMAC: the planner falls back to AMP (on combined groups) or HMAC
    assert plan_conv(resnext(128, dtype="float32"), m).method.method in ("AMP", "HMAC")


def test_half_partials_are_faster_than_float_partials():
    m = ik.GC200
    assert (plan_conv(resnext(1, partials="half"), m).estimated_cycles
            < plan_conv(resnext(1, partials="float"), m).estimated_cycles)


def test_plans_fit_and_use_the_machine():
    m = ik.GC200
    plan = plan_conv(resnext(1), m)
    assert plan.estimated_bytes_per_tile <= m.tile_budget_bytes
    assert m.n_tiles // 2 < plan.tiles_used <= m.n_tiles
    assert plan_conv(resnext(1), m) == plan              # deterministic


def test_forced_method():
    m = ik.GC200
    assert plan_conv(resnext(128), m, method="VMAC").method.method == "VMAC"
    with pytest.raises(ValueError, match="no 'SLIC' vertex candidate"):
        plan_conv(resnext(128, dtype="float32"), m, method="SLIC")


def test_serial_split_when_parallel_splits_do_not_fit():
    # BERT-Large FFN (8192 x 1024) @ (1024 x 4096) as a 1x1 conv, fp16
    p = ConvParams.from_shapes((1, 1024, 1, 8192), (4096, 1024, 1, 1), dtype="float16")
    plan = plan_conv(p, ik.GC200)
    assert plan.serial > 1
    assert plan.estimated_bytes_per_tile <= ik.GC200.tile_budget_bytes
    assert 0.3 < tflops(plan) / (ik.GC200.peak_flops("float16", "float32") / 1e12) < 1.0


def test_impossible_conv_names_its_requirement():
    p = ConvParams.from_shapes((64, 1024, 112, 112), (1024, 1024, 3, 3), padding=1)
    with pytest.raises(ik.TileMemoryError, match=r"smallest busiest-tile requirement found is [\d,]+ B") as e:
        plan_conv(p, ik.GC200)
    assert e.value.requested > e.value.budget == ik.GC200.tile_budget_bytes


def test_smaller_machine_needs_more_per_tile():
    p = resnext(1)
    small = ik.GC200.replace(n_tiles=64, name="GC200/64")
    big = plan_conv(p, ik.GC200)
    sm = plan_conv(p, small)
    assert sm.tiles_used <= 64 and sm.estimated_cycles > 10 * big.estimated_cycles


@pytest.mark.parametrize("shape, w, kw", [
    ((8, 128, 56, 56), (128, 128, 3, 3), dict(padding=1)),
    ((8, 128, 56, 56), (128, 4, 3, 3), dict(padding=1, groups=32)),
    ((8, 128, 56, 56), (128, 1, 3, 3), dict(padding=1, groups=128)),
    ((1, 512, 7, 7), (512, 512, 3, 3), dict(padding=1)),
    ((32, 64, 112, 112), (64, 64, 3, 3), dict(padding=1, stride=2)),
    ((1, 1024, 1, 8192), (4096, 1024, 1, 1), dict()),          # BERT FFN as a conv: serial
])
def test_planner_estimate_matches_the_built_program(shape, w, kw):
    """The planner scores closed forms; the program is costed from its real copy tables and
    vertices. They must agree closely, or the planner optimises the wrong thing. (They can
    differ by a few percent: the planner costs the largest block on every axis, while the
    slowest real vertex can be a slightly smaller block whose outputs split worse over the
    6 workers.)"""
    prof = ik.estimate_conv2d(shape, w, dtype="float16", **kw)
    planned = prof.info["planner_estimate_cycles"]
    assert abs(planned - prof.total_cycles) <= 0.05 * prof.total_cycles


# --------------------------------------------------------------------------- hardening
def test_layers_larger_than_the_chip_are_rejected_before_any_search():
    # (16, 2**30) @ (2**30, 16): 2**30 in-channels used to enumerate ~2**29 HMAC
    # groupings (about a minute); the tensors alone exceed the chip, so it fails at once
    p = ConvParams.from_shapes((1, 2**30, 1, 16), (16, 2**30, 1, 1), dtype="float16")
    with pytest.raises(ik.TileMemoryError, match=r"requirement found is [\d,]+ B .*spread evenly") as e:
        plan_conv(p, ik.GC200)
    assert e.value.requested > e.value.budget == ik.GC200.tile_budget_bytes
    # sizes beyond int32 are refused by the shape checks before planning
    with pytest.raises(ValueError, match="must be between"):
        ik.estimate_matmul((16, 99999999999999), (99999999999999, 16))


def test_hmac_groupings_are_the_distinct_in_group_counts():
    """HMAC tries the smallest icpg for each distinct number of in-groups, enumerated in
    O(sqrt(C)) instead of looping over every channel count."""
    def brute(ci, grain):
        seen, out = set(), []
        rounded = -(-ci // grain) * grain
        for icpg in range(grain, rounded + 1, grain):
            n_in = -(-rounded // icpg)
            if n_in not in seen:
                seen.add(n_in)
                out.append(icpg)
        return out

    for dt, grain in (("float16", 2), ("float32", 1)):
        for ci in (1, 2, 3, 7, 64, 97, 1000, 4099):
            got = [m.in_chans_per_group for m in candidate_methods(ik.GC200, dt, dt, ci, 4, 1, 1)
                   if m.method == "HMAC"]
            assert sorted(got) == brute(ci, grain)
    huge = [m for m in candidate_methods(ik.GC200, "float16", "float32", 2**31, 16, 1, 1)
            if m.method == "HMAC"]
    assert len(huge) <= 2 * 2**15 + 2                     # 2 sqrt(2**30) distinct counts


def test_forced_method_without_a_valid_split_says_why():
    # dilated SLIC and VMAC with more out-channels than tiles have no split at all; the
    # error used to be a TileMemoryError saying the requirement was 0 B
    p = ConvParams.from_shapes((1, 16, 16, 16), (16, 1, 3, 3), groups=16, dilation=2, padding=2,
                               dtype="float16")
    with pytest.raises(ValueError, match="no valid split .* SLIC needs stride_w <= 2 and no dilation"):
        plan_conv(p, ik.GC200, method="SLIC", expand_dims="")
    # expandDims over both kernel dims leaves a 1x1 undilated conv, which SLIC can run
    assert plan_conv(p, ik.GC200, method="SLIC").expand_dims == "hw"
    p = ConvParams.from_shapes((1, 16, 16, 16), (16, 16, 3, 3), dtype="float16")
    with pytest.raises(ValueError, match="VMAC computes one output channel per group per tile") as e:
        plan_conv(p, ik.GC200.replace(n_tiles=4), method="VMAC")
    assert "0 B" not in str(e.value)
