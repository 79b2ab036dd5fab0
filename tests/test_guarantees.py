"""The manual's "Guarantees" (docs/programs.rst) states numbers; they must be the ones the code
enforces."""
import re
from pathlib import Path

from ipukern import _checks, machine
from ipukern.conv import MAX_KERNEL_PARAM
from ipukern.core.engine import MAX_OVERFLOW_ARENA_FACTOR
from ipukern.graph.tilefn import MAX_VERTEX_CYCLES
from ipukern.ops._cache import DEFAULT_PLAN_CACHE_BYTES, PLAN_CACHE_SIZE

PAGE = Path(__file__).resolve().parents[1] / "docs" / "programs.rst"


def guarantees() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("\nGuarantees\n----------\n")
    return " ".join(text[start:].split())


def test_readme_guarantees_match_the_code():
    g = guarantees()
    assert _checks.MAX_DIM == 2**31 - 1 and "at most 2**31 - 1 per dimension" in g
    assert MAX_KERNEL_PARAM == 64 and "dilations are at most 64" in g
    assert MAX_VERTEX_CYCLES == 2**48 and "0 .. 2**48 per vertex" in g
    assert machine._INT_LIMITS["n_workers"] == 64 and "at most 64 workers" in g
    mib = DEFAULT_PLAN_CACHE_BYTES // 2**20
    assert re.search(rf"At most {PLAN_CACHE_SIZE} programs and {mib} MiB", g)
    assert MAX_OVERFLOW_ARENA_FACTOR == 2 and "twice the machine's SRAM" in g
    assert "boundscheck=True" in g and "exits 130" in g
