"""The on-disk cache of a network's host copy tables (:mod:`ipukern.nn.host.table_cache`):
a second "process" (every in-process cache cleared) reads the tables and gets the bits and
cycles of a cold build; a broken entry is rebuilt; another machine spec misses."""
import json

import numpy as np
import pytest

import ipukern as ik
from ipukern import _memo
from ipukern.nn.host import table_cache as tc

from tests._support.nets import tiny_cnn

SIZE = 16


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("IPUKERN_CACHE_DIR", str(tmp_path))
    _memo.clear_all()
    yield tmp_path / "tables"
    tc.flush()
    _memo.clear_all()


def _fresh_run(net, x, **kw):
    """``run_network`` as a new process would (nothing cached in memory), its writes done."""
    _memo.clear_all()
    before = dict(tc.STATS)
    r = ik.run_network(net, x, **kw)
    tc.flush()
    return r, {k: tc.STATS[k] - before[k] for k in before}


def _net_and_input():
    net = tiny_cnn(c=8, hw=SIZE, loss=False)
    x = np.random.default_rng(0).standard_normal((2, 3, SIZE, SIZE)).astype(np.float32)
    return net, x


def test_a_cache_hit_gives_the_bits_and_cycles_of_a_cold_build(cache_dir):
    net, x = _net_and_input()
    cold, st = _fresh_run(net, x)
    assert st["misses"] == 1 and st["writes"] == 1
    entries = list(cache_dir.iterdir())
    assert len(entries) == 1 and (entries[0] / "manifest.json").exists()
    warm, st = _fresh_run(net, x)
    assert st["hits"] == 1 and st["writes"] == 0
    off, st = _fresh_run(net, x, cache=False)
    assert st == {k: 0 for k in st}
    for r in (warm, off):
        assert r.output.tobytes() == cold.output.tobytes()
        assert r.profile.total_cycles == cold.profile.total_cycles


@pytest.mark.parametrize("damage", ["truncate", "delete", "manifest"])
def test_a_broken_entry_is_rebuilt(cache_dir, damage):
    net, x = _net_and_input()
    cold, _ = _fresh_run(net, x)
    entry = next(cache_dir.iterdir())
    col = sorted(entry.glob("*.npy"))[0]
    if damage == "truncate":
        col.write_bytes(col.read_bytes()[:-8])
    elif damage == "delete":
        col.unlink()
    else:
        (entry / "manifest.json").write_text("{not json")
    again, st = _fresh_run(net, x)
    assert st["broken"] == 1 and st["hits"] == 0 and st["writes"] == 1
    assert again.output.tobytes() == cold.output.tobytes()
    assert again.profile.total_cycles == cold.profile.total_cycles
    _, st = _fresh_run(net, x)
    assert st["hits"] == 1


def test_another_machine_spec_misses(cache_dir):
    net, x = _net_and_input()
    _fresh_run(net, x)
    _, st = _fresh_run(net, x, machine="GC2")
    assert st["misses"] == 1 and st["hits"] == 0
    assert len(list(cache_dir.iterdir())) == 2


def test_the_cache_is_bounded(cache_dir, monkeypatch):
    net, x = _net_and_input()
    monkeypatch.setenv("IPUKERN_TABLE_CACHE_BYTES", "1")
    _fresh_run(net, x)
    assert not [d for d in cache_dir.iterdir() if not d.name.startswith(".")]


def test_a_bad_cache_argument_is_refused(cache_dir):
    net, x = _net_and_input()
    with pytest.raises(TypeError, match="cache must be True or False, got 'yes'"):
        ik.run_network(net, x, cache="yes")


def test_the_suite_never_writes_the_users_cache():
    import os
    from pathlib import Path
    assert not str(tc.cache_root()).startswith(str(Path.home() / ".cache"))
    assert os.environ["IPUKERN_CACHE_DIR"]


def _fused_steps(net, x):
    """The FusedSteps with a shadow receive of the conv programs ``net`` ran on ``x``."""
    from ipukern.core.host.fused import FusedStep
    from ipukern.nn.compile import compile_network
    from ipukern.nn.layers import plan_context
    prog = compile_network(net, x.shape[0], plan_context("float32", "float", ik.GC200, None))
    out = []
    for p in prog._programs():
        got = p.program.host_cache.get("fused")
        out += [f for f in (got[1].values() if got else ()) if isinstance(f, FusedStep)
                and f.shadow is not None]
    return out


def test_shadow_receives_are_read_back_not_planned_again(cache_dir):
    net, x = _net_and_input()
    cold, _ = _fresh_run(net, x)
    planned = _fused_steps(net, x)
    assert planned and not any(isinstance(f.shadow.shadowed, np.memmap) for f in planned)
    entry = next(cache_dir.iterdir())
    shadows = json.loads((entry / "manifest.json").read_text())["shadows"]
    assert len(shadows) == len(planned)
    warm, st = _fresh_run(net, x)
    assert st["hits"] == 1
    read = _fused_steps(net, x)
    assert len(read) == len(planned) and all(isinstance(f.shadow.shadowed, np.memmap) for f in read)
    assert warm.output.tobytes() == cold.output.tobytes()
    assert warm.profile.total_cycles == cold.profile.total_cycles


def test_a_shadow_receive_reaching_outside_the_arena_is_planned_again(cache_dir):
    net, x = _net_and_input()
    cold, _ = _fresh_run(net, x)
    entry = next(cache_dir.iterdir())
    name = next(iter(json.loads((entry / "manifest.json").read_text())["shadows"]))
    dst = np.load(entry / f"{name}.t2.npy")
    dst[0] = 1 << 40                              # a copy far outside any shadow row
    np.save(entry / f"{name}.t2.npy", dst)
    warm, st = _fresh_run(net, x)
    assert st["hits"] == 1
    assert not any(isinstance(f.shadow.shadowed, np.memmap) and f.shadow.table[2][0] == 1 << 40
                   for f in _fused_steps(net, x))
    assert warm.output.tobytes() == cold.output.tobytes()
