"""Engines: a real Dask LocalCluster (two workers) and a process pool give the serial
run's records bit for bit; a point the engine loses is reported (ipukern.design_space.engines)."""
import concurrent.futures
import os

import pytest

import ipukern as ik

NETS = ["resnet8", "bert_base"]
MACHINES = {"exchange_bandwidth": [8e12, 47.5e12]}


def _run(scheduler, **kw):
    return ik.explore(NETS, MACHINES, scheduler=scheduler, batch=1, **kw)


@pytest.fixture(scope="module")
def serial():
    return _run("serial")


def test_dask_local_cluster_equals_serial(serial):
    pytest.importorskip("distributed")
    got = _run("local", n_workers=2)
    assert got.engine == "Dask LocalCluster (2 workers)" and not got.lost
    assert got.rows == serial.rows and repr(got.rows) == repr(serial.rows)


def test_local_cluster_workers_keep_glibc_malloc_defaults_and_leave_our_environ(monkeypatch):
    """Dask's default MALLOC_TRIM_THRESHOLD_ cost the workers 6-7x the page faults and
    +50% CPU a point (docs/explore.rst); its other worker defaults stay, and the variables
    the Nanny writes into this process are undone."""
    pytest.importorskip("distributed")
    from ipukern.design_space import engines
    for name in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    with engines.engine("local", 1, 2) as (executor, _):
        got = [executor.submit(os.getenv, n).result() for n in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")]
    assert got == [None, "1"]
    assert dict(os.environ) == before


def test_local_cluster_workers_run_without_the_profiler():
    """Dask's statistical profiler and its frequent monitor ticks cost the workers CPU no
    point uses (docs/explore.rst); the workers get CLUSTER_CONFIG, this process keeps its own."""
    pytest.importorskip("distributed")
    import dask

    from ipukern.design_space import engines
    keys = list(engines.CLUSTER_CONFIG)
    before = [dask.config.get(k) for k in keys]
    with engines.engine("local", 1, 2) as (executor, _):
        got = executor.submit(lambda: [dask.config.get(k) for k in keys]).result()
    assert got == list(engines.CLUSTER_CONFIG.values())
    assert got[0] is False
    assert [dask.config.get(k) for k in keys] == before


def test_a_dask_client_of_yours_is_used_and_left_running(serial):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        got = _run(client)
        assert got.engine.startswith("Dask client") and got.rows == serial.rows
        assert client.status == "running"


def test_process_pool_equals_serial(serial):
    got = _run("process", n_workers=2)
    assert got.engine == "process pool (2 workers)" and got.rows == serial.rows


class _LosesOne(concurrent.futures.ThreadPoolExecutor):
    """An executor whose second point is lost (as a killed worker's would be)."""

    def submit(self, fn, point):
        if point.index == 1:
            f = concurrent.futures.Future()
            f.set_exception(RuntimeError("worker died"))
            return f
        return super().submit(fn, point)


def test_a_lost_point_is_reported_not_stored_and_computed_next_time(serial, tmp_path):
    out = tmp_path / "s.jsonl"
    with _LosesOne(1) as ex:
        got = _run(ex, out=out)
    (cfg, why), = got.lost
    assert why == "RuntimeError: worker died" and cfg["network"] == "resnet8"
    assert cfg["changes"] == {"exchange_bandwidth": 47.5e12} and cfg["settings"] == {"batch": 1}
    assert len(got.rows) == 3 and got.computed == 3 and "lost: resnet8" in got.summary()
    again = _run("serial", out=out)
    assert (again.computed, again.reused) == (1, 3) and again.rows == serial.rows


def test_an_unreachable_scheduler_is_a_clear_error(monkeypatch):
    pytest.importorskip("distributed")
    from ipukern.design_space import engines
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT_S", 2)
    with pytest.raises(RuntimeError, match="scheduler 'tcp://127.0.0.1:9': cannot connect"):
        _run("tcp://127.0.0.1:9")


def test_points_run_grouped_by_machine_variant():
    """A point reuses what another network left for the same machine (docs/explore.rst):
    serially each variant's points run one after the other, whatever the point order."""
    seen = []
    res = ik.explore(NETS, MACHINES, scheduler="serial", batch=1,
                     progress=lambda i, n, label: seen.append(label.split(" on ")[1]))
    assert [r["network"] for r in res.rows] == ["resnet8", "resnet8", "bert_base", "bert_base"]
    assert seen[0] == seen[1] and seen[2] == seen[3] and seen[0] != seen[2]


def test_a_dask_lane_per_worker_places_its_tasks_there():
    pytest.importorskip("distributed")
    from ipukern.design_space import engines
    with engines.engine("local", 2, 4) as (executor, _):
        lanes = engines._lanes(executor)
        pids = [[lane.submit(os.getpid).result() for _ in range(3)] for lane in lanes]
    assert len(lanes) == 2
    assert all(len(set(p)) == 1 for p in pids) and pids[0][0] != pids[1][0]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert engines._lanes(pool) == [pool]
