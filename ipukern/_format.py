"""The one table and units helper for printed output: aligned plain-text tables, bytes,
numbers and missing values, written the same way by every command and report.

Conventions (issue 35): tables are aligned plain text (no Markdown), text columns flush left
and numeric columns flush right, missing values ``-``; byte counts are grouped integers with
the unit (``638,976 B``), or KiB / MiB with one decimal where a table compares sizes; other
counts are grouped (``1,472``). A table whose columns are all byte counts may name the unit
once in each header (``max B``) instead of in every cell.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MISSING", "Rest", "fmt_bytes", "fmt_num", "format_table"]

#: what a table shows for a value that does not exist (not modelled, not applicable)
MISSING = "-"


def fmt_num(v: float | int | None, digits: int = 0, suffix: str = "") -> str:
    """``v`` with thousands grouped and ``digits`` decimals; :data:`MISSING` for None."""
    if v is None:
        return MISSING
    return f"{v:,.{digits}f}{suffix}"


def fmt_bytes(n: int | float | None, unit: str = "B") -> str:
    """A byte count: ``"638,976 B"`` (``unit="B"``), ``"624.0 KiB"`` or ``"1.5 MiB"``."""
    if n is None:
        return MISSING
    scale = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    if unit not in scale:
        raise ValueError(f"fmt_bytes: unit must be one of {', '.join(scale)}, got {unit!r}")
    if unit == "B":
        return f"{int(n):,} B"
    return f"{n / scale[unit]:,.1f} {unit}"


def _is_number(text: str) -> bool:
    t = text.strip().replace(",", "").rstrip("%x").removesuffix(" B")
    t = t.split(" ")[0]
    try:
        float(t)
    except ValueError:
        return text.strip() == MISSING
    return True


class Rest(str):
    """The last cell of a row, free text that runs to the end of the line (a reason a row
    is not modelled) without widening its column."""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
                 align: str | None = None, indent: str = "", gap: int = 2, rule: bool = False) -> str:
    """Rows under headers, columns aligned.

    Parameters
    ----------
    headers : sequence of str
    rows : sequence of sequences
        Cells; non-strings are ``str()``-ed (format numbers first with :func:`fmt_num`). A
        row shorter than the headers is padded with empty cells; one whose last cell is a
        :class:`Rest` ends in that free text.
    align : str, optional
        One ``"l"`` or ``"r"`` per column; default: right for columns whose cells are all
        numbers (or missing), left otherwise.
    rule : bool
        A line of dashes under the headers (the sweep tables, read as a grid).
    """
    n = len(headers)
    cells, rests = [], []
    for r in rows:
        if len(r) > n:
            raise ValueError(f"format_table: a row has {len(r)} cells for {n} headers")
        rest = isinstance(r[-1], Rest) if len(r) else False
        row = [str(c) for c in (r[:-1] if rest else r)]
        cells.append(row + ([] if rest else [""] * (n - len(row))))
        rests.append(str(r[-1]) if rest else None)
    if align is None:
        align = "".join("r" if any(len(row) > i and row[i] for row in cells)
                        and all(_is_number(row[i]) or not row[i] for row in cells if len(row) > i)
                        else "l" for i in range(n))
    if len(align) != n or set(align) - {"l", "r"}:
        raise ValueError(f"format_table: align must be {n} of 'l'/'r', got {align!r}")
    widths = [max([len(h)] + [len(row[i]) for row in cells if len(row) > i])
              for i, h in enumerate(headers)]
    sep = " " * gap

    def line(row: Sequence[str], rest: str | None) -> str:
        parts = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, align)]
        return indent + sep.join(parts + ([rest] if rest is not None else [])).rstrip()

    head = [line(list(headers), None)]
    if rule:
        head.append(indent + sep.join("-" * w for w in widths))
    return "\n".join(head + [line(r, x) for r, x in zip(cells, rests)])
