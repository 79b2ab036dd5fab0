"""Profile views: tile activity, the Chrome/Perfetto trace, and profile diffs."""
from __future__ import annotations

import json
import numbers

import numpy as np
import pytest

import ipukern as ik
from ipukern.core.profile import TILE_GROUP, tile_activity
from ipukern.core.views import diff_profiles, format_diff, load_profile_dict, to_trace

SMALL = ik.GC200.replace(n_tiles=70)        # three tile groups, the last one partial


# --------------------------------------------------------------------------- trace format
_PHASES = {"X", "B", "E", "i", "I", "C", "M", "b", "e", "n", "s", "t", "f", "P", "O", "N", "D"}


def validate_trace(trace: dict) -> None:
    """Check a JSON-object trace against the trace-event format (Google's "Trace Event
    Format" document, as read by chrome://tracing and ui.perfetto.dev)."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    json.dumps(trace, allow_nan=False)                   # strict JSON: no NaN / inf
    open_spans: dict[tuple, list[tuple[float, float]]] = {}
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in _PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index", "process_labels"), e
            assert isinstance(e["args"], dict) and e["args"], e
            continue
        assert isinstance(e["ts"], numbers.Real) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], numbers.Real) and e["dur"] >= 0, e
            # complete events on one thread must nest (no partial overlap)
            start, end = e["ts"], e["ts"] + e["dur"]
            stack = open_spans.setdefault((e["pid"], e["tid"]), [])
            while stack and stack[-1][1] <= start + 1e-9:
                stack.pop()
            if stack:
                assert end <= stack[-1][1] + 1e-9, f"{e} overlaps its parent {stack[-1]}"
            stack.append((start, end))
        if e["ph"] == "C":
            assert all(isinstance(v, numbers.Real) for v in e["args"].values()), e
        if "args" in e:
            assert isinstance(e["args"], dict)


VIEWS_CONV = ((4, 64, 28, 28), (64, 4, 3, 3))


@pytest.fixture(scope="module")
def conv_profile():
    # a plan that stays the same with the datasheet exchange (test_diff_round_trip_through_json)
    return ik.estimate_conv2d(*VIEWS_CONV, padding=1, groups=16)


def test_trace_is_valid_and_covers_every_superstep(conv_profile, tmp_path):
    path = tmp_path / "trace.json"
    trace = conv_profile.to_trace(path)
    validate_trace(trace)
    assert json.loads(path.read_text()) == trace
    ev = trace["traceEvents"]
    steps = [e for e in ev if e["ph"] == "X" and e["tid"] == 0 and e["name"].startswith("#")]
    assert len(steps) == len(conv_profile.supersteps)
    clock = conv_profile.machine.clock_hz
    for e, s in zip(steps, conv_profile.supersteps):
        assert e["args"]["cycles"] == s.total_cycles
        assert e["dur"] == pytest.approx(s.total_cycles / clock * 1e6)
    end = steps[-1]["ts"] + steps[-1]["dur"]
    assert end == pytest.approx(conv_profile.seconds * 1e6)
    # one row per group of 32 tiles, named by its tiles
    names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    n_groups = -(-conv_profile.machine.n_tiles // TILE_GROUP)
    assert len(names) == n_groups + 1 and names[1] == "tiles 0-31" and names[n_groups] == "tiles 1440-1471"
    # each group's compute is at most the superstep's (the slowest tile's), and one group hits it
    comp = [s for s in conv_profile.supersteps if s.compute_cycles][0]
    gcomp = [e for e in ev if e["ph"] == "X" and e["tid"] > 0 and e["name"] == "compute"
             and e["args"]["step"] == comp.name]
    assert max(e["args"]["cycles"] for e in gcomp) == comp.compute_cycles
    assert sum(e["args"]["tiles_computing"] for e in gcomp) == comp.tiles_computing


def test_trace_from_the_json_form_equals_trace_from_the_profile(conv_profile):
    d = json.loads(conv_profile.to_json())
    assert to_trace(d) == conv_profile.to_trace()


def test_validator_rejects_overlapping_spans():
    bad = {"traceEvents": [
        {"name": "a", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 10},
        {"name": "b", "ph": "X", "pid": 1, "tid": 0, "ts": 5, "dur": 10}]}
    with pytest.raises(AssertionError, match="overlaps"):
        validate_trace(bad)


# --------------------------------------------------------------------------- activity
@ik.tile_function(per_element_cycles=1)
def inc(x):
    for i in range(x.shape[0]):
        x[i] += 1


def test_tile_activity_groups_and_imbalance():
    c = np.zeros(70, np.int64)
    c[:10] = 100
    c[40] = 300
    x = np.zeros(70, np.int64)
    x[65] = 7
    act = tile_activity(c, x, x > 0, 100, 70)
    assert act["group_compute_cycles"] == (100, 300, 0)
    assert act["group_tiles_computing"] == (10, 1, 0)
    assert act["group_exchange_cycles"] == (0, 0, 107)
    assert act["tiles_exchanging"] == 1
    assert act["compute_mean_cycles"] == pytest.approx(1300 / 11)


def test_records_carry_tile_activity(conv_profile):
    for s in conv_profile.supersteps:
        if s.compute_cycles:
            assert s.compute_imbalance >= 1.0
            assert max(s.group_compute_cycles) == s.compute_cycles
            assert sum(s.group_tiles_computing) == s.tiles_computing
        if s.exchange_cycles:
            assert max(s.group_exchange_cycles) == s.exchange_cycles and s.tiles_exchanging > 0
    act = conv_profile.activity()
    assert [a["tiles_computing"] + a["tiles_idle"] for a in act] == [1472] * len(act)
    text = conv_profile.summary()
    assert "tile activity:" in text and "imbal" in text


def test_user_program_activity_counts_idle_tiles():
    g = ik.Graph(SMALL)
    t = g.linear_tensor("t", 30, tiles=range(30))
    prof = g.run(g.program([ik.Superstep("inc", compute=g.compute(inc, t))]), "estimate")
    s = prof.supersteps[0]
    assert s.tiles_computing == 30 and prof.activity()[0]["tiles_idle"] == 40
    assert s.group_tiles_computing == (30, 0, 0) and s.compute_imbalance == 1.0


# --------------------------------------------------------------------------- diff
def test_diff_round_trip_through_json(conv_profile, tmp_path):
    slow = ik.estimate_conv2d(*VIEWS_CONV, padding=1, groups=16,
                              machine=ik.GC200.with_datasheet_exchange())
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(conv_profile.to_json())
    pb.write_text(slow.to_json())
    d = diff_profiles(load_profile_dict(pa), load_profile_dict(pb))
    assert d == diff_profiles(conv_profile, slow)           # file round trip loses nothing
    t = d["totals"]["total_cycles"]
    assert (t["a"], t["b"], t["delta"]) == (conv_profile.total_cycles, slow.total_cycles,
                                            slow.total_cycles - conv_profile.total_cycles)
    assert d["totals"]["compute_cycles"]["delta"] == 0     # only the exchange got slower
    assert d["totals"]["exchange_cycles"]["delta"] > 0 and d["same_program"]
    by_step = sum(r["total_cycles"]["delta"] for r in d["supersteps"])
    by_cat = sum(r["total"]["delta"] for r in d["by_category"].values())
    assert by_step == by_cat == t["delta"]
    text = format_diff(d)
    assert "per superstep" in text and f"{t['delta']:+,}" in text
    assert diff_profiles(conv_profile, conv_profile)["totals"]["total_cycles"]["delta"] == 0


def test_diff_flags_different_programs(conv_profile):
    other = ik.estimate_matmul((64, 64), (64, 64))
    d = diff_profiles(conv_profile, other)
    assert not d["same_program"]
    assert "programs differ" in format_diff(d)


def test_load_profile_dict_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not an ipukern profile"):
        load_profile_dict(p)
    p.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_profile_dict(p)


# --------------------------------------------------------------------------- notebook views
def test_short_repr_and_html(conv_profile):
    r = repr(conv_profile)
    assert len(r) < 200 and r.startswith("<Profile") and f"{conv_profile.total_cycles:,}" in r
    assert all(len(repr(s)) < 1500 for s in conv_profile.supersteps)
    html = conv_profile._repr_html_()
    assert html.count("<tr>") == len(conv_profile.supersteps) + 1 and "<script" not in html


def test_to_pandas(conv_profile):
    pd = pytest.importorskip("pandas")
    df = conv_profile.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == len(conv_profile.supersteps)
    assert int(df["total_cycles"].sum()) == conv_profile.total_cycles
    from ipukern.scaling import ConvLayer, grouped_conv_sweep
    res = grouped_conv_sweep(ConvLayer("t", 16, 8, 8), channels_per_group=(4,), batch=1)
    sdf = res.to_pandas()
    assert len(sdf) == len(res) and set(sdf["device"]) == {r.device for r in res}


def test_to_pandas_without_pandas_says_how_to_get_it(conv_profile, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_pandas(name, *a, **k):
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match="pip install pandas"):
        conv_profile.to_pandas()


def test_memory_popvision_lines_add_up_and_name_their_sources():
    from ipukern.core.memory import POPVISION_LINES, TileMemory
    mem = TileMemory(SMALL)
    mem.alloc("x", 100, "inputs")
    mem.alloc("act", 12, "activations")                    # a category not listed: a variable
    mem.alloc("buf", 40, "exchange")
    mem.alloc("tmp", 8, "scratch")
    rep = mem.report()
    lines = {line["line"]: line for line in rep.popvision()}
    assert set(lines) <= {name for name, _, _ in POPVISION_LINES}
    assert "activations" in lines["variables"]["categories"]
    assert sum(line["max"] for line in lines.values()) == rep.max_bytes   # uniform tiles
    assert lines["code, vertex state and stacks"]["max"] == SMALL.reserved_bytes_per_tile
    assert all(line["source"] for line in lines.values())
    assert "as PopVision's lines" in rep.summary() and rep.to_dict()["popvision"]
