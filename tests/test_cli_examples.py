"""The command lines users are shown run as printed: every example of every subcommand's
``--help`` epilog, and every ``ipukern`` command of README's shell blocks, exits 0.

Each subcommand's examples run in order in one fresh directory (``ipukern diff a.json b.json``
reads what the example before it wrote), through a shim ``ipukern`` on PATH that runs this
source tree. The one input a user brings, the ``--costs`` file the train/compare examples
name (``layers.json``, a list of :class:`ipukern.LayerCost` fields), is written first.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ipukern.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
#: a command line of an epilog or a shell block, without its trailing "# comment"
_COMMENT = re.compile(r"\s+#\s.*$")


def help_examples() -> dict[str, list[str]]:
    """Subcommand -> the command lines of its ``--help`` epilog, in order."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sub.choices.items():
        lines = [_COMMENT.sub("", ln.strip()) for ln in (p.epilog or "").splitlines()]
        out[name] = [ln for ln in lines if ln.startswith(("ipukern ", "mpiexec "))]
    return out


def readme_commands() -> list[str]:
    """The ``ipukern ...`` commands of README's bash blocks (``pip install ... && ipukern
    scaling`` gives ``ipukern scaling``; installing is not the tests' business)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        for ln in block.splitlines():
            for part in _COMMENT.sub("", ln).split("&&"):
                if part.strip().startswith("ipukern"):
                    out.append(part.strip())
    return out


EXAMPLES = help_examples()
COSTS = [dict(name=f"layer{i}", fwd_cycles=400_000, bwd_cycles=800_000, wu_cycles=200_000,
              n_params=2_000_000, stash_bytes=40_000_000, out_bytes=3_000_000) for i in range(12)]


def _run_all(lines: list[str], cwd: Path) -> None:
    shim = cwd / ".bin"
    shim.mkdir()
    (shim / "ipukern").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ipukern "$@"\n')
    (shim / "ipukern").chmod(0o755)
    (shim / "python").symlink_to(sys.executable)
    (cwd / "layers.json").write_text(json.dumps(COSTS))
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for line in lines:
        if line.startswith("mpiexec") and shutil.which("mpiexec") is None:
            continue                    # the MPI example needs the mpi extra's launcher
        res = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, f"{line!r} exited {res.returncode}:\n{res.stderr[-2000:]}"


def test_every_subcommand_shows_examples():
    missing = [name for name, lines in EXAMPLES.items() if not lines]
    assert not missing, f"--help of {missing} shows no example"


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_help_examples_run(command, tmp_path):
    _run_all(EXAMPLES[command], tmp_path)


@pytest.mark.slow
def test_readme_commands_run(tmp_path):
    lines = readme_commands()
    assert "ipukern scaling" in lines
    _run_all(lines, tmp_path)
