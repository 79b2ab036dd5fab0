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


def test_api_reference_covers_every_public_name():
    """``docs/api.rst`` documents every name of ``ipukern.__all__`` (as ``ipukern.<name>``)."""
    import ipukern

    text = (DOCS / "api.rst").read_text(encoding="utf-8")
    named = set(re.findall(r"\bipukern\.([A-Za-z_][A-Za-z0-9_]*)", text))
    missing = [n for n in ipukern.__all__ if n not in named]
    assert not missing, f"docs/api.rst lacks {missing}"


def _generate_module():
    spec = importlib.util.spec_from_file_location("_docs_generate", DOCS / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_tables_name_their_commands():
    """Every table the pages include from ``docs/_generated`` was written by
    ``docs/generate.py``, whose first line names the command that produced it."""
    gen = _generate_module()
    for name, (_, command, _) in gen.GENERATORS.items():
        path = DOCS / "_generated" / f"{name}.txt"
        assert path.exists(), f"{path.relative_to(ROOT)} missing: python docs/generate.py {name}"
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first == gen.HEADER.format(name=name, command=command).rstrip("\n"), first
    included = set(re.findall(r"literalinclude:: _generated/(\w+)\.txt",
                              "".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.rst"))))
    assert included <= set(gen.GENERATORS), included - set(gen.GENERATORS)


@pytest.mark.parametrize("name", ["scaling", "collectives"])
def test_fast_generated_tables_are_current(name):
    """The generators that run in seconds are re-run: the committed table is what the
    command prints today (after a model change: ``python docs/generate.py``)."""
    gen = _generate_module()
    assert gen.GENERATORS[name][2], name
    committed = (DOCS / "_generated" / f"{name}.txt").read_text(encoding="utf-8")
    assert gen.render(name) == committed, f"docs/_generated/{name}.txt is stale: " \
                                          f"python docs/generate.py {name}"


def test_readme_is_a_front_door():
    """The README stays a front page (at most 250 lines; the manual is docs/), and its test
    command is the one ``.ci/run`` runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md over 250 lines: move the detail to docs/"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pytest_line = next(ln.strip() for ln in ci.splitlines() if ln.startswith("python -m pytest"))
    assert f"&& {pytest_line}" in readme.split("\n```", 2)[1], pytest_line
    torch_line = next(ln.strip() for ln in ci.splitlines() if ln.startswith("pip install torch"))
    assert torch_line in readme.split("\n```", 2)[1], torch_line


def test_test_extra_pulls_no_gpu_stack():
    """A newcomer's ``pip install ".[test]"`` on PyPI downloads no CUDA: any torch requirement
    there resolves to the CUDA build, so torch comes from README's CPU-index line instead."""
    try:
        import tomllib
    except ModuleNotFoundError:      # Python 3.10
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]
    names = [re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0].lower() for req in extras["test"]]
    gpu = [n for n in names if n in ("torch", "triton", "jax", "cupy") or n.startswith("nvidia")]
    assert not gpu, f"the test extra pulls {gpu}: a GPU stack on a standard index"


def test_readme_ratio_table_is_the_generated_sweep():
    """The README's IPU/GPU ratios are ``docs/_generated/scaling.txt`` (what ``ipukern scaling``
    prints), rounded as written: a model change that moves them fails here."""
    gen = (DOCS / "_generated" / "scaling.txt").read_text(encoding="utf-8").split("\n# ")

    def ratios(block: str, batch: int) -> dict[str, float]:
        out = {}
        for ln in block.splitlines():
            f = ln.split()
            if len(f) > 3 and f[0] == "resnext50_c128" and f[1] == str(batch):
                out[f[2].rstrip("*")] = float(f[-1].rstrip("x"))
        return out
    tables = {"batch 32": ratios(gen[0], 32), "batch 1": ratios(gen[0], 1),
              "batch 32, datasheet": ratios(gen[1], 32),
              "batch 32, hand-optimised": ratios(gen[2], 32)}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [ln for ln in readme.splitlines() if ln.startswith("| batch ")]
    assert len(rows) == 4, rows
    for row in rows:
        cells = [c.strip().strip("*").rstrip("×") for c in row.strip("|").split("|")]
        key = next(k for k in sorted(tables, key=len, reverse=True) if cells[0].startswith(k))
        for cpg, text in zip(("1", "4", "16", "128"), cells[1:]):
            step = 10.0 ** -len(text.split(".")[1])
            assert abs(float(text) - tables[key][cpg]) <= step / 2 + 1e-9, (row, cpg)


def _close(text: str, value: float) -> bool:
    """``text`` (e.g. "1.31", "56%") is ``value`` rounded to the digits it shows."""
    text = text.rstrip("%")
    digits = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 10.0 ** -digits / 2 + 1e-9


def test_readme_validation_figures_are_the_generated_reports():
    """The README's validation figures round what ``docs/_generated`` holds (the output of
    ``ipukern validate``, ``--systems`` and ``--inference``)."""
    gen = {n: (DOCS / "_generated" / f"{n}.txt").read_text(encoding="utf-8")
           for n in ("validate", "systems", "inference")}
    mm = re.search(r"^matmul Bow \(PopSparse\)\s+\d+\s+\d+\s+([\d.]+)%\s+\S+\s+\S+\s+([\d.]+)%",
                   gen["validate"], re.MULTILINE)
    pl = re.search(r"^PopLibs estimator.*?\s([\d.]+)%\s+\S+\s+\S+\s+([\d.]+)%", gen["validate"],
                   re.MULTILINE)
    ipu = re.search(r"ipu_training: throughput ([\d.]+) \(8 TB/s exchange: ([\d.]+)\)",
                    gen["systems"])
    gpu = re.search(r"gpu_training: throughput ([\d.]+)", gen["systems"])
    c600 = [float(re.search(rf"C600/{k}: ([\d.]+)", gen["inference"]).group(1))
            for k in ("default", "datasheet")]
    want = {"dense matmuls on Bow": [float(mm.group(1)), float(mm.group(2))],
            "MLPerf Training v1.0/v1.1 and Bow": [float(ipu.group(1)), float(ipu.group(2))],
            "MLPerf Training, DGX A100": [float(gpu.group(1))],
            "PopRT and ByteMLPerf inference": c600,
            "PopLibs' own AMP estimator": [float(pl.group(1)), float(pl.group(2))]}
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    for start, values in want.items():
        row = next(ln for ln in readme if ln.startswith(f"| {start}"))
        cells = [c.strip() for c in row.strip("|").split("|")][2:2 + len(values)]
        assert all(_close(c, v) for c, v in zip(cells, values)), (row, values)
