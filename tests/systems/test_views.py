"""Views of a training estimate: JSON, schedule, Perfetto trace, pandas rows, diffs."""
import json

import pytest

import ipukern as ik
from ipukern.systems import diff_trainings, format_training_diff, training_trace


def _costs(n=4):
    return [ik.LayerCost(f"l{i}", 1000 + 100 * i, 2000, 500, 10_000, 4096, 2048) for i in range(n)]


@pytest.fixture(scope="module")
def piped():
    return ik.estimate_training(system="M2000", costs=_costs(), micro_batch=2, gradient_accumulation=4,
                                ipus_per_replica=2, pipeline=["l2"])


def test_json_round_trip_with_schema(piped):
    d = json.loads(piped.to_json())
    assert (d["schema"], d["schema_version"]) == ("ipukern.training", 1)
    assert d["global_batch"] == piped.global_batch and d["stages"] == [["l0", "l1"], ["l2", "l3"]]


def test_schedule_is_the_grouped_pipeline(piped):
    rows = piped.schedule()
    cycle = piped.info["pipeline_cycle_s"]
    for stage in (0, 1):
        comp = [r for r in rows if r["stage"] == stage and r["phase"] == "compute"]
        assert [r["micro_batch"] for r in comp] == [0, 1, 2, 3]
        # stage s starts its first micro-batch s pipeline cycles in (fill), one per cycle after
        assert [r["start_s"] for r in comp] == pytest.approx([(stage + k) * cycle for k in range(4)])
    last = max(r["start_s"] + r["seconds"] for r in rows)
    assert last == pytest.approx(piped.step_seconds)
    assert {r["replica"] for r in piped.schedule(replica=None)} == set(range(piped.replicas))


def test_trace_has_one_row_per_ipu(piped):
    tr = piped.to_trace()
    names = [e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"]
    assert names == ["IPU 0: l0..l1", "IPU 1: l2..l3"]
    spans = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(piped.schedule())
    assert tr["otherData"]["schema"] == "ipukern.trace"
    assert training_trace(json.loads(piped.to_json())) == tr


def test_to_pandas_is_the_breakdown(piped):
    pytest.importorskip("pandas")
    df = piped.to_pandas()
    assert list(df.index) == [r["ipu"] for r in piped.breakdown]
    assert df["compute_s"].tolist() == [r["compute_s"] for r in piped.breakdown]


def test_diff_of_two_steps(piped):
    more = ik.estimate_training(system="M2000", costs=_costs(), micro_batch=2, gradient_accumulation=8,
                                ipus_per_replica=2, pipeline=["l2"])
    d = diff_trainings(piped, more)
    assert d["kind"] == "training" and d["same_layout"]
    assert d["totals"]["global_batch"]["ratio"] == 2
    assert d["parts"]["pipeline compute"]["ratio"] == pytest.approx(2)
    text = format_training_diff(d)
    assert "step (ms)" in text and "IPU 1 compute" in text
