"""The numbers README and the docs show are what the tool prints today.

Two links: README's "How close to hardware" table against the committed tables of
``docs/_generated`` (each written by ``python docs/generate.py NAME`` from a command), and
those tables against the command run now: in full for the ones that take seconds
(``tests/test_docs.py`` re-runs scaling and collectives; here validate and gpu), row by row
for the slow reports (``--systems``, ``--inference``: two rows each, their cells compared).
README's grouped-conv scaling table is checked cell by cell against
``docs/_generated/scaling.txt`` by ``tests/test_docs.py`` (which also re-runs it); the prose numbers README
and docs/usage quote from that table (peak advantages, the dense point, utilisation ranges, the
batch-1 tie, the datasheet exchange's cost) are recomputed from it at the end of this file,
each found by its sentence so a reworded page fails rather than passes.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "docs" / "_generated"


def _generated(name: str) -> str:
    return (GEN / f"{name}.txt").read_text(encoding="utf-8")


def _readme_rows() -> dict[str, list[str]]:
    """README's "How close to hardware" table: first cell -> the other cells."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## How close to hardware", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and not set(cells[1]) <= {"-"}:
            rows[cells[0]] = cells[1:]
    return rows


def _row(prefix: str) -> list[str]:
    rows = _readme_rows()
    hits = [v for k, v in rows.items() if k.startswith(prefix)]
    assert len(hits) == 1, f"README has no single row starting {prefix!r}: {sorted(rows)}"
    return hits[0]


def _near(shown: str, value: float) -> bool:
    """README's rounded figure (``56%``, ``1.16``, ``0.2%``) is ``value`` rounded to its digits
    (plus half a unit of the printed value's own rounding)."""
    num = shown.rstrip("%×x")
    digits = len(num.split(".")[1]) if "." in num else 0
    return abs(float(num) - value) <= 0.5 * 10 ** -digits + 0.0005 + 1e-12


def _group(line_start: str) -> list[str]:
    line = next(ln for ln in _generated("validate").splitlines() if ln.startswith(line_start))
    return re.split(r"\s{2,}", line.strip())


def test_readme_matmul_and_estimator_rows_match_validate():
    cells = _group("matmul Bow (PopSparse)")      # group, points, modelled, MAPE, ratio, r, MAPE, ...
    rows, default, datasheet = _row("dense matmuls on Bow")
    assert rows == cells[2] and _near(default, float(cells[3].rstrip("%")))
    assert _near(datasheet, float(cells[6].rstrip("%")))
    cells = _group("PopLibs estimator (not hardware)")
    rows, default, datasheet = _row("PopLibs' own AMP estimator")
    assert rows == cells[2] and _near(default, float(cells[3].rstrip("%")))
    assert _near(datasheet, float(cells[6].rstrip("%")))


def test_readme_training_rows_match_systems():
    text = _generated("systems")
    ipu = re.search(r"ipu_training: throughput ([\d.]+) \(8 TB/s exchange: ([\d.]+)\).*\((\d+) of \d+ rows\)",
                    text)
    gpu = re.search(r"gpu_training: throughput ([\d.]+),.*\((\d+) of \d+ rows\)", text)
    assert ipu and gpu
    rows, default, datasheet = _row("MLPerf Training v1.0/v1.1 and Bow Pod")
    assert rows == ipu[3] and _near(default, float(ipu[1])) and _near(datasheet, float(ipu[2]))
    rows, default, _ = _row("MLPerf Training, DGX A100")
    assert rows == gpu[2] and _near(default, float(gpu[1]))


def test_readme_gpu_rows_match_validate_gpu():
    text = _generated("gpu")
    h100 = [re.split(r"\s+", ln.strip()) for ln in text.splitlines()
            if re.match(r"H100\s+test\s+(bmm|linear)\s", ln)]
    n = sum(int(c[3]) for c in h100)
    mape = sum(int(c[3]) * float(c[5].rstrip("%")) for c in h100) / n
    rows, default, _ = _row("GPU kernels never fitted: H100 linear/bmm")
    assert rows == str(n) and _near(default, mape)
    e2e = re.search(r"end to end: \d+ of (\d+) rows within .*; MAPE ([\d.]+)%", text)
    rows, default, _ = _row("GPU training/inference steps of five transformers")
    assert e2e and rows == e2e[1] and _near(default, float(e2e[2]))


def test_readme_inference_row_matches_validate_inference():
    text = _generated("inference")
    modelled = re.search(r"(\d+) of \d+ rows modelled", text)
    default = re.search(r"C600/default: ([\d.]+)", text)
    datasheet = re.search(r"C600/datasheet: ([\d.]+)", text)
    rows, d, ds = _row("PopRT and ByteMLPerf inference on a C600")
    assert rows == modelled[1] and _near(d, float(default[1])) and _near(ds, float(datasheet[1]))


def _generate_module():
    spec = importlib.util.spec_from_file_location("_docs_generate", ROOT / "docs" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("name", ["validate", "gpu"])
def test_generated_report_is_current(name):
    """``ipukern validate`` and ``validate --gpu`` (about ten seconds each) print today what
    the committed table shows."""
    gen = _generate_module()
    assert gen.render(name) == _generated(name), f"docs/_generated/{name}.txt is stale: " \
                                                 f"python docs/generate.py {name}"


def _cells(text: str, row_id: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", ln.strip()) for ln in text.splitlines() if ln.startswith(row_id + " ")]


@pytest.mark.slow
@pytest.mark.parametrize("flag, name, ids", [
    ("--systems", "systems", ["mlperf1.1-resnet-pod16", "mlperf1.0-resnet-dgxa100"]),
    ("--inference", "inference", ["poprt-resnet50-b1", "poprt-bert-base-pack-b16"])])
def test_slow_report_rows_are_current(flag, name, ids, tmp_path, capsys):
    """Two rows of a slow report, run now, have the cells the committed table shows."""
    from ipukern.cli import main
    assert main(["validate", flag, "--only", ",".join(ids), "--out", str(tmp_path), "--no-progress",
                 "-q"]) == 0
    now = capsys.readouterr().out
    for row_id in ids:
        assert _cells(now, row_id) and _cells(now, row_id) == _cells(_generated(name), row_id), \
            f"docs/_generated/{name}.txt row {row_id} is stale: python docs/generate.py {name}"


def _figures_shown() -> set[str]:
    names = set(re.findall(r"\]\(docs/([\w.-]+\.png)\)", (ROOT / "README.md").read_text(encoding="utf-8")))
    for page in (ROOT / "docs").glob("*.rst"):
        names |= set(re.findall(r"^\.\. (?:image|figure):: ([\w.-]+\.png)", page.read_text(encoding="utf-8"),
                                re.MULTILINE))
    return names


def test_every_docs_figure_has_its_command():
    """Each figure README and the pages show is written by a command (``python
    docs/generate.py NAME`` runs it), not drawn by hand once."""
    shown = _figures_shown()
    assert {"scaling.png", "validation.png"} <= shown
    assert shown <= set(_generate_module().FIGURES), shown - set(_generate_module().FIGURES)


@pytest.mark.slow
def test_validation_figure_is_current(tmp_path):
    """docs/validation.png is what ``ipukern validate`` draws today: same pixel size (the layout
    and the number of groups set it; the pixels differ across matplotlib versions)."""
    pytest.importorskip("matplotlib")
    import struct

    def size(path: Path) -> tuple[int, int]:
        return struct.unpack(">II", path.read_bytes()[16:24])      # the PNG's IHDR width, height

    fresh = _generate_module().figure("validation.png", tmp_path / "v.png")
    assert size(fresh) == size(ROOT / "docs" / "validation.png"), \
        "docs/validation.png is stale: python docs/generate.py validation.png"


# ----------------------------------------------------------------------------- prose numbers
def _sweep() -> dict[tuple[str, int, str], dict[str, float]]:
    """``docs/_generated/scaling.txt`` as (block, batch, cpg) -> GFLOP, IPU and GPU TF/s, util
    (%) and the IPU/GPU ratio; blocks "default", "datasheet" and "optimized" in file order."""
    out = {}
    blocks = _generated("scaling").split("\n# ")
    for name, block in zip(("default", "datasheet", "optimized"), blocks):
        for ln in block.splitlines():
            f = ln.split()
            if len(f) > 10 and f[0] == "resnext50_c128":
                out[(name, int(f[1]), f[2].rstrip("*") if not f[2].endswith("*") else "dense")] = {
                    "gflop": float(f[4]), "ipu": float(f[5]), "util": float(f[6].rstrip("%")),
                    "gpu": float(f[-3]), "ratio": float(f[-1].rstrip("x"))}
    return out


def _prose(path: str, pattern: str) -> list[str]:
    """The numbers of the one sentence of ``path`` that ``pattern`` (a regex with groups)
    matches; the page must still say it."""
    text = " ".join((ROOT / path).read_text(encoding="utf-8").split())
    found = re.findall(pattern, text)
    assert len(found) == 1, f"{path} no longer says {pattern!r} once (found {len(found)})"
    return list(found[0]) if isinstance(found[0], tuple) else [found[0]]


CPGS = ("1", "2", "4", "8", "16", "32", "64")


def test_prose_peak_advantages_are_the_generated_sweep():
    """README and docs/usage: "the peak advantage is 2.7×, not 13×" (hand-optimised GPU
    kernels, then cuDNN's, batch 32)."""
    s = _sweep()
    peak = {b: max(v["ratio"] for (blk, n, _), v in s.items() if blk == b and n == 32)
            for b in ("optimized", "default")}
    for path in ("README.md", "docs/usage.rst"):
        opt, cudnn = _prose(path, r"peak advantage is ([\d.]+)×, not ([\d.]+)×")
        assert _near(opt, peak["optimized"]) and _near(cudnn, peak["default"]), (path, peak)
    dense = _prose("README.md", r"the A100 is ahead \(([\d.]+)× at batch 32\)")[0]
    assert _near(dense, s[("default", 32, "dense")]["ratio"])


def test_prose_of_what_drives_it_is_the_generated_sweep():
    """docs/usage's "What drives it": each number and each direction it states."""
    s = _sweep()
    d = {(n, c): v for (blk, n, c), v in s.items() if blk == "default"}
    for n in (1, 32):      # "from 64 down to 4 channels per group the advantage grows at every step"
        ratios = [d[(n, c)]["ratio"] for c in ("64", "32", "16", "8", "4")]
        assert ratios == sorted(ratios), (n, ratios)
    tie = float(_prose("docs/usage.rst", r"tie within ([\d.]+)%")[0])
    a, b = d[(1, "dense")]["ratio"], d[(1, "64")]["ratio"]
    assert abs(a / b - 1) * 100 <= tie, (a, b)
    lo, hi = _prose("docs/usage.rst", r"keeps its AMP units (\d+)–(\d+)% busy down to 16 channels")
    amp = [d[(32, c)]["util"] for c in ("16", "32", "64", "dense")]
    assert (float(lo), float(hi)) == (min(amp), max(amp)), amp
    slic = _prose("docs/usage.rst", r"which holds (\d+)% at 4")[0]
    assert float(slic) == d[(32, "4")]["util"]
    r = {c: d[(32, c)]["ratio"] for c in ("1", "2", "4", "dense")}    # "falls back ... above dense"
    assert r["dense"] < r["1"] < r["2"] < r["4"], r
    ipu = [d[(32, c)]["ipu"] for c in ("1", "2", "4")]            # "the IPU's rate halves"
    assert all(abs(ipu[i + 1] / ipu[i] - 2) < 0.05 for i in range(2)), ipu
    quicker = _prose("docs/usage.rst", r"faster dedicated kernel, ([\d.]+)× quicker")[0]
    gpu_s = {c: d[(32, c)]["gflop"] / d[(32, c)]["gpu"] for c in ("1", "4")}
    assert _near(quicker, gpu_s["4"] / gpu_s["1"]), gpu_s
    lo, hi = _prose("docs/usage.rst", r"the IPU loses (\d+)–(\d+)% of its rate at batch 32")
    loss = [100 * (1 - s[("datasheet", 32, c)]["ipu"] / d[(32, c)]["ipu"]) for c in (*CPGS, "dense")]
    assert float(lo) <= min(loss) + 0.5 and max(loss) <= float(hi) + 0.5, loss
    assert float(hi) - max(loss) < 1 and min(loss) - float(lo) < 1, loss    # the range is tight
