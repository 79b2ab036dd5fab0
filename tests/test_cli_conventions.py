"""Command-line conventions shared by every subcommand (version, output to stdout, ...)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ipukern
from ipukern.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "ipukern", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False, **kw)


def test_version_flag_prints_the_single_sourced_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"ipukern {ipukern.__version__}"


def test_version_flag_in_a_fresh_process():
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"ipukern {ipukern.__version__}"
