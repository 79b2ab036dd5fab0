"""plan.candidates(k): the best plan of each vertex method, ranked, the chosen one first."""
from __future__ import annotations

import pytest

import ipukern as ik
from ipukern.cli import main
from ipukern.conv import rank_candidates


@pytest.mark.parametrize("x, w, groups", [
    ((8, 128, 56, 56), (128, 4, 3, 3), 32),      # ResNeXt cpg 4: SLIC wins over AMP
    ((2, 64, 28, 28), (64, 64, 3, 3), 1),        # dense: AMP
    ((4, 48, 14, 14), (48, 1, 5, 5), 48),        # depthwise 5x5
])
def test_first_candidate_is_the_plan_and_the_rest_are_slower(x, w, groups):
    plan = ik.plan_conv2d(x, w, padding=w[-1] // 2, groups=groups)
    cands = plan.candidates(4)
    assert 1 <= len(cands) <= 4
    best = cands[0]
    assert best.fits and best.method == plan.method and best.split == plan.split
    assert best.estimated_cycles == plan.estimated_cycles
    fitting = [c for c in cands if c.fits]
    keys = [(c.serial > 1, c.estimated_cycles) for c in fitting]
    assert keys == sorted(keys)
    assert len({c.method for c in cands}) == len(cands)        # one entry per vertex method
    for c in fitting:
        forced = ik.plan_conv2d(x, w, padding=w[-1] // 2, groups=groups, method=c.method.method)
        assert forced.estimated_cycles <= c.estimated_cycles   # the method's own best or better
        assert c.method.label() in c.describe() and f"{c.estimated_cycles:,}" in c.describe()


def test_methods_that_fit_nowhere_are_listed_with_their_requirement():
    """A depthwise layer cannot use serial out-channel slices: on 16 tiles nothing fits,
    plan_conv raises, and the candidates say what each method would need."""
    small = ik.GC200.replace(n_tiles=16, name="GC200-16")
    params = ik.ConvParams.from_shapes((2, 64, 112, 112), (64, 1, 3, 3), padding=1, groups=64,
                                       dtype="float16")
    with pytest.raises(ik.TileMemoryError):
        ik.plan_conv2d(params.input_shape, params.weight_shape, padding=1, groups=64,
                       machine=small)
    cands = rank_candidates(params, small, k=50)
    assert cands and not any(c.fits for c in cands)
    need = [c.estimated_bytes_per_tile for c in cands]
    assert need == sorted(need) and need[0] > small.tile_budget_bytes
    assert all(c.estimated_cycles is None and "does not fit" in c.describe() for c in cands)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_k(k):
    plan = ik.plan_conv2d((1, 16, 8, 8), (16, 4, 3, 3), padding=1, groups=4)
    with pytest.raises(ValueError, match="k must be a positive int"):
        plan.candidates(k)


def test_cli_lists_candidates(capsys):
    assert main(["conv", "--shape", "1,32,14,14", "--cpg", "4", "--gpu", "none",
                 "--candidates", "3"]) == 0
    out = capsys.readouterr().out
    block = out.split("planner candidates")[1].splitlines()[1:4]
    assert len(block) == 3 and all("cycles" in line or "does not fit" in line for line in block)
