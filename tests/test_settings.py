"""ipukern._settings: every IPUKERN_* variable is read there, at use, and documented."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import ipukern as ik
from ipukern import _settings
from ipukern.core.host import fused

ROOT = Path(__file__).resolve().parents[1]


def test_every_variable_in_the_code_is_in_the_table():
    names = set()
    for p in [*ROOT.joinpath("ipukern").rglob("*.py"), ROOT / "setup.py"]:
        names |= set(re.findall(r"IPUKERN_[A-Z_]+[A-Z]", p.read_text(encoding="utf-8")))
    table = {s.name for s in _settings.SETTINGS}
    assert names == table, (names - table, table - names)
    # only _settings.py (and setup.py, which cannot import the package) reads the environment
    for p in ROOT.joinpath("ipukern").rglob("*.py"):
        if p.name != "_settings.py":
            assert not re.search(r"environ[^\n]*IPUKERN_", p.read_text(encoding="utf-8")), p


def test_settings_are_read_at_use(monkeypatch):
    monkeypatch.setenv("IPUKERN_NUM_THREADS", "1")
    assert ik.get_num_threads() == 1
    monkeypatch.setenv("IPUKERN_NUM_THREADS", "2")
    assert ik.get_num_threads() == 2
    monkeypatch.setattr(fused, "FUSED_EXCHANGE", None)
    monkeypatch.setenv("IPUKERN_FUSED_EXCHANGE", "0")
    assert not fused.fused_enabled()
    monkeypatch.delenv("IPUKERN_FUSED_EXCHANGE")
    assert fused.fused_enabled()
    monkeypatch.setenv("IPUKERN_PLAN_CACHE_BYTES", "12345")
    assert ik.plan_cache_info()["max_bytes"] == 12345


@pytest.mark.parametrize("name, value, call", [
    ("IPUKERN_NUM_THREADS", "two", _settings.num_threads),
    ("IPUKERN_PLAN_CACHE_BYTES", "1e9", _settings.plan_cache_bytes),
    ("IPUKERN_PLAN_WORKER", "yes", _settings.plan_worker),
    ("IPUKERN_FUSED_EXCHANGE", "off", _settings.fused_exchange),
    ("IPUKERN_CHECK_BUILT_PROGRAMS", "2", _settings.check_built_programs),
])
def test_bad_values_name_the_variable(monkeypatch, name, value, call):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        call()


def test_describe_lists_every_setting(monkeypatch):
    monkeypatch.setenv("IPUKERN_PLAN_WORKER", "0")
    text = _settings.describe()
    assert all(s.name in text for s in _settings.SETTINGS)
    assert re.search(r"IPUKERN_PLAN_WORKER\s+run\s+0 ", text)


def test_the_front_door_and_the_manual_list_every_setting():
    for doc in (ROOT / "README.md", ROOT / "docs" / "performance.rst"):
        text = doc.read_text(encoding="utf-8")
        missing = [s.name for s in _settings.SETTINGS if s.name not in text]
        assert not missing, f"{doc.name} does not describe {missing}"
