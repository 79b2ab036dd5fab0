"""The stream file of a sweep: one JSON line per finished point, keyed by the point's hash.

Each record is appended and flushed as soon as its point finishes, so an interrupted sweep
(Ctrl-C, a lost machine) keeps every finished point, and the next run with the same file
computes only the others. A line cut short by the interruption is dropped (its point runs
again); lines of points the current sweep does not contain are kept and ignored, so one file
can hold several sweeps.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["Store"]


class Store:
    """The records of ``path`` by key (read on opening), and an appender for new ones."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)
        self.records: dict[str, dict] = {}
        self._fh: Any = None
        if self.path is not None:
            if self.path.is_dir():
                raise ValueError(f"out: {self.path} is a directory; give the stream file's path "
                                 "(e.g. explore.jsonl)")
            if self.path.exists():
                self._read()

    def _read(self) -> None:
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):                  # a line cut short by an interruption: drop it
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
        for n, line in enumerate(data[:end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"out: {self.path} line {n} is not a JSON record; is it an "
                                 "ipukern explore stream file?") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
                raise ValueError(f"out: {self.path} line {n} has no point key; is it an "
                                 "ipukern explore stream file?")
            self.records[rec["key"]] = rec

    def add(self, record: dict) -> dict:
        """Keep ``record`` and append it to the file (flushed); returns it as read back."""
        line = json.dumps(record, allow_nan=False)
        record = json.loads(line)            # the bits a resumed run reads
        self.records[record["key"]] = record
        if self.path is not None:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            self._fh.write(line + "\n")
            self._fh.flush()
        return record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
