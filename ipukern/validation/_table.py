"""CSV tables of the validation package: read a packaged (or user) table, write results."""
from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Callable, TypeVar

from .._files import read_input_text

T = TypeVar("T")


def read_table(filename: str, path: str | Path | None,
               fields: Sequence[str]) -> tuple[str, Iterator[tuple[int, dict[str, str]]]]:
    """``(where, rows)``: the packaged ``filename`` unless ``path`` is given; ``rows`` yields
    ``(line number, record)``. Raises ValueError naming the missing columns."""
    if path is None:
        text = resources.files(__package__).joinpath(filename).read_text()
        where = filename
    else:
        text = read_input_text(path, "measurements")
        where = str(path)
    reader = csv.DictReader(text.splitlines())
    missing = [f for f in fields if f not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{where}: missing columns {missing}")
    return where, enumerate(reader, start=2)


def write_table(path: str | Path, dicts: list[dict[str, Any]], fields: Sequence[str]) -> Path:
    """One line per dict (header from the first, or ``fields`` when there is none)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dicts[0]) if dicts else list(fields), lineterminator="\n")
        w.writeheader()
        w.writerows(dicts)
    return path


def select(items: list[T], wanted: Sequence[str] | None, key: Callable[[T], str], what: str) -> list[T]:
    """The items whose ``key`` is in ``wanted`` (all when None), in table order; an unknown
    key is a ValueError listing the known ones."""
    if wanted is None:
        return items
    known = {key(x) for x in items}
    bad = [w for w in wanted if w not in known]
    if bad:
        raise ValueError(f"unknown {what}(s) {bad}; {what}s are {sorted(known)}")
    return [x for x in items if key(x) in set(wanted)]


def build_network(network: str, network_args: str) -> Any:
    """A zoo network from a table's ``network`` and ``network_args`` (``"k=v;k=v"``, ints)."""
    from ..nn.models import MODELS
    if network not in MODELS:
        raise ValueError(f"unknown network {network!r}")
    kw = {}
    for item in filter(None, network_args.split(";")):
        k, _, v = item.partition("=")
        kw[k.strip()] = int(v)
    return MODELS[network](**kw)


def geomean(vals: Sequence[float]) -> float | None:
    """Geometric mean rounded to 3 places (None for no values)."""
    return round(math.exp(statistics.fmean(math.log(v) for v in vals)), 3) if vals else None
