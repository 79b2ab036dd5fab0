"""The on-disk cache of a network program's host copy tables (execute mode).

A network's first execution builds the host form of every copy table it runs (its
rearrangements', the reads of its conv outputs: :attr:`ipukern.core.CopyTable.kernel_columns`,
tens of millions of runs for ResNet-50 at batch 8) and the shadow receives of its conv
programs' fused steps (:class:`ipukern.core.host.fused.ShadowHint`: which window and weight
copies land in a thread's shadow row, planned against every other step of the program).
They depend only on the compiled program, so a second process running the same network
reads them from disk instead: memory-mapped ``.npy`` files, paged in as the copies run.
A shadow receive read back is used only where it fits its step and stays inside the
arena (:func:`ipukern.core.host.fused.hint_fits`), else planned again.

- Key: the network's structure (every node's layer key, inputs and outputs), the batch,
  the plan context (machine spec, dtype, partials, memory proportion), batch-norm folding,
  the ipukern version and a fingerprint of the package's files (size and mtime of every
  ``.py``/``.pyx``/``.so``), so an edited checkout never reads tables of another build.
- Place: ``$IPUKERN_CACHE_DIR/tables`` (default ``$XDG_CACHE_HOME/ipukern/tables``, else
  ``~/.cache/ipukern/tables``); ``cache=False`` (``run_network``) bypasses it.
- Written atomically: an entry is a directory filled under a temporary name and renamed
  into place with its manifest, so a reader sees a whole entry or none. An entry that does
  not load (missing or truncated file, other columns than its manifest says, bytes that do
  not add up) is deleted and rebuilt, never trusted.
- Bounded: after a write, least recently used entries are removed beyond
  :data:`MAX_BYTES` (``IPUKERN_TABLE_CACHE_BYTES``).

Host speed only: the tables are the ones a cold run builds (same copies, same order), so
bits and cycles do not change.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ... import _settings
from ..._version import __version__
from ...core import CopyTable
from ...core.host.fused import FusedStep, ShadowHint
from ...core.host.shadow import ShadowPlan

__all__ = ["MAX_BYTES", "STATS", "cache_root", "flush", "load", "network_key", "store"]

#: default bound on the cache's bytes on disk (a host-disk bound, not a hardware figure:
#: one ResNet-50 batch-8 entry is about 0.6 GB)
MAX_BYTES = 4 << 30
#: changes when the entry format does
SCHEMA = 2
_KINDS = ("r", "a", "o")          # rearrangement, arena read by a rearrangement, output read
_STALE_TMP_S = 3600.0
_FINGERPRINT: list[str] = []
#: entries used, entries missing or broken (rebuilt), entries written, in this process
STATS = {"hits": 0, "misses": 0, "broken": 0, "writes": 0}
_WRITERS: list[threading.Thread] = []


def cache_root() -> Path:
    """The directory holding the entries (not created here)."""
    d = _settings.cache_dir()
    if d:
        return Path(d) / "tables"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ipukern" / "tables"


def _code_fingerprint() -> str:
    """Size and mtime of every source and extension file of the package (made once)."""
    if not _FINGERPRINT:
        pkg = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for p in sorted(pkg.rglob("*")):
            if p.suffix in (".py", ".pyx", ".so", ".h", ".pxd"):
                st = p.stat()
                h.update(f"{p.relative_to(pkg)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def network_key(prog: Any) -> str:
    """Hex key of a compiled network program (see the module docstring)."""
    net = prog.net
    nodes = [(name, n.layer.key() if n.layer is not None else None, tuple(n.inputs),
              n.sample_shape, n.kind) for name, n in net.nodes.items()]
    text = repr((SCHEMA, __version__, _code_fingerprint(), nodes, tuple(net.inputs),
                 tuple(net.outputs), prog.batch, repr(prog.ctx), prog.fold_bn))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _slots(prog: Any) -> dict[str, tuple[Any, str, Any, int]]:
    """Every host table a run of ``prog`` may build, by name: ``(owner, attr, program,
    bytes)``, where the table lives in ``owner.__dict__[attr]`` (keyed by the program for
    arena reads) and copies ``bytes`` in all."""
    producer = {s.node: s for s in prog.steps}
    out: dict[str, tuple[Any, str, Any, int]] = {}
    for i, s in enumerate(prog.steps):
        for k, r in enumerate(s.rearrs):
            if r is None:
                continue
            nbytes = r.src.n_elems * r.src.itemsize
            out[f"r{i}.{k}"] = (r, "_copies", None, nbytes)
            src = producer.get(s.srcs[k])
            p = src.plan.info.get("program") if src is not None else None
            if p is not None:
                out[f"a{i}.{k}"] = (r, "_arena_tables", p, nbytes)
        p = s.plan.info.get("program")
        if p is not None and s.plan.output is not None:
            lay = s.plan.output
            out[f"o{i}"] = (lay, "_read_table", p, lay.n_elems * lay.itemsize)
    return out


def _get(owner: Any, attr: str, p: Any) -> CopyTable | None:
    got = owner.__dict__.get(attr)
    if attr == "_copies":
        return got
    if attr == "_arena_tables":
        got = (got or {}).get(id(p))
    return got[1] if got is not None and got[0] is p else None


def _put(owner: Any, attr: str, p: Any, tab: CopyTable) -> None:
    if attr == "_copies":
        owner.__dict__.setdefault(attr, tab)
    elif attr == "_arena_tables":
        owner.__dict__.setdefault(attr, {}).setdefault(id(p), (p, tab))
    elif owner.__dict__.get(attr) is None:
        owner.__dict__[attr] = (p, tab)


def load(prog: Any, root: Path | None = None) -> bool:
    """Give ``prog``'s tables their host columns from the cache entry, if there is a whole
    one (a broken one is removed). Returns whether an entry was used."""
    root = cache_root() if root is None else root
    entry = root / network_key(prog)
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        slots = _slots(prog)
        tables = {name: _read_table(entry, name, meta, slots[name][3])
                  for name, meta in manifest["tables"].items()}
        hints = {name: _read_hint(entry, name, meta)
                 for name, meta in manifest.get("shadows", {}).items()}
        programs = _hint_programs(prog)
        for name in hints:
            if name not in programs:
                raise KeyError(name)
    except FileNotFoundError:
        if entry.exists():                           # a manifest or a column missing
            shutil.rmtree(entry, ignore_errors=True)
            STATS["broken"] += 1
        STATS["misses"] += 1
        return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        shutil.rmtree(entry, ignore_errors=True)     # rebuilt by this run, written after it
        STATS["broken"] += 1
        STATS["misses"] += 1
        return False
    for name, tab in tables.items():
        owner, attr, p, _ = slots[name]
        _put(owner, attr, p, tab)
    for name, hint in hints.items():
        program, i = programs[name]
        built = program.host_cache.get("fused")
        if built is None or i not in built[1]:      # not fused yet in this process
            program.host_cache.setdefault("shadow_hints", {})[i] = hint
    os.utime(entry / "manifest.json")                # most recently used
    STATS["hits"] += 1
    return True


def _read_table(entry: Path, name: str, meta: dict, nbytes: int) -> CopyTable:
    """One table's five memory-mapped columns, checked against the manifest."""
    cols = []
    for c, dt in enumerate(("int32", "int64", "int32", "int64", "int64")):
        a = np.load(entry / f"{name}.{c}.npy", mmap_mode="r", allow_pickle=False)
        if a.dtype != np.dtype(dt) or a.shape != (int(meta["n"]),):
            raise ValueError(f"table cache: {name}.{c} holds {a.dtype} {a.shape}")
        cols.append(a)
    if int(meta["bytes"]) != nbytes:
        raise ValueError(f"table cache: {name} copies {meta['bytes']} B, the program {nbytes} B")
    return CopyTable.from_host_columns(cols)


_HINT_TYPES = {"shadowed": np.bool_, "vflags": np.uint8, "t0": np.int32, "t1": np.int64,
               "t2": np.int64, "t3": np.int64, "t4": np.int64}
_ARG_TYPES = (np.int32, np.int64, np.int64, np.int64, np.int64, np.int64, np.int64)


def _hint_programs(prog: Any) -> dict[str, tuple[Any, int]]:
    """Every fused step a run of ``prog`` may plan a shadow receive for, by name:
    ``(core program, step index)`` of each conv program (each once, in step order)."""
    out = {}
    for k, p in enumerate(prog._programs()):
        program = getattr(p, "program", None)
        if program is not None:
            for i in range(len(program.steps) - 1):
                out[f"s{k}.{i}"] = (program, i)
    return out


def _hints(prog: Any) -> dict[str, ShadowHint]:
    """The shadow receives ``prog``'s runs have planned, by :func:`_hint_programs` name."""
    out = {}
    for name, (program, i) in _hint_programs(prog).items():
        got = program.host_cache.get("fused")
        f = got[1].get(i) if got is not None else None
        h = f.hint() if isinstance(f, FusedStep) else None
        if h is not None:
            out[name] = h
    return out


def _hint_arrays(h: ShadowHint) -> dict[str, np.ndarray]:
    pl = h.plan
    out = {"shadowed": pl.shadowed, "vflags": pl.vflags}
    out.update({f"t{c}": a for c, a in enumerate(pl.table)})
    for n, cols in h.args.items():
        out.update({f"n{n}.{c}": a for c, a in enumerate(cols)})
    return out


def _read_hint(entry: Path, name: str, meta: dict) -> ShadowHint:
    """One fused step's shadow receive, memory-mapped, checked for the types it was
    written with (its bounds are checked against the step when it is used)."""
    def col(field: str, dt: Any) -> np.ndarray:
        a = np.load(entry / f"{name}.{field}.npy", mmap_mode="r", allow_pickle=False)
        if a.dtype != np.dtype(dt) or a.ndim != 1:
            raise ValueError(f"table cache: {name}.{field} holds {a.dtype} {a.shape}")
        return a
    c = {f: col(f, dt) for f, dt in _HINT_TYPES.items()}
    plan = ShadowPlan(c["shadowed"], tuple(c[f"t{k}"] for k in range(5)), c["vflags"])
    args = {int(n): tuple(col(f"n{int(n)}.{k}", dt) for k, dt in enumerate(_ARG_TYPES))
            for n in meta["threads"]}
    return ShadowHint(plan, args)


def store(prog: Any, root: Path | None = None, *, wait: bool = False) -> threading.Thread | None:
    """Write the host tables ``prog``'s runs have built as a new entry (none if one exists),
    on a background thread (joined at exit; ``wait=True`` joins it now)."""
    root = cache_root() if root is None else root
    entry = root / network_key(prog)
    if (entry / "manifest.json").exists():
        return None
    tables = {}
    for name, (owner, attr, p, nbytes) in _slots(prog).items():
        tab = _get(owner, attr, p)
        if tab is not None:
            cols = tab.kernel_columns
            if int(np.asarray(cols[4]).sum()) == nbytes:
                tables[name] = cols
    if not tables:
        return None
    hints = _hints(prog)
    t = threading.Thread(target=_write, args=(root, entry, tables, hints),
                         name="ipukern-table-cache")
    _WRITERS.append(t)
    t.start()
    if wait:
        t.join()
    return t


def flush() -> None:
    """Wait for every entry being written."""
    while _WRITERS:
        _WRITERS.pop().join()


def _write(root: Path, entry: Path, tables: dict[str, tuple[np.ndarray, ...]],
           hints: dict[str, ShadowHint] | None = None) -> None:
    """Fill a temporary directory, then rename it into place (a failure leaves no entry)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=root))
        try:
            meta = {}
            for name, cols in tables.items():
                for c, a in enumerate(cols):
                    np.save(tmp / f"{name}.{c}.npy", np.ascontiguousarray(a), allow_pickle=False)
                meta[name] = {"n": int(cols[4].size), "bytes": int(np.asarray(cols[4]).sum())}
            shadows = {}
            for name, h in (hints or {}).items():
                for field, a in _hint_arrays(h).items():
                    np.save(tmp / f"{name}.{field}.npy", np.ascontiguousarray(a), allow_pickle=False)
                shadows[name] = {"threads": sorted(h.args)}
            (tmp / "manifest.json").write_text(json.dumps({"schema": SCHEMA, "tables": meta,
                                                           "shadows": shadows}))
            os.rename(tmp, entry)              # atomic; fails if another process won
            STATS["writes"] += 1
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        _trim(root)
    except OSError:
        return                                 # a read-only or full disk: run uncached


def _trim(root: Path) -> None:
    """Remove least recently used entries beyond the byte bound, and stale temporaries."""
    limit = _settings.table_cache_bytes()
    limit = MAX_BYTES if limit is None else limit
    now = time.time()
    entries = []
    for d in root.iterdir():
        if d.name.startswith("."):
            if now - d.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(d, ignore_errors=True)
            continue
        m = d / "manifest.json"
        if m.exists():
            entries.append((m.stat().st_mtime, sum(f.stat().st_size for f in d.iterdir()), d))
    total = sum(e[1] for e in entries)
    for _, size, d in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        shutil.rmtree(d, ignore_errors=True)
        total -= size
