"""The worked examples in ipukern/examples/ run and check themselves (small sizes)."""
import numpy as np
import pytest

import ipukern as ik

from ipukern.examples import allreduce, custom_matmul_vertex, stencil


def test_stencil_over_all_tiles_equals_numpy():
    r = stencil.main((92, 130), 3, grid=(46, 32), verbose=False)   # blocks of 2 x 4..5 (+ halo)
    assert r["exact"]                                     # bit-exact, not just close
    g = r["graph"]
    assert (g.tensors["a"].grid.gy, g.tensors["a"].grid.gx) == (46, 32)
    prof = r["profile"]
    assert len(prof.supersteps) == 3
    for s in prof.supersteps:                             # compute vs exchange per superstep
        assert s.user_estimate and s.compute_cycles == stencil.blur_cycles(ik.TileShape((4, 7)), None)
        assert s.exchange_cycles > 0 and s.bytes_exchanged > 0 and s.tiles_computing == 1472
    assert "[user estimate]" in prof.summary()


def test_stencil_numpy_baseline_is_the_same_blur(rng):
    img = rng.random((33, 47), dtype=np.float32)
    nb = stencil.NumpyBlur(img)
    nb.step()
    nb.step()
    np.testing.assert_array_equal(nb.result, stencil.blur_reference(img, 2))


@pytest.mark.parametrize("n, p", [(1000, 64), (5, 7), (64, None)])
def test_allreduce_example_cycles_are_explained(n, p):
    r = allreduce.main(n, p, verbose=False)
    assert r["exact"]
    assert r["cycles"] == r["expected_cycles"]


def test_custom_matmul_vertex_swaps_in():
    r = custom_matmul_vertex.main(64, 32, 48, grid=(4, 6), verbose=False)
    vec, amp = r["matmul_vector"], r["matmul_amp"]
    np.testing.assert_allclose(vec["result"], amp["result"], rtol=1e-5, atol=1e-5)
    pv, pa = vec["profile"], amp["profile"]
    # same program shape and exchange; only the vertex's user estimate differs
    assert [s.exchange_cycles for s in pv.supersteps] == [s.exchange_cycles for s in pa.supersteps]
    assert pv.supersteps[1].compute_cycles == custom_matmul_vertex.vector_cycles(
        ik.TileShape((16, 32)), ik.TileShape((32, 8)), ik.TileShape((16, 8)))
    assert pa.supersteps[1].compute_cycles < pv.supersteps[1].compute_cycles
    assert pa.supersteps[1].user_estimate and pa.flops == 2 * 64 * 32 * 48


def test_custom_vertex_swapped_into_builtin_matmul():
    runs = custom_matmul_vertex.swap_into_builtin(96, 64, 40, verbose=False)
    builtin, amp, vec = runs["built-in"], runs["matmul_amp"], runs["matmul_vector"]
    assert amp.plan == builtin.plan == vec.plan           # same plan, only the vertex differs
    def steps(r):
        return [s for s in r.profile.supersteps if s.name.startswith("conv")][0]
    assert not steps(builtin).user_estimate and steps(amp).user_estimate
    assert steps(vec).compute_cycles > steps(amp).compute_cycles
    # exchanges and reductions are the library's, identical in all three programs
    for r in (amp, vec):
        assert [s.exchange_cycles for s in r.profile.supersteps] == \
               [s.exchange_cycles for s in builtin.profile.supersteps]
