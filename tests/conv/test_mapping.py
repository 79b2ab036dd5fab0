"""Column-split conv mappings (``conv.mapping``) equal the general per-tile builders
interval for interval (tile, element start, count, byte offset), on random shapes and
splits, and the input's host scatter still places every element where the mapping says."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from ipukern.conv import (ConvParams, ConvPlan, Split, build, build_conv_program, channel_tile_pairs,
                          periodic_starts, runs_per_tile)
from ipukern.core.tensor import LazyTileMapping, TileMapping
from ipukern.nn.layout import Layout, _count_segments, lazy_layout
from ipukern.nn.ops import param_memory
from ipukern.nn.tile_reduce import _pair_keys
from ipukern.conv.estimators import candidate_methods
from ipukern.machine import GC200


def make_plan(p, split, serial=1):
    amp = next(c for c in candidate_methods(GC200, p.dtype, p.partials, p.in_per_group,
                                            p.out_per_group, p.kernel_w, p.stride[1])
               if c.method == "AMP")
    return ConvPlan(params=p, machine=GC200, method=amp, split=split, serial=serial, bias=False,
                    estimated_cycles=0, estimated_bytes_per_tile=0)


def _mappings(plan, general: bool, monkeypatch):
    with monkeypatch.context() as mp:
        if general:
            mp.setattr(build, "column_split_input", lambda *a: None)
            mp.setattr(build, "column_split_output", lambda *a: None)
        prog = build_conv_program(plan)
        return prog, [(t.mapping.tile, t.mapping.start, t.mapping.count, t.offset)
                      for t in (prog.x, prog.y)]


@st.composite
def conv_and_split(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin = groups * draw(st.integers(1, 5))
    cout = groups * draw(st.integers(1, 5))
    k = draw(st.sampled_from([1, 1, 3, 5]))
    stride = draw(st.sampled_from([1, 2, 3]))
    pad = draw(st.integers(0, k // 2))
    h, w = draw(st.integers(k, 12)), draw(st.integers(max(k, 3), 14))
    n = draw(st.integers(1, 4))
    p = ConvParams.from_shapes((n, cin, h, w), (cout, cin // groups, k, k), stride=stride,
                               padding=pad, groups=groups, dtype="float32", partials="float32")
    oh, ow = p.out_h, p.out_w
    assume(ow >= 2)
    split = Split(groups=draw(st.integers(1, groups)), in_chans=draw(st.integers(1, cin // groups)),
                  batch=draw(st.integers(1, n)), rows=draw(st.integers(1, oh)),
                  cols=draw(st.integers(2, ow)), out_chans=draw(st.integers(1, cout // groups)))
    assume(split.n_tiles <= 1472)
    serial = draw(st.integers(1, 3))
    assume(serial <= -(-(cout // groups) // split.out_chans))
    return p, split, serial


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv_and_split())
def test_column_split_mappings_equal_general_builders(monkeypatch, case):
    p, split, serial = case
    plan = make_plan(p, split, serial)
    fast_prog, fast = _mappings(plan, False, monkeypatch)
    _, ref = _mappings(plan, True, monkeypatch)
    for got, want, name in zip(fast, ref, "xy"):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} of {p.describe()} {split}")
    # the scatter (built separately on the fast path) places the NCHW input as the mapping
    for t in (fast_prog.x, fast_prog.y):
        _check_recorded(t.mapping, t.shape)
    x = np.random.default_rng(0).standard_normal(p.input_shape).astype(np.float32)
    w = np.zeros(p.weight_shape, np.float32)
    fast_prog.write_inputs(x, w)
    np.testing.assert_array_equal(fast_prog.device.read(fast_prog.x), x.transpose(0, 2, 1, 3))


def _check_recorded(m, shape):
    """What the column-split builders record equals a scan of the intervals: elements per
    tile, the channel-tile pairs of an NCHW output, and the periodic starts."""
    plain = TileMapping(m.n_elems, m.tile, m.start, m.count)
    np.testing.assert_array_equal(m.elems_per_tile(GC200.n_tiles), plain.elems_per_tile(GC200.n_tiles))
    C, inner = shape[1], shape[2] * shape[3]
    pairs = channel_tile_pairs(m, C, inner, GC200.n_tiles)
    if pairs is not None:
        np.testing.assert_array_equal(pairs, _pair_keys(Layout(shape, "float32", plain), C, inner,
                                                        GC200.n_tiles))
    runs = runs_per_tile(m, GC200.n_tiles)
    if runs is not None:
        period, n_runs = runs
        np.testing.assert_array_equal(n_runs, np.bincount(m.tile, minlength=GC200.n_tiles))
        assert (m.start // period == (m.start + m.count - 1) // period).all()
        # the per-channel parameter copies counted from them equal the count over intervals
        for c, i in ((C, inner), (1, inner), (3, shape[3]), (2, 1)):
            got = param_memory(GC200, Layout(shape, "float32", m), c, i, 2)
            want = param_memory(GC200, Layout(shape, "float32", plain), c, i, 2)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    per = periodic_starts(m)
    if per is None:
        return
    P, X = per
    assert m.n_elems % P == 0 and (np.diff(X) > 0).all() and X[0] == 0 and X[-1] < P
    want = (np.arange(m.n_elems // P)[:, None] * P + X[None, :]).ravel()
    np.testing.assert_array_equal(m.start, want)


def _plain(lay):
    """The same layout with a mapping that records no periodic starts."""
    m = lay.mapping
    return Layout(lay.shape, lay.dtype, TileMapping(m.n_elems, m.tile, m.start, m.count), lay.perm)


def _layouts(p, split, serial=1):
    prog = build_conv_program(make_plan(p, split, serial))
    return (Layout(p.input_shape, p.dtype, prog.x.mapping, perm=(0, 2, 1, 3)),
            Layout(p.output_shape, p.dtype, prog.y.mapping))


def _draw_split(draw, p, cols_min=2):
    return Split(batch=draw(st.integers(1, p.batch)), rows=draw(st.integers(1, p.out_h)),
                 cols=draw(st.integers(cols_min, p.out_w)),
                 out_chans=draw(st.integers(1, p.out_channels)))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_periodic_copy_count_equals_materialised(data):
    """Rearrangement copy counts from the recorded periodic starts equal the count over
    the materialised starts, between every kind of pair (conv output -> next conv's
    input, output -> output, input -> input), column-split or not."""
    draw = data.draw
    n, c, h, w = (draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 9)),
                  draw(st.integers(2, 12)))
    k, s = draw(st.sampled_from([(1, 1), (3, 1), (3, 2)]))
    p1 = ConvParams.from_shapes((n, c, h, w), (draw(st.integers(1, 6)), c, k, k), stride=s,
                                padding=k // 2, dtype="float16", partials="float32")
    assume(p1.out_w >= 2)
    p2 = ConvParams.from_shapes(p1.output_shape, (draw(st.integers(1, 6)), p1.out_channels, 1, 1),
                                dtype="float16", partials="float32")
    p3 = ConvParams.from_shapes((n, c, h, w), p1.weight_shape, stride=s, padding=k // 2,
                                dtype="float16", partials="float32")
    x1, y1 = _layouts(p1, _draw_split(draw, p1, draw(st.sampled_from([1, 2]))))
    x2, _ = _layouts(p2, _draw_split(draw, p2, draw(st.sampled_from([1, 2]))))
    x3, y3 = _layouts(p3, _draw_split(draw, p3, draw(st.sampled_from([1, 2]))))
    for a, b in ((y1, x2), (y1, y3), (x1, x3), (x2, y1)):
        want = _count_segments(_plain(a), _plain(b))
        assert _count_segments(a, b) == want
        assert _count_segments(_plain(a), b) == want == _count_segments(a, _plain(b))
    # equality decided from the recorded starts agrees with comparing the intervals
    y1b, y3b = (Layout(y.shape, y.dtype, _plain(y).mapping) for y in (y1, y3))
    for a, b in ((y1, y3), (y1, y1b), (y1b, y3), (y3b, y3)):
        want = _plain(a).same_as(_plain(b))
        assert a.same_as(b) == want == b.same_as(a)


def test_lazy_input_mapping_is_built_only_when_read():
    """A column-split conv's input layout answers per-tile bytes and periodic starts from
    the split; reading its intervals or offsets builds the real ones."""
    p = ConvParams.from_shapes((2, 4, 14, 14), (8, 4, 1, 1), dtype="float16", partials="float32")
    prog = build_conv_program(make_plan(p, Split(batch=2, rows=3, cols=7, out_chans=4)))
    lazy = prog.input_mapping()
    assert isinstance(lazy, LazyTileMapping)
    lay = lazy_layout(p.input_shape, p.dtype, lazy, (0, 2, 1, 3), lambda: prog.x.offset)
    per_tile = lay.bytes_per_tile(GC200.n_tiles)
    assert periodic_starts(lazy) is not None and "x" not in prog._built
    real = prog.x.mapping
    np.testing.assert_array_equal(per_tile, real.elems_per_tile(GC200.n_tiles) * 2)
    for f in ("tile", "start", "count"):
        np.testing.assert_array_equal(getattr(lazy, f), getattr(real, f))
    np.testing.assert_array_equal(lay.offsets, prog.x.offset)


@pytest.mark.parametrize("split", [Split(batch=2, rows=3, cols=7, out_chans=4),
                                   Split(in_chans=2, batch=1, rows=2, cols=3, out_chans=2)])
def test_column_split_cases_take_the_fast_path(monkeypatch, split):
    """A ResNet-50-like 1x1 conv split by columns: both mappings come from the column-split
    builders (the output's only without an input-channel split)."""
    p = ConvParams.from_shapes((2, 4, 14, 14), (8, 4, 1, 1), dtype="float16", partials="float32")
    used = {}
    for name in ("column_split_input", "column_split_output"):
        fn = getattr(build, name)
        monkeypatch.setattr(build, name, lambda *a, fn=fn, name=name: used.setdefault(name, fn(*a)))
    prog = build_conv_program(make_plan(p, split))
    assert prog.x.n_elems == p.batch * p.in_channels * p.in_h * p.in_w and prog.y.n_elems
    assert used["column_split_input"] is not None
    assert (used["column_split_output"] is None) == (split.in_chans > 1)
