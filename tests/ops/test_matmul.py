"""matmul on the simulated IPU against NumPy (float64 on the same values).

fp16 bound: |out - ref| <= 2^-11 * |ref| + (2^-11 if half partials) * sum|a*b| + 1e-6 * sum|a*b|
(one fp16 rounding of the result, an optional fp16 rounding of the per-tile partials,
fp32 accumulation), see tests/test_conv.py.
"""
import numpy as np
import pytest

import ipukern as ik

U = 2.0 ** -11


def check(sa, sb, dtype="float32", partials="float", seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    run = ik.matmul(a, b, partials=partials)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    mag = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    out = run.output.astype(np.float64)
    assert run.output.shape == ref.shape and run.output.dtype == np.dtype(dtype)
    if dtype == "float32":
        assert np.abs(out - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-30)
        assert np.all(np.abs(out - ref) <= 1e-5 * mag + 1e-30)
    else:
        bound = U * np.abs(ref) + ((U if partials == "half" else 0) + 1e-6) * mag
        assert np.all(np.abs(out - ref) <= bound + 1e-7)
    return run


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("sa, sb", [
    ((64, 64), (64, 64)),          # square
    ((300, 24), (24, 17)),         # tall
    ((5, 40), (40, 333)),          # wide
    ((37, 1), (1, 41)),            # K = 1
    ((1, 96), (96, 50)),           # M = 1
    ((31, 53), (53, 29)),          # primes
    ((3, 17, 13), (3, 13, 7)),     # batched
    ((2, 1, 9, 8), (1, 3, 8, 5)),  # broadcast batch dims
    ((4, 16, 8), (8, 9)),          # batch on a only (folded into M)
    ((16, 8), (4, 8, 9)),          # batch on b only (folded into N)
    ((640, 512), (512, 96)),       # big K: a K split with a cross-tile reduction
])
def test_matmul_matches_numpy(sa, sb, dtype):
    check(sa, sb, dtype)


def test_half_partials():
    check((128, 256), (256, 64), "float16", partials="half")


def test_estimate_equals_execute():
    run = check((96, 200), (200, 48), "float16")
    est = ik.estimate_matmul((96, 200), (200, 48), dtype="float16")
    assert est.total_cycles == run.profile.total_cycles
    assert est.info["op"] == "matmul"


def test_many_small_matmuls_one_per_tile_without_exchange():
    prof = ik.estimate_matmul((1472, 128, 16), (1472, 16, 16), dtype="float16")
    plan_tiles = prof.info["tiles_used"]
    assert plan_tiles == 1472
    assert "groups 1472 x in-chans 1 x batch 1 x rows 1 x cols 1 x out-chans 1" in prof.info["plan"]
    assert prof.bytes_exchanged == 0
    assert all(s.exchange_cycles == 0 for s in prof.supersteps)


def test_bert_large_ffn_estimate_uses_serial_splits():
    prof = ik.estimate_matmul((8192, 1024), (1024, 4096), dtype="float16")
    assert prof.info["serial_splits"] > 1
    assert prof.memory.max_bytes <= ik.GC200.tile_bytes
    assert 0.3 < prof.utilisation < 1.0
    # four times larger still plans (estimate mode never allocates tensor memory)
    big = ik.estimate_matmul((32768, 1024), (1024, 4096), dtype="float16")
    assert big.total_cycles > 3 * prof.total_cycles


@pytest.mark.parametrize("sa, sb, err, match", [
    ((4, 5), (6, 7), ValueError, "inner dimensions differ"),
    ((), (4, 7), ValueError, "at least 1-D"),
    ((2, 4, 5), (3, 5, 7), ValueError, "do not broadcast"),
])
def test_bad_shapes(sa, sb, err, match):
    with pytest.raises(err, match=match):
        ik.matmul(np.zeros(sa, np.float32), np.zeros(sb, np.float32))
    with pytest.raises(err, match=match):
        ik.estimate_matmul(sa, sb)


def test_bad_dtypes():
    with pytest.raises(TypeError, match="unsupported dtype"):
        ik.matmul(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(TypeError, match="same dtype"):
        ik.matmul(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float16))
    with pytest.raises(TypeError, match="unsupported dtype"):
        ik.estimate_matmul((2, 2), (2, 2), dtype="int8")


# --------------------------------------------------------------------------- orientation
def conv_cycles(g, k, cols, out, dtype="float16"):
    return ik.estimate_conv2d((1, g * k, 1, cols), (g * out, k, 1, 1), groups=g,
                              dtype=dtype).total_cycles


@pytest.mark.parametrize("sa, sb, orientation", [
    # one tall, narrow A per tile: streaming A's 2048 rows through a 16-output AMP 1x1
    # vertex beats 16 columns against 2048 output channels (2.4x)
    ((1472, 2048, 16), (1472, 16, 16), "(B^T A^T)^T"),
    # one row of A against a square B: B^T as weights would stream a single position
    ((1, 4096), (4096, 4096), "A@B"),
])
def test_both_orientations_are_planned_and_the_cheaper_runs(sa, sb, orientation):
    g = sa[0] if len(sa) == 3 else 1
    m, k, n = sa[-2], sa[-1], sb[-1]
    prof = ik.estimate_matmul(sa, sb, dtype="float16")
    assert prof.info["orientation"] == orientation
    direct, transposed = conv_cycles(g, k, n, m), conv_cycles(g, k, m, n)
    chosen, other = (transposed, direct) if orientation != "A@B" else (direct, transposed)
    assert prof.total_cycles == chosen < other
    assert ("out-chans=N" in prof.info["mapping"]) == (orientation != "A@B")


@pytest.mark.parametrize("sa, sb, dtype", [
    ((1000, 16), (16, 8), "float32"), ((1000, 16), (16, 8), "float16"),      # plain
    ((4, 256, 16), (4, 16, 16), "float32"),                                 # batched (groups)
    ((2, 700, 16), (16, 16), "float32"),                                    # a's batch folded
])
def test_transposed_orientation_matches_numpy_and_its_estimate(sa, sb, dtype):
    run = check(sa, sb, dtype)
    assert run.profile.info["orientation"] == "(B^T A^T)^T"
    assert ik.estimate_matmul(sa, sb, dtype=dtype).total_cycles == run.profile.total_cycles


@pytest.mark.parametrize("sa, sb", [((64, 512), (512, 8)), ((8, 512), (512, 64)), ((4, 32, 16), (4, 16, 96)),
                                    ((128, 64), (64, 128))])
def test_one_matmul_as_conv_rule(sa, sb):
    """ik.estimate_matmul runs the orientation matmul_conv picks, among matmul_convs'; a
    network's forward plans the direct one (matmul_conv_params)."""
    from ipukern.nn.convops import matmul_params
    from ipukern.ops.matmul import matmul_conv, matmul_conv_params, matmul_convs
    p, transposed = matmul_conv(sa, sb, "float16", "float", machine=ik.GC200)
    convs = matmul_convs(sa, sb, "float16", "float")
    assert p == convs[int(transposed)] and len(convs) == (1 if sa[-2] == sb[-1] else 2)
    prof = ik.estimate_matmul(sa, sb, dtype="float16")
    assert prof.info["orientation"] == ("(B^T A^T)^T" if transposed else "A@B")
    assert matmul_params(sa, sb, "float16", "float") == matmul_conv_params(sa, sb, "float16") == convs[0]
