"""ik.explore: points, records, failures, resume (ipukern.design_space.api)."""
import pytest

import ipukern as ik

NETS = ["resnet8"]
MACHINES = {"exchange_bandwidth": [8e12, 47.5e12], "tile_bytes": ["x1", "x2"]}


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The reference: 4 points serially, no stream file."""
    return ik.explore(NETS, MACHINES, scheduler="serial", batch=2)


def test_every_point_records_its_machine_and_results(full):
    assert [r["variant"] for r in full.rows] == [v.label for v in ik.design_space.machine_variants(MACHINES)]
    r = full.rows[0]
    assert r["network"] == "resnet8" and r["mode"] == "network" and r["status"] == "ok" and r["error"] is None
    assert r["exchange_bandwidth"] == 8e12 and r["tile_bytes"] == 638976 and r["n_tiles"] == 1472
    assert r["total_sram_bytes"] == 1472 * 638976 and r["setting_batch"] == 2
    assert r["varied"] == "exchange_bandwidth,tile_bytes"
    prof = ik.estimate_network(ik.models.MODELS["resnet8"](), batch=2,
                               machine=ik.GC200.replace(exchange_bandwidth=8e12))
    assert r["cycles"] == prof.total_cycles and r["samples_per_second"] == prof.samples_per_second
    assert full.computed == 4 and full.reused == 0 and full.engine == "serial" and not full.lost
    gains = {(s.network, s.constant): s.gain for s in full.sensitivity()}
    assert gains["resnet8", "exchange_bandwidth"] > 1.0
    assert gains["resnet8", "tile_bytes"] == pytest.approx(1.0)
    assert "resnet8 gains" in full.summary()


def test_tables_round_trip(full, tmp_path):
    pd = pytest.importorskip("pandas")
    df = full.to_pandas()
    assert list(df.columns) == full.columns() and len(df) == 4
    back = pd.read_csv(full.to_csv(tmp_path / "x.csv"))
    assert back["samples_per_second"].tolist() == [r["samples_per_second"] for r in full.rows]
    pytest.importorskip("pyarrow")
    pq = pd.read_parquet(full.to_parquet(tmp_path / "x.parquet"))
    assert pq["cycles"].tolist() == [r["cycles"] for r in full.rows]


def test_resume_computes_only_the_missing_points(full, tmp_path):
    out = tmp_path / "s.jsonl"
    half = ik.explore(NETS, {"exchange_bandwidth": [8e12], "tile_bytes": ["x1", "x2"]}, scheduler="serial",
                      out=out, batch=2)
    assert half.computed == 2
    seen = []
    rest = ik.explore(NETS, MACHINES, scheduler="serial", out=out, batch=2,
                      progress=lambda d, t, label: seen.append(label))
    assert (rest.computed, rest.reused, len(seen)) == (2, 2, 2)
    assert rest.rows == full.rows
    again = ik.explore(NETS, MACHINES, scheduler="serial", out=out, batch=2)
    assert (again.computed, again.reused) == (0, 4) and again.rows == full.rows


def test_an_interrupted_sweep_keeps_its_finished_points(full, tmp_path):
    out = tmp_path / "s.jsonl"

    def stop_after_one(done, total, label):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ik.explore(NETS, MACHINES, scheduler="serial", out=out, batch=2, progress=stop_after_one)
    assert len(out.read_text().splitlines()) == 1
    rest = ik.explore(NETS, MACHINES, scheduler="serial", out=out, batch=2)
    assert (rest.computed, rest.reused) == (3, 1) and rest.rows == full.rows


def test_a_failing_point_is_reported_with_its_configuration_and_the_rest_complete():
    res = ik.explore(NETS, [{"n_tiles": 16, "tile_bytes": 65536}, {}], scheduler="serial", batch=2)
    bad, good = res.rows
    assert bad["status"] == "no-fit" and "does not fit" in bad["error"] and bad["n_tiles"] == 16
    assert bad["samples_per_second"] is None if "samples_per_second" in bad else True
    assert good["status"] == "ok" and res.failed == [bad]
    assert "no-fit: resnet8 on GC200[n_tiles=16,tile_bytes=65536]" in res.summary()


def test_bad_variants_are_refused_before_any_point_runs(tmp_path):
    calls = []
    out = tmp_path / "s.jsonl"
    with pytest.raises(ValueError, match=r"machine variant 2 \(tile_bytes=-5\)"):
        ik.explore(NETS, [{}, {"tile_bytes": 2 * 638976}, {"tile_bytes": -5}], scheduler="serial", out=out,
                   progress=lambda *a: calls.append(a))
    with pytest.raises(ValueError, match=r"machine variant 1 \(n_tiles=0\)"):
        ik.explore(NETS, {"n_tiles": [1472, 0]}, scheduler="serial", out=out,
                   progress=lambda *a: calls.append(a))
    assert calls == [] and not out.exists()


@pytest.mark.parametrize("kw, err, match", [
    (dict(networks="resnet5"), ValueError, "unknown network 'resnet5'"),
    (dict(networks=[]), ValueError, "networks is empty"),
    (dict(networks=[3]), TypeError, "a network must be a zoo model name"),
    (dict(batchh=2), TypeError, r"takes no setting\(s\) \['batchh'\]"),
    (dict(batch=[]), ValueError, "setting batch has no values"),
    (dict(scheduler="nope"), ValueError, "scheduler must be a Dask address"),
    (dict(scheduler=3), TypeError, "scheduler must be None"),
    (dict(n_workers=0), ValueError, "n_workers must be an int >= 1, got 0"),
    (dict(tune="yes"), TypeError, "tune must be True or False"),
    (dict(progress=3), TypeError, "progress must be callable"),
    (dict(systems={"n_ipus": [3]}), ValueError, r"system variant 0 \(n_ipus=3\)"),
])
def test_bad_inputs_are_one_line_errors(kw, err, match):
    kw = {"networks": NETS, "scheduler": "serial", **kw}
    with pytest.raises(err, match=match):
        ik.explore(kw.pop("networks"), **kw)


def test_training_and_tune_points_on_system_variants():
    res = ik.explore(NETS, systems={"n_ipus": [4, 16]}, scheduler="serial", micro_batch=8)
    assert [r["mode"] for r in res.rows] == ["training"] * 2 and [r["n_ipus"] for r in res.rows] == [4, 16]
    est = ik.estimate_training(ik.models.MODELS["resnet8"](), ik.System.pod(16), micro_batch=8)
    assert res.rows[1]["samples_per_second"] == est.samples_per_second
    tuned = ik.explore(NETS, systems={"n_ipus": [4]}, tune=True, scheduler="serial", max_global_batch=64)
    r, = tuned.rows
    best = ik.tune(ik.models.MODELS["resnet8"](), ik.System.pod(4), max_global_batch=64)
    assert r["mode"] == "tune" and r["samples_per_second"] == best.samples_per_second
    assert r["micro_batch"] == best.best_config.micro_batch
