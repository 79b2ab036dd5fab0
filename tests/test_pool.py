"""ipukern._pool: the sweeps' "auto" executor (serial for small sweeps, a process pool for
large ones), bit-identical results, clean failures, and when a pool is not safe."""
import concurrent.futures
import os
import subprocess
import sys
import textwrap

import pytest

import ipukern as ik
from ipukern import _pool
from ipukern.scaling import ConvLayer, grouped_conv_sweep

LAYER = ConvLayer("pool-small", channels=16, height=8, width=8, kernel=3)
NAMES = ["GC200", "BOW", "GC2", "GC200"]


@pytest.fixture
def always_parallel(monkeypatch):
    """``"auto"`` goes to a pool after its first point, whatever the timing and load."""
    monkeypatch.setattr(_pool, "pays", lambda per_point, rest, cpus=None: True)
    monkeypatch.setattr(_pool, "FIRST_POINT_TRUSTED_S", 0.0)
    monkeypatch.setattr(_pool, "worker_count", lambda: 2)


def test_auto_pool_rows_are_bit_identical_to_serial(always_parallel):
    kw = dict(channels_per_group=(1, 4, 16), batch=(1, 2), machines=("GC200",), gpus=("A100_40GB",))
    serial = grouped_conv_sweep(LAYER, executor=None, **kw)
    seen = []
    auto = grouped_conv_sweep(LAYER, progress=lambda i, n, label: seen.append((i, n, label)), **kw)
    assert serial.meta["executor"] == "serial"
    assert auto.meta["executor"] == "process pool (2 workers) after 1 serial point"
    # same rows, same order, same bits (repr of a float round-trips its exact bits)
    assert auto.to_dicts() == serial.to_dicts() and repr(auto.to_dicts()) == repr(serial.to_dicts())
    assert [s[:2] for s in seen] == [(i + 1, 6) for i in range(6)]
    assert seen[0][2] == "pool-small N1 cpg 1" and seen[-1][2] == "pool-small N2 cpg 16"


def test_network_sweep_auto_pool_equals_serial(always_parallel):
    chip = ik.GC200.replace(n_tiles=16, name="GC200-16")
    configs = [{"net": "resnet8", "model_kwargs": {"image_size": 8}, "batch": b, "machine": chip}
               for b in (1, 2, 3)]
    serial = ik.network_sweep(configs, executor=None)
    assert [p.to_dict() for p in ik.network_sweep(configs)] == [p.to_dict() for p in serial]


def test_small_sweeps_stay_serial(monkeypatch):
    monkeypatch.setattr(_pool, "worker_count", lambda: 8)
    monkeypatch.setattr(_pool, "_load", lambda: 0.0)
    monkeypatch.setattr(_pool, "_STATE", {"server": False})
    # 50 ms a point: 10 more points (0.5 s) never pay for a first pool (1 s start-up)
    assert not _pool.pays(0.05, 10)
    # but 100 more (5 s of work, ~0.6 s on 8 workers) do
    assert _pool.pays(0.05, 100)
    assert not _pool.pays(10.0, 1)                # one point left: nothing to share
    # the built-in ipukern scaling sweep on an idle 2-core machine (44 ms x 69) stays serial
    monkeypatch.setattr(_pool, "worker_count", lambda: 2)
    assert not _pool.pays(0.044, 69)
    # a machine whose load leaves no CPU idle gains nothing from more processes
    monkeypatch.setattr(_pool, "worker_count", lambda: 8)
    monkeypatch.setattr(_pool, "_load", lambda: 8.0)
    assert not _pool.pays(0.05, 100)
    # a single CPU never gets a pool
    monkeypatch.setattr(_pool, "_load", lambda: 0.0)
    monkeypatch.setattr(_pool, "worker_count", lambda: 1)
    assert not _pool.pays(10.0, 100)


def test_a_quick_first_point_alone_does_not_decide(monkeypatch):
    # the first point carries the process's one-time work: a quick one is not trusted alone
    monkeypatch.setattr(_pool, "pays", lambda per_point, rest, cpus=None: True)
    monkeypatch.setattr(_pool, "worker_count", lambda: 2)
    got, how = _pool.run_points(ik.get_machine, NAMES, "auto")
    assert [m.name for m in got] == NAMES and how == "process pool (2 workers) after 2 serial points"


def test_real_timing_keeps_a_tiny_sweep_serial():
    res = grouped_conv_sweep(LAYER, channels_per_group=(4,), batch=(1,), machines=("GC200",),
                             gpus=())
    assert res.meta["executor"] == "serial"


def test_worker_count_is_capped_by_cpus():
    assert 1 <= _pool.worker_count() <= (os.cpu_count() or 1)


@pytest.mark.parametrize("executor", ["process", "auto"])
def test_an_error_in_a_point_is_the_serial_error_and_cancels_the_rest(executor, always_parallel):
    items = ["GC200", "GC200", "nope"] + ["BOW"] * 40
    with pytest.raises(ValueError) as serial:
        _pool.run_points(ik.get_machine, items, None)
    seen = []
    with pytest.raises(ValueError) as pooled:
        _pool.run_points(ik.get_machine, items, executor, progress=lambda i, n, label: seen.append(i))
    assert type(pooled.value) is type(serial.value) and str(pooled.value) == str(serial.value)
    assert seen == [1, 2]                         # nothing reported past the failing point


def test_a_dead_worker_is_one_clear_error():
    with pytest.raises(RuntimeError, match="worker process died.*executor=None"):
        _pool.run_points(os._exit, [3, 3], "process")


def test_an_executor_of_yours_is_left_running_and_bad_ones_are_refused():
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        got, how = _pool.run_points(ik.get_machine, NAMES, ex)
        assert how == "executor ThreadPoolExecutor" and [m.name for m in got] == NAMES
        assert ex.submit(len, "ok").result() == 2
    for bad in ("threads", 4, object()):
        with pytest.raises(TypeError, match="executor must be"):
            _pool.run_points(ik.get_machine, NAMES, bad)
    assert _pool.run_points(ik.get_machine, [], "process") == ([], "serial")


def test_process_pool_refuses_a_bad_worker_count():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_workers"):
            _pool.process_pool(bad)


def test_work_that_does_not_pickle_stays_serial(always_parallel):
    got, how = _pool.run_points(lambda name: ik.get_machine(name).name, NAMES, "auto")
    assert (got, how) == (NAMES, "serial")


SCRIPT = """
import os
import ipukern as ik
from ipukern import _pool
_pool.pays = lambda per_point, rest, cpus=None: True
_pool.FIRST_POINT_TRUSTED_S = 0.0
_pool.worker_count = lambda: 2

def run(tag):
    got, how = _pool.run_points(ik.get_machine, ["GC200", "BOW", "GC2"], "auto")
    os.write(1, f"{tag} {[m.name for m in got]} {how}\\n".encode())   # one write: no interleaving

run("top-level")          # unguarded: workers re-importing this script would re-run it
if __name__ == "__main__":
    run("guarded")
"""


def test_auto_pool_only_where_workers_will_not_rerun_the_script(tmp_path):
    script = tmp_path / "sweep_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    names = "['GC200', 'BOW', 'GC2']"
    assert lines[0] == f"top-level {names} serial"
    assert f"guarded {names} process pool (2 workers) after 1 serial point" in lines
    # each worker re-imported the script and ran its unguarded call there, serially (no
    # nested pool); the unguarded call in this process stayed serial
    assert sorted(set(lines) - {lines[0]}) == [f"guarded {names} process pool (2 workers) "
                                               "after 1 serial point"]


def test_guard_detection(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("x = 1\nif __name__ == '__main__':\n    x = 2\n    y = 3\n"
                    "if '__main__' == __name__: pass\nif __name__ != '__main__': pass\n")
    assert _pool._guard_lines(str(path)) == [(2, 4), (5, 5)]
    assert _pool._guard_lines(str(tmp_path / "missing.py")) == []


@pytest.mark.parametrize("to, delay", [("parent", 0.0), ("group", 0.3)])
def test_ctrl_c_while_workers_are_launched_leaves_no_traceback(tmp_path, to, delay):
    # Ctrl-C right after the parent asked the fork server for a worker, to the parent alone
    # (as tests/test_cli_hardening.py sends it) or, 0.3 s later while the fork server
    # imports ipukern, to the whole process group (as a terminal does). Before the fix the
    # parent's KeyboardInterrupt abandoned the half-sent launch and the worker died on EOF
    # with a traceback ("EOFError: Ran out of input"), or the fork server, still importing
    # ipukern, printed a KeyboardInterrupt traceback of its own
    script = tmp_path / "ctrl_c.py"
    script.write_text(textwrap.dedent(f"""
        import operator, os, signal, sys, time
        from multiprocessing import forkserver
        from ipukern import _pool

        connect = forkserver.connect_to_new_process

        def connect_then_ctrl_c(fds):
            out = connect(fds)
            time.sleep({delay})
            if {to == "group"}:
                os.killpg(0, signal.SIGINT)
            else:
                os.kill(os.getpid(), signal.SIGINT)
            return out

        forkserver.connect_to_new_process = connect_then_ctrl_c
        if __name__ == "__main__":
            try:
                _pool.run_points(operator.neg, list(range(8)), "process")
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                sys.exit(130)
            print("not interrupted", file=sys.stderr)
    """))
    # the pipes close when the fork server and every worker have exited: their stderr too
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, start_new_session=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "interrupted", proc.stderr
