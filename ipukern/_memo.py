"""One registry for every cache in ipukern: bounded LRU caches, one clear, one report.

Each owner creates its caches at import and registers them itself (nobody enumerates the
owners)::

    _PLANS = _memo.register(_memo.LruCache("nn.plans", maxsize=4096), per_batch=True)

- :class:`LruCache`: a dict under a lock, least recently used entries dropped beyond
  ``maxsize`` entries and/or ``max_bytes`` (the sum of ``sizeof(value)``, measured when it
  trims, since a value may grow after it is cached, such as a program's arena on its first
  execution); hit and miss counts.
- :func:`on_clear`: a cache that is not an :class:`LruCache` (a ``functools.lru_cache``'d
  function's ``cache_clear``, a pool of host buffers) joins the registry by its clear
  function.
- :func:`clear_all`: clears every registered cache. ``ik.clear_plan_cache()`` and
  ``ik.nn.clear_network_caches()`` are this one operation.
- :func:`info`: entries, bytes and limits of each registered cache, by name.
- :func:`trial`: a scope whose new entries in the caches registered ``per_batch`` are
  dropped on exit (the max-batch search compiles the network once per batch it tries).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["HOST_BOUND", "HOST_CACHE_BYTES", "LruCache", "clear_all", "host_nbytes", "info", "names",
           "on_clear", "register", "register_lru", "trial"]

#: the host bytes each network cache may hold (a host-memory bound, not a hardware figure):
#: unbounded, estimates of ResNet-50 at batches 1..40 held 7.1 GB of plans and copy tables
HOST_CACHE_BYTES = 1 << 30


_MISSING = object()


class LruCache:
    """A thread-safe mapping that keeps its most recently used entries.

    Parameters
    ----------
    name : str
        Its name in :func:`info` (the owner's module, e.g. ``"nn.conv_programs"``).
    maxsize : int, optional
        Entries kept (None: no bound by entries).
    max_bytes : int or callable, optional
        Bytes kept, the sum of ``sizeof(value)`` (None: no bound by bytes); a callable is
        called at each trim (a limit read from a setting at use).
    sizeof : callable, optional
        Bytes of one value (needed with ``max_bytes``).
    size_at_put : bool
        Measure a value once, when stored (values that never grow; a costly ``sizeof`` such
        as :func:`host_nbytes`), instead of at every trim.

    After a :meth:`put`, least recently used entries are dropped until both bounds hold; an
    entry larger than ``max_bytes`` alone is not kept at all.
    """

    def __init__(self, name: str, maxsize: int | None = None,
                 max_bytes: int | Callable[[], int] | None = None,
                 sizeof: Callable[[Any], int] | None = None, *, size_at_put: bool = False):
        if max_bytes is not None and sizeof is None:
            raise ValueError(f"cache {name!r}: max_bytes needs sizeof")
        self.name = name
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.sizeof = sizeof
        self._sizes: dict[Hashable, int] | None = {} if size_at_put and sizeof is not None else None
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ mapping
    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            v = self._data.get(key, _MISSING)
            if v is _MISSING:
                self.misses += 1
                return default
            self.hits += 1
            self._data.move_to_end(key)
            return v

    def put(self, key: Hashable, value: Any) -> Any:
        """Store ``value`` (most recently used), trim, and return it."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if self._sizes is not None:
                self._sizes[key] = self._measure(value)
            self._trim_locked()
        return value

    def setdefault(self, key: Hashable, value: Any) -> Any:
        """The value already under ``key`` (another thread built it first), else ``value``
        stored as by :meth:`put`."""
        with self._lock:
            v = self._data.get(key, _MISSING)
            if v is _MISSING:
                self._data[key] = v = value
                if self._sizes is not None:
                    self._sizes[key] = self._measure(value)
            self._data.move_to_end(key)
            self._trim_locked()
            return v

    def _measure(self, value: Any) -> int:
        n = self.sizeof(value)
        if self.sizeof is host_nbytes:
            _remember_size(value, n)
        return n

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if self._sizes is not None:
                self._sizes.pop(key, None)
            return self._data.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            if self._sizes is not None:
                self._sizes.clear()

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._data)

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._data.values())

    def items(self) -> list[tuple[Hashable, Any]]:
        """(key, value) pairs, least recently used first (a copy)."""
        with self._lock:
            return list(self._data.items())

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Hashable]:
        """Over a copy of the keys (least recently used first)."""
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"LruCache({self.name!r}, {len(self)} entries)"

    # ------------------------------------------------------------------ bounds
    def limits(self) -> tuple[int | None, int | None]:
        """(max entries, max bytes) now (None: unbounded)."""
        b = self.max_bytes
        return self.maxsize, (b() if callable(b) else b)

    def set_limits(self, maxsize: int | None = _MISSING,          # type: ignore[assignment]
                   max_bytes: int | Callable[[], int] | None = _MISSING) -> None:  # type: ignore[assignment]
        """Change the bounds (an argument left out keeps its bound) and trim."""
        with self._lock:
            if maxsize is not _MISSING:
                self.maxsize = maxsize
            if max_bytes is not _MISSING:
                if max_bytes is not None and self.sizeof is None:
                    raise ValueError(f"cache {self.name!r}: max_bytes needs sizeof")
                self.max_bytes = max_bytes
            self._trim_locked()

    def nbytes(self) -> int | None:
        """Sum of ``sizeof`` over the values (None without ``sizeof``)."""
        if self.sizeof is None:
            return None
        with self._lock:
            if self._sizes is not None:
                return sum(self._sizes.values())
            return sum(self.sizeof(v) for v in self._data.values())

    def trim(self) -> None:
        """Drop least recently used entries beyond the bounds (values may have grown)."""
        with self._lock:
            self._trim_locked()

    def _trim_locked(self) -> None:
        maxsize, max_bytes = self.limits()
        sizes = self._sizes
        if maxsize is not None:
            while len(self._data) > maxsize:
                old_key, _ = self._data.popitem(last=False)
                if sizes is not None:
                    sizes.pop(old_key, None)
        if max_bytes is not None:
            total = (sum(sizes.values()) if sizes is not None
                     else sum(self.sizeof(v) for v in self._data.values()))
            while self._data and total > max_bytes:
                old_key, old = self._data.popitem(last=False)
                total -= sizes.pop(old_key) if sizes is not None else self.sizeof(old)

    def info(self) -> dict[str, Any]:
        maxsize, max_bytes = self.limits()
        return {"entries": len(self), "bytes": self.nbytes(), "max_entries": maxsize,
                "max_bytes": max_bytes, "hits": self.hits, "misses": self.misses}


def host_nbytes(value: Any) -> int:
    """Bytes of the NumPy arrays reachable from ``value`` (through attributes, containers),
    each buffer counted once (a view counts its base): what a cached plan keeps alive.
    Objects without a ``__dict__`` other than containers and arrays (locks, specs' slots)
    are not followed; types, modules and functions neither."""
    import numpy as np
    seen: set[int] = set()
    bufs: set[int] = set()
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, np.ndarray):
            root = v
            while isinstance(root.base, np.ndarray):
                root = root.base
            if id(root) not in bufs:
                bufs.add(id(root))
                total += root.nbytes
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
        elif not isinstance(v, (type, str, bytes, int, float, complex, bool)) and not callable(v):
            d = getattr(v, "__dict__", None)
            if isinstance(d, dict):
                known = d.get(_NBYTES) if v is not value else None
                if known is not None:
                    total += known      # measured as another cache's value: not walked again
                else:
                    stack.extend(d.values())
    return total


#: where a value measured at put keeps its size, so values that hold it (a network program
#: holds its layers' conv programs) add it instead of walking it again
_NBYTES = "_memo_host_nbytes"


def _remember_size(value: Any, nbytes: int) -> None:
    for v in (value if isinstance(value, tuple) else (value,)):
        d = getattr(v, "__dict__", None)
        if isinstance(d, dict) and not isinstance(v, type):
            d[_NBYTES] = nbytes if v is value else host_nbytes(v)


#: LruCache arguments of a cache bounded by the host bytes its values keep alive
HOST_BOUND: dict[str, Any] = {"max_bytes": HOST_CACHE_BYTES, "sizeof": host_nbytes, "size_at_put": True}


# ---------------------------------------------------------------------- registry
class _Cleared:
    """A cache known by its clear function (and optionally an info function)."""

    def __init__(self, name: str, clear: Callable[[], Any], info: Callable[[], dict] | None):
        self.name, self._clear, self._info = name, clear, info

    def clear(self) -> None:
        self._clear()

    def info(self) -> dict[str, Any]:
        out = {"entries": None, "bytes": None, "max_entries": None, "max_bytes": None}
        if self._info is not None:
            out.update(self._info())
        return out


_REGISTRY: dict[str, LruCache | _Cleared] = {}
_PER_BATCH: list[LruCache] = []
_REG_LOCK = threading.Lock()


def register(cache: LruCache, *, per_batch: bool = False) -> LruCache:
    """Add ``cache`` to the registry (by its name; re-registering a name replaces it, as a
    reloaded module does) and return it. ``per_batch``: its entries belong to one batch
    size, so :func:`trial` drops those a trial added."""
    if not isinstance(cache, LruCache):
        raise TypeError(f"register() takes an LruCache, got {type(cache).__name__}; "
                        "use on_clear() for other caches")
    with _REG_LOCK:
        old = _REGISTRY.get(cache.name)
        if old is not None and old in _PER_BATCH:
            _PER_BATCH.remove(old)           # type: ignore[arg-type]
        _REGISTRY[cache.name] = cache
        if per_batch:
            _PER_BATCH.append(cache)
    return cache


def on_clear(clear: Callable[[], Any], *, name: str | None = None,
             info: Callable[[], dict] | None = None) -> Callable[[], Any]:
    """Register a cache that is not an :class:`LruCache` by its clear function (called by
    :func:`clear_all`); ``info``: its entries (and limits) for :func:`info`. Returns
    ``clear``."""
    if not callable(clear):
        raise TypeError("on_clear() takes a callable")
    key = name or f"{getattr(clear, '__module__', '?')}.{getattr(clear, '__qualname__', repr(clear))}"
    with _REG_LOCK:
        _REGISTRY[key] = _Cleared(key, clear, info)
    return clear


def register_lru(name: str, fn: Any) -> Any:
    """Register a ``functools.lru_cache``'d function (cleared by its ``cache_clear``, its
    ``cache_info`` reported); returns ``fn``."""
    def _info() -> dict:
        ci = fn.cache_info()
        return {"entries": ci.currsize, "max_entries": ci.maxsize, "hits": ci.hits, "misses": ci.misses}
    on_clear(fn.cache_clear, name=name, info=_info)
    return fn


def clear_all() -> None:
    """Clear every registered cache."""
    with _REG_LOCK:
        caches = list(_REGISTRY.values())
    for c in caches:
        c.clear()


def info() -> dict[str, dict[str, Any]]:
    """Per registered cache (by name): entries, bytes, max_entries, max_bytes (None where
    not known or unbounded), and hits/misses where counted."""
    with _REG_LOCK:
        caches = sorted(_REGISTRY.items())
    return {name: c.info() for name, c in caches}


def names() -> list[str]:
    """The registered caches' names, sorted."""
    with _REG_LOCK:
        return sorted(_REGISTRY)


@contextmanager
def trial() -> Iterator[None]:
    """Leave the per-batch caches as they were: what is cached inside is dropped on exit.

    The max-batch search compiles the network at batches it tries once; kept, each trial's
    plans and index tables piled up (MobileNetV2's search peaked at 6.5 GB of host memory,
    1.8 GB when every trial's entries are dropped). Entries present before the trial stay
    (a trial's hits may refresh them)."""
    with _REG_LOCK:
        caches = list(_PER_BATCH)
    before = [set(c.keys()) for c in caches]
    try:
        yield
    finally:
        for c, keys in zip(caches, before):
            for k in c.keys():
                if k not in keys:
                    c.pop(k)
