"""Views of a network profile: pandas rows, the Perfetto trace, network-vs-network diffs."""
import json

import pytest

import ipukern as ik
from ipukern import nn


@pytest.fixture(scope="module")
def small():
    """mobilenet_v1 at 32x32 (plans in seconds), batch 1 and 2, and a training step."""
    net = ik.models.mobilenet_v1(image_size=32)
    return {b: nn.estimate_network(net, batch=b, dtype="float32", partials="float") for b in (1, 2)}


def test_json_carries_the_schema_and_the_clock(small):
    d = json.loads(small[1].to_json())
    assert (d["schema"], d["schema_version"]) == ("ipukern.network", 1)
    assert d["clock_hz"] == ik.GC200.clock_hz and d["n_tiles"] == ik.GC200.n_tiles


def test_to_pandas_has_one_row_per_layer_pass(small):
    pytest.importorskip("pandas")
    p = small[1]
    df = p.to_pandas()
    assert len(df) == len(p.layers) and df["cycles"].sum() == p.total_cycles
    assert list(df["name"]) == [r["name"] for r in p.layers]


def test_trace_spans_are_the_layers_in_program_order(small):
    p = small[2]
    tr = p.to_trace()
    spans = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["name"] != "rearrange"]
    assert [e["name"] for e in spans] == [r["name"] for r in p.layers]
    us = 1e6 / p.machine.clock_hz
    end = spans[-1]["ts"] + spans[-1]["dur"]
    assert end == pytest.approx(p.total_cycles * us)
    assert all(b["ts"] == pytest.approx(a["ts"] + a["dur"]) for a, b in zip(spans, spans[1:]))
    threads = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {"forward"}
    # the JSON read back traces the same
    assert nn.network_trace(json.loads(p.to_json())) == tr


def test_training_trace_has_a_row_per_pass():
    p = nn.estimate_network(ik.models.mobilenet_v1(image_size=32), batch=1, training=True,
                            dtype="float32", partials="float")
    threads = {e["args"]["name"] for e in p.to_trace()["traceEvents"] if e["name"] == "thread_name"}
    assert {"forward", "backward", "weight update"} <= threads


def test_diff_matches_layers_by_name_and_pass(small):
    d = nn.diff_networks(small[1], json.loads(small[2].to_json()))
    assert d["kind"] == "network" and d["same_program"]
    assert d["totals"]["total_cycles"]["delta"] == small[2].total_cycles - small[1].total_cycles
    assert sum(r["cycles"]["b"] for r in d["layers"]) == small[2].total_cycles
    text = nn.format_network_diff(d)
    assert "batch 1" in text and "batch 2" in text and "per layer pass" in text
    same = nn.diff_networks(small[1], small[1])
    assert "per layer pass (cycles)" == nn.format_network_diff(same, only_changed=True).splitlines()[-1]
