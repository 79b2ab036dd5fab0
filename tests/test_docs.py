"""The documentation runs: every Python block of the README and docs/, and the Sphinx build.

Every fenced ```python block of README.md and docs/*.md, and every ``.. code-block:: python``
of docs/*.rst, runs as pasted.

Each block runs on its own (a reader pastes one block, not the whole page) in a fresh
interpreter, in a temporary directory, so a block that leaves files behind or relies on an
earlier block's variables fails here instead of in a reader's terminal.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOC_FILES = [ROOT / "README.md", *sorted(p for p in DOCS.glob("**/*") if p.suffix in (".md", ".rst")
                                         and "_build" not in p.parts)]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
RST_BLOCK = re.compile(r"^\.\. code-block:: python[ \t]*\n((?:[ \t]*\n|[ \t]+\S.*\n)+)", re.MULTILINE)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line number, code) of every Python block of a Markdown or reST file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".rst":
        return [(text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group(1)).strip() + "\n")
                for m in RST_BLOCK.finditer(text)]
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


BLOCKS = [(p, line, code) for p in DOC_FILES for line, code in python_blocks(p)]


def test_the_docs_have_python_blocks():
    files = {p.name for p, _, _ in BLOCKS}
    assert {"README.md", "guide.rst"} <= files and len(BLOCKS) >= 6


@pytest.mark.parametrize("path, line, code", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _ in BLOCKS])
def test_python_block_runs(path, line, code, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), MPLBACKEND="Agg")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, (f"{path.relative_to(ROOT)}:{line} failed:\n"
                                 f"{res.stderr[-3000:]}")


def test_fence_parser_finds_blocks_and_their_lines(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("text\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = 2\n```\n")
    assert python_blocks(md) == [(2, "x = 1\n"), (8, "y = 2\n")]


def test_rst_parser_finds_indented_blocks(tmp_path):
    rst = tmp_path / "x.rst"
    rst.write_text("Title\n\n.. code-block:: python\n\n    a = 1\n\n    b = a\n\nprose\n")
    assert python_blocks(rst) == [(3, "a = 1\n\nb = a\n")]


def test_sphinx_build_has_no_warnings(tmp_path):
    """The API reference and the guide build with warnings as errors (``sphinx-build -W``)."""
    if importlib.util.find_spec("sphinx") is None:
        if os.environ.get("CI"):
            pytest.fail("sphinx is missing: it is part of the test extra (pip install -e '.[test]')")
        pytest.skip("sphinx is not installed (pip install -e '.[test]')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    res = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-E", "-q", "-b", "html",
                          str(DOCS), str(tmp_path / "html")], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    html = (tmp_path / "html" / "api.html").read_text(encoding="utf-8")
    for name in ("ipukern.conv2d", "ipukern.Profile", "ipukern.Graph", "ipukern.tile_function"):
        assert f'id="{name}"' in html, name
