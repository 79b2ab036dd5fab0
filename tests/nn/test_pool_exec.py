"""Max pooling with padding runs without a padded copy (``ops._max_pool_clipped``); it must
give the bits of the padded computation (taps in order over an -inf padded input) on
every shape, stride and padding, with NaN, signed zeros and infinities in the input."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukern.nn.ops import _max_pool_clipped


def _padded(v, kh, kw, sh, sw, ph, pw, Ho, Wo):
    p = np.pad(v, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    acc = None
    for i in range(kh):
        for j in range(kw):
            win = p[:, :, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw]
            acc = win.copy() if acc is None else np.maximum(acc, win)
    return acc


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), H=st.integers(1, 12), W=st.integers(1, 12),
       kh=st.integers(1, 4), kw=st.integers(1, 4), sh=st.integers(1, 3), sw=st.integers(1, 3),
       special=st.booleans())
def test_clipped_max_pool_bitwise_equals_padded(seed, H, W, kh, kw, sh, sw, special):
    rng = np.random.default_rng(seed)
    ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
    if H + 2 * ph < kh or W + 2 * pw < kw:
        return
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    v = rng.standard_normal((2, 3, H, W)).astype(np.float32)
    if special:
        pick = rng.random(v.shape)
        v[pick < 0.1] = np.nan
        v[(pick >= 0.1) & (pick < 0.2)] = -0.0
        v[(pick >= 0.2) & (pick < 0.3)] = 0.0
        v[(pick >= 0.3) & (pick < 0.35)] = -np.inf
        v[pick >= 0.95] = np.inf
    got = _max_pool_clipped(v, kh, kw, sh, sw, ph, pw, Ho, Wo)
    want = _padded(v, kh, kw, sh, sw, ph, pw, Ho, Wo)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
