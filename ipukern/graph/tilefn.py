"""User-written per-tile functions ("codelets"), compiled with Numba and run as vertices.

A tile function is a module-level Python function over NumPy arrays. Each array is the
calling tile's *own* block of one tensor, so the function can only touch its tile's
memory; data reaches a tile only through exchanges (the BSP rule)::

    @ipukern.tile_function(cycles=lambda src, dst: 5 * dst.size + 300)
    def blur(src, dst):            # src, dst: this tile's blocks, e.g. (bh + 2, bw + 2)
        ...

How it runs
-----------
- The function is compiled with ``numba.njit(cache=True)`` (fastmath off) for float32
  arrays of the dimensions its tensor arguments have on the tiles (C-contiguous).
- A generated **driver** (:mod:`ipukern.graph._driver`) walks every vertex of a compute
  set in one compiled call (a ``prange`` over vertices), so there is no Python loop over
  tiles per superstep. Vertices of one compute set touch disjoint tiles, so the result
  does not depend on the number of host threads. Drivers are cached on disk next to
  Numba's cache (``IPUKERN_CACHE_DIR``, else ``$XDG_CACHE_HOME/ipukern/tilefn``, else
  ``~/.cache/ipukern/tilefn``).
- Measured on the 2-core dev machine (Numba 0.68): a first compile costs 1.2-1.5 s for a
  loop kernel (the prange driver is most of it) and ~7 s for one calling ``np.dot``;
  loading both from the cache in a new process costs ~0.35 s for the first function
  (Numba's parallel runtime starting) and 0.01-0.03 s for each further one.
- Compilation happens when a vertex batch is built (``Graph.compute``,
  :meth:`TileFunction.vertex_batch`) or when :meth:`TileFunction.compile` is called for
  warm-up -- never inside a running superstep. Numba's own errors are re-raised as
  :class:`TileFunctionCompileError` naming the function and the argument types.

Cycle estimates
---------------
The simulator cannot know what a user's code costs on a tile, so the user states it:
``cycles=f`` (called with one :class:`TileShape` per argument, returns an int) or
``per_element_cycles=c`` (``ceil(c * elements of the first argument)``). The batch is
marked ``user_estimate=True`` and profiles flag such supersteps ``[user estimate]``.

Limits
------
- float32 only: Numba has no float16 arithmetic on the CPU.
- Only tensor arguments (no scalars): constants go in module globals, which Numba
  freezes into the compiled code, like constants in a real codelet's code memory.
- ``NUMBA_DISABLE_JIT=1`` runs everything as plain Python (slow; for debugging and
  coverage).

Memory safety
-------------
A tile function receives NumPy views of its own tile's blocks inside the device arena.
By default (``boundscheck=True``) Numba checks every index of those arrays, so an index
outside a block raises :class:`TileFunctionError` naming the function instead of
touching other bytes; measured on the 4096 x 4096 stencil the checks cost ~3% host time.
An exception raised inside the function (checked index, ``raise``) reaches the caller
with its own type and message, also from the parallel driver.
``boundscheck=False`` drops the checks for speed and is unchecked: an index outside the
block reads or writes whatever lies next to it -- other blocks of the same tile, another
tile's memory or, past the arena's ends, the host heap (a later crash). Helper functions
a tile function calls are checked only if they are themselves jitted with
``boundscheck=True``.
"""
from __future__ import annotations

import inspect
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..machine import MachineSpec
from ..core.program import ArgViews, VertexBatch
from . import _driver
from ._driver import NUMBA_DTYPES as _NUMBA_DTYPES
from ._driver import cache_dir

__all__ = ["TileFunction", "TileFunctionError", "TileFunctionCompileError", "TileShape", "ArgViews",
           "tile_function", "cache_dir"]

class TileFunctionError(ValueError):
    """A tile function used in a way the simulated machine cannot run (wrong arguments,
    a tensor missing from a tile it runs on, a bad cycle estimate...)."""


class TileFunctionCompileError(TileFunctionError):
    """Numba could not compile a tile function; the message carries Numba's own."""


class TileShape(tuple):
    """The shape of one argument's block on one tile, as passed to a ``cycles`` formula.

    A tuple of ints with ``.shape`` (itself), ``.size`` (elements) and ``.ndim``, so a
    formula reads like NumPy code: ``cycles=lambda a, b, c: a.shape[0] * a.shape[1] * b.shape[1]``.
    """

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self)

    @property
    def size(self) -> int:
        return int(math.prod(self))

    @property
    def ndim(self) -> int:
        return len(self)


_LOCK = threading.Lock()
#: largest cycle estimate of one vertex (2**48, ~2.4 days at 1.33 GHz): sums over the
#: vertices of a tile and the supersteps of a program stay far below int64's 2**63
MAX_VERTEX_CYCLES = 2**48


def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _code_names(c)
    return names


# --------------------------------------------------------------------------- codelet
@dataclass(frozen=True, eq=False)
class _TileFunctionCodelet:
    """The codelet of a tile-function vertex batch: runs the compiled driver."""

    name: str
    tile_fn: "TileFunction"
    spec: tuple[tuple[str, int], ...]

    def run(self, data: np.ndarray, batch: VertexBatch, n_threads: int) -> None:
        driver = self.tile_fn._driver(self.spec)
        try:
            status = _driver.run_driver(driver, data, batch.tiles, batch.args, n_threads)
            failed = np.flatnonzero(status)
            if failed.size:
                self._raise_for(data, batch, failed)
        except IndexError as err:
            raise TileFunctionError(
                f"tile function {self.tile_fn.name!r} indexed outside its tile-local block: "
                f"{err}. A tile function only sees its own tile's blocks of its arguments; "
                "data from other tiles must be exchanged in first") from err

    def _raise_for(self, data: np.ndarray, batch: VertexBatch, failed: np.ndarray) -> None:
        """Re-run the first failed vertex alone to raise the user's exception (type and
        message); the parallel driver only knows that it failed."""
        v = int(failed[0])
        tile = int(batch.tiles[v])
        where = f"on tile {tile}" + (f" (and {failed.size - 1} other tiles)" if failed.size > 1 else "")
        try:
            self.tile_fn.jit(*_driver.block_views(data, self.spec, tile, batch.args, v))
        except Exception as err:
            err.add_note(f"raised by tile function {self.tile_fn.name!r} {where}")
            raise
        raise TileFunctionError(
            f"tile function {self.tile_fn.name!r} raised an exception {where}, but re-running that "
            "vertex alone did not reproduce it (it had already changed its blocks); use "
            "parallel=False to see the exception where it happens")


# --------------------------------------------------------------------------- TileFunction
class TileFunction:
    """A per-tile function compiled with Numba, with a user-supplied cycle estimate.

    Create with the :func:`tile_function` decorator. Calling the object calls the compiled
    function directly (on host arrays, e.g. in tests).

    Attributes
    ----------
    py_func : function
        The original Python function.
    jit : numba dispatcher
        ``numba.njit(cache=True)(py_func)``; its ``signatures`` list what was compiled.
    name : str
    n_args : int
        Number of (tensor) arguments.
    cached : bool
        Whether Numba can cache it (False for functions without a source file).
    compile_log : list of dict
        One entry per argument spec compiled in this process: ``spec``, ``seconds``,
        ``function_cache_hits``, ``driver_cache_hits``.
    """

    def __init__(self, py_func: Callable, *, cycles: Callable[..., int] | None = None,
                 per_element_cycles: float | None = None, name: str | None = None,
                 parallel: bool = True, boundscheck: bool = True):
        if not inspect.isfunction(py_func):
            raise TileFunctionError(f"tile_function needs a plain Python function, got {py_func!r}")
        fname = py_func.__name__
        if fname == "<lambda>":
            raise TileFunctionError("a tile function must be a module-level `def`, not a lambda: "
                                    "Numba can only cache named module-level functions")
        if "<locals>" in py_func.__qualname__ or py_func.__closure__:
            raise TileFunctionError(
                f"tile function {py_func.__qualname__!r} is defined inside another function; "
                "define it at module level (closures cannot be cached by Numba)")
        if (cycles is None) == (per_element_cycles is None):
            raise TileFunctionError(
                f"tile function {fname!r} needs exactly one cycle estimate: cycles=<callable of "
                "the per-tile argument shapes> or per_element_cycles=<cycles per element of the "
                "first argument>")
        if cycles is not None and not callable(cycles):
            raise TileFunctionError(f"tile function {fname!r}: cycles must be callable, got {cycles!r}")
        if per_element_cycles is not None:
            if (isinstance(per_element_cycles, bool) or not isinstance(per_element_cycles, (int, float))
                    or not math.isfinite(per_element_cycles) or per_element_cycles < 0):
                raise TileFunctionError(f"tile function {fname!r}: per_element_cycles must be a "
                                        f"finite number >= 0, got {per_element_cycles!r}")
        params = list(inspect.signature(py_func).parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
            raise TileFunctionError(f"tile function {fname!r} must take positional array "
                                    "arguments only (no *args, **kwargs or keyword-only)")
        self.py_func = py_func
        self.name = name or fname
        self.arg_names = tuple(p.name for p in params)
        self.n_args = len(params)
        self.cycles = cycles
        self.per_element_cycles = per_element_cycles
        self.parallel = bool(parallel)
        self.boundscheck = bool(boundscheck)
        self._fingerprint, self.cached = _driver.fingerprint(py_func)
        numba = _driver.numba_module()
        self.jit = numba.njit(cache=self.cached, boundscheck=self.boundscheck)(py_func)
        self._drivers: dict[tuple, Any] = {}
        self.compile_log: list[dict[str, Any]] = []
        self.__doc__ = py_func.__doc__
        self.__wrapped__ = py_func

    def __repr__(self) -> str:
        est = ("cycles=<formula>" if self.cycles is not None
               else f"per_element_cycles={self.per_element_cycles}")
        return f"TileFunction({self.name!r}, args={list(self.arg_names)}, {est})"

    def __call__(self, *arrays: np.ndarray) -> Any:
        """Run the compiled function on host arrays (one tile's worth of data)."""
        return self.jit(*arrays)

    @property
    def signatures(self) -> list:
        """Numba signatures compiled so far (non-empty after :meth:`compile`)."""
        return list(getattr(self.jit, "signatures", ()))  # a plain function under NUMBA_DISABLE_JIT

    @property
    def origin(self) -> str:
        try:
            path = inspect.getsourcefile(self.py_func)
            line = self.py_func.__code__.co_firstlineno
            return f"{self.py_func.__module__}.{self.py_func.__qualname__} ({path}:{line})"
        except TypeError:
            return f"{self.py_func.__module__}.{self.py_func.__qualname__}"

    # ------------------------------------------------------------------ specs
    def _spec_of(self, arg: Any, index: int) -> tuple[str, int]:
        """(dtype, ndim) of one argument given as a tensor, an array or a (dtype, ndim) pair."""
        if isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], int):
            dtype, ndim = arg
        elif hasattr(arg, "local_ndim") and hasattr(arg, "dtype"):   # graph.GraphTensor
            dtype, ndim = arg.dtype, arg.local_ndim
        elif hasattr(arg, "mapping") and hasattr(arg, "dtype"):      # tensor.TileTensor
            dtype, ndim = arg.dtype, 1
        elif isinstance(arg, np.ndarray):
            dtype, ndim = arg.dtype, arg.ndim
        else:
            raise TileFunctionError(
                f"argument {index} ({self.arg_name(index)}) of tile function {self.name!r} is "
                f"{type(arg).__name__}: tile functions take tensors only (put constants in "
                "module-level globals, which Numba compiles in)")
        return self._check_dtype(dtype, index), int(ndim)

    def arg_name(self, index: int) -> str:
        """Name of parameter ``index`` of the Python function (``#index`` past the end)."""
        return self.arg_names[index] if index < len(self.arg_names) else f"#{index}"

    def check_args(self, args: Sequence[Any]) -> tuple[tuple[str, int], ...]:
        """The (dtype, ndim) spec of each argument; raises :class:`TileFunctionError` for a
        wrong argument count, a non-tensor argument or a dtype tile functions cannot take.

        Arguments may be tensors, NumPy arrays or ``(dtype, ndim)`` pairs.
        """
        self._check_arity(len(args))
        return tuple(self._spec_of(a, i) for i, a in enumerate(args))

    def _check_dtype(self, dtype: Any, index: int, tensor: str = "") -> str:
        try:
            dt = canonical_dtype(dtype)
        except TypeError:
            dt = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
        if dt not in _NUMBA_DTYPES:
            what = f"tensor {tensor!r}" if tensor else f"argument {index} ({self.arg_name(index)})"
            hint = (" (Numba has no float16 arithmetic on the CPU)" if dt == "float16" else "")
            raise TileFunctionError(f"tile function {self.name!r}: {what} is {dt}; tile functions "
                                    f"compute on float32 tensors only{hint}")
        return dt

    def _check_arity(self, n: int) -> None:
        if n != self.n_args:
            raise TileFunctionError(f"tile function {self.name!r} takes {self.n_args} arguments "
                                    f"({', '.join(self.arg_names)}), got {n}")

    # ------------------------------------------------------------------ compile
    def compile(self, *args: Any) -> float:
        """Compile (or load from Numba's cache) the function and its driver for these
        arguments: tensors, NumPy arrays or ``(dtype, ndim)`` pairs, one per argument.

        Returns the seconds spent. Compiling an already compiled spec costs nothing.

        Raises
        ------
        TileFunctionCompileError
            With Numba's message, the function's name and the argument types.
        """
        return self._compile(self.check_args(args))

    def _check_globals(self) -> None:
        """A global tensor inside a tile function would mean reading other tiles' memory."""
        g = self.py_func.__globals__
        for nm in sorted(_code_names(self.py_func.__code__)):
            obj = g.get(nm)
            if obj is None:
                continue
            kind = type(obj).__name__
            if kind in ("TileTensor", "GraphTensor", "Device", "Graph"):
                tname = getattr(obj, "name", nm)
                raise TileFunctionError(
                    f"tile function {self.name!r} uses the global {kind} {nm!r}"
                    + (f" (tensor {tname!r})" if "Tensor" in kind else "")
                    + ": a tile function can only read the blocks of its own tile passed to it "
                    "as arguments. Pass the tensor as an argument; if its data lives on other "
                    "tiles, exchange it onto the tile first (Graph.copy / broadcast / send)")

    def _compile(self, spec: tuple[tuple[str, int], ...]) -> float:
        if spec in self._drivers:
            return 0.0
        with _LOCK:
            if spec in self._drivers:
                return 0.0
            self._check_globals()
            t0 = time.perf_counter()
            jit_on = not _driver.jit_disabled()
            fn_hits = sum(self.jit.stats.cache_hits.values()) if jit_on else 0
            if jit_on:
                try:
                    _driver.compile_function(self.jit, spec)
                except _driver.numba_errors() as err:
                    argdesc = ", ".join(f"{n}: {d}[{nd}-D block]" for n, (d, nd) in zip(self.arg_names, spec))
                    raise TileFunctionCompileError(
                        f"Numba could not compile tile function {self.name!r} ({self.origin}) "
                        f"for arguments ({argdesc}):\n{err}") from err
            driver = self._load_driver(spec)
            drv_hits = 0
            if jit_on:
                try:
                    drv_hits = _driver.compile_driver(driver)
                except _driver.numba_errors() as err:
                    raise TileFunctionCompileError(
                        f"Numba could not compile the driver of tile function {self.name!r} "
                        f"({self.origin}):\n{err}") from err
                fn_hits = sum(self.jit.stats.cache_hits.values()) - fn_hits
            seconds = time.perf_counter() - t0
            self._drivers[spec] = driver
            self.compile_log.append({"spec": spec, "seconds": seconds, "function_cache_hits": fn_hits,
                                     "driver_cache_hits": drv_hits,
                                     "numba": _driver.numba_module().__version__})
            return seconds

    def _load_driver(self, spec: tuple[tuple[str, int], ...]) -> Any:
        tag = "".join(f"{d[0]}{d[-2:]}x{nd}" for d, nd in spec)
        mode = ("p" if self.parallel else "s") + ("b" if self.boundscheck else "")
        key = f"{self._fingerprint}_{tag}_{mode}"
        src = _driver.driver_source(key, spec, parallel=self.parallel, cache=self.cached,
                                    boundscheck=self.boundscheck, origin=self.origin)
        return _driver.load_driver(key, self.jit, src,
                                   module_name=f"_ipukern_tilefn_{self.py_func.__name__}_{key}",
                                   cached=self.cached, label=self.name)

    def _driver(self, spec: tuple[tuple[str, int], ...]) -> Any:
        d = self._drivers.get(spec)
        if d is None:  # built by hand without vertex_batch(): compile now
            self._compile(spec)
            d = self._drivers[spec]
        return d

    # ------------------------------------------------------------------ estimates
    def estimate_cycles(self, shapes: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
        """Cycles of each vertex from the user's formula.

        Parameters
        ----------
        shapes : sequence of int arrays of shape (n_vertices, ndim_j), one per argument

        Returns
        -------
        int64 ndarray of shape (n_vertices,)
        """
        shapes = [np.asarray(s, dtype=np.int64) for s in shapes]
        n_vertices = shapes[0].shape[0] if shapes else 0
        if n_vertices == 0:
            return np.zeros(0, dtype=np.int64)
        if self.per_element_cycles is not None:
            c = np.ceil(self.per_element_cycles * np.prod(shapes[0], axis=1).astype(np.float64))
            if c.size and c.max() > MAX_VERTEX_CYCLES:
                raise TileFunctionError(
                    f"tile function {self.name!r}: {self.per_element_cycles} cycles/element gives "
                    f"{c.max():.3g} cycles for one vertex, more than the {MAX_VERTEX_CYCLES:.3g} "
                    "a vertex estimate may be (the estimate would overflow the cycle counters)")
            return c.astype(np.int64)
        flat = np.concatenate(shapes, axis=1)
        uniq, inv = np.unique(flat, axis=0, return_inverse=True)
        bounds = np.cumsum([0] + [s.shape[1] for s in shapes])
        out = np.empty(uniq.shape[0], dtype=np.int64)
        for u, row in enumerate(uniq):
            args = [TileShape(int(x) for x in row[bounds[j]:bounds[j + 1]]) for j in range(len(shapes))]
            try:
                c = self.cycles(*args)
            except Exception as err:
                raise TileFunctionError(f"cycles formula of tile function {self.name!r} failed for "
                                        f"block shapes {[tuple(a) for a in args]}: "
                                        f"{type(err).__name__}: {err}") from err
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)):
                raise TileFunctionError(
                    f"cycles formula of tile function {self.name!r} returned {c!r} "
                    f"({type(c).__name__}) for block shapes {[tuple(a) for a in args]}; it must "
                    "return an int (e.g. wrap it in math.ceil)")
            if c < 0 or c > MAX_VERTEX_CYCLES:
                raise TileFunctionError(f"cycles formula of tile function {self.name!r} returned "
                                        f"{int(c)} for block shapes {[tuple(a) for a in args]}; "
                                        f"it must lie in 0..{MAX_VERTEX_CYCLES} (2**48: larger "
                                        "estimates would overflow the cycle counters)")
            out[u] = int(c)
        return out[np.asarray(inv).ravel()]

    # ------------------------------------------------------------------ vertices
    def vertex_batch(self, machine: MachineSpec, tiles: Any, views: Sequence[ArgViews], *,
                     name: str | None = None) -> VertexBatch:
        """One vertex per tile running this function; the low-level entry point.

        Parameters
        ----------
        machine : MachineSpec
        tiles : int array of shape (n_vertices,)
            The tile of each vertex (distinct tiles: one vertex per tile).
        views : sequence of ArgViews, one per function argument
            Where each argument's block lives on each vertex's tile, and its shape.
        name : str, optional
            Codelet name shown in profiles (default: the function's name).

        Returns
        -------
        VertexBatch
            With user-estimate cycles, compiled (or loaded from cache) for these views.
        """
        self._check_arity(len(views))
        tiles = np.ascontiguousarray(tiles, dtype=np.int32)
        n_v = tiles.size
        if np.unique(tiles).size != n_v:
            raise TileFunctionError(f"tile function {self.name!r}: more than one vertex on a tile; "
                                    "run one vertex per tile (its blocks are the tile's whole share)")
        spec = []
        offs, nbytes, shapes = [], [], []
        for j, v in enumerate(views):
            dt = self._check_dtype(v.dtype, j, v.name)
            off = np.asarray(v.offset, dtype=np.int64).reshape(-1)
            shp = np.asarray(v.shape, dtype=np.int64)
            if shp.ndim != 2 or shp.shape[0] != n_v or off.size != n_v:
                raise TileFunctionError(f"tile function {self.name!r}: views of {v.name!r} describe "
                                        f"{off.size} offsets / shapes {shp.shape}, expected {n_v} vertices")
            if (off < 0).any():
                t = int(tiles[np.argmax(off < 0)])
                raise TileFunctionError(f"tile function {self.name!r}: tensor {v.name!r} is not mapped "
                                        f"on tile {t}, where the function runs")
            if (shp < 0).any():
                raise TileFunctionError(f"tile function {self.name!r}: negative block shape for {v.name!r}")
            spec.append((dt, shp.shape[1]))
            offs.append(off)
            nbytes.append(np.prod(shp, axis=1) * DTYPES[dt].itemsize)
            shapes.append(shp)
        spec = tuple(spec)
        self._compile(spec)
        cycles = self.estimate_cycles(shapes)
        max_nd = max([s.shape[1] for s in shapes] + [1])
        shape_arr = np.zeros((n_v, len(views), max_nd), dtype=np.int64)
        for j, s in enumerate(shapes):
            shape_arr[:, j, :s.shape[1]] = s
        off_arr = np.ascontiguousarray(np.stack(offs, axis=1) if offs else np.zeros((n_v, 0), np.int64))
        nb_arr = np.ascontiguousarray(np.stack(nbytes, axis=1) if nbytes else np.zeros((n_v, 0), np.int64))
        if n_v:
            v_max = int(np.argmax(cycles))
            desc = ", ".join(f"{v.name} {'x'.join(str(int(d)) for d in s[v_max])}"
                             for v, s in zip(views, shapes))
            how = ("user cycles formula" if self.cycles is not None
                   else f"user {self.per_element_cycles} cycles/element of {views[0].name}")
            why = (f"{name or self.name}: {how} -> {int(cycles[v_max]):,} cycles for blocks {desc} "
                   f"on tile {int(tiles[v_max])}")
        else:
            why = name or self.name
        codelet = _TileFunctionCodelet(name or self.name, self, spec)
        return VertexBatch(codelet, tiles, {"off": off_arr, "nbytes": nb_arr, "shape": shape_arr},
                           cycles, regions=[(np.ascontiguousarray(off_arr[:, j]),
                                             np.ascontiguousarray(nb_arr[:, j]))
                                            for j in range(len(views))],
                           why=why, user_estimate=True)


def tile_function(func: Callable | None = None, *, cycles: Callable[..., int] | None = None,
                  per_element_cycles: float | None = None, name: str | None = None,
                  parallel: bool = True, boundscheck: bool = True) -> Any:
    """Decorator: turn a module-level Python function into a :class:`TileFunction`.

    Parameters
    ----------
    func : function
        ``def f(a, b, ...)`` over NumPy arrays: each argument is the calling tile's own
        block of one tensor (float32, C-contiguous, shaped as the tensor's tile-local view).
        Results are written into the argument arrays; the return value is ignored.
    cycles : callable, optional
        ``cycles(*shapes) -> int``: tile cycles of one vertex, given one
        :class:`TileShape` per argument (its ``.shape``, ``.size``, ``.ndim``).
    per_element_cycles : float, optional
        Alternative to ``cycles``: ``ceil(per_element_cycles * elements of the first argument)``.
    name : str, optional
        Codelet name in profiles (default: the function's name).
    parallel : bool
        Run the vertices of a compute set over host threads (``prange``); default True.
    boundscheck : bool
        Numba bounds checks on the block arrays (default True): an out-of-block index
        raises :class:`TileFunctionError`. ``False`` is faster and unchecked (see the
        module docstring, "Memory safety").

    Examples
    --------
    >>> @tile_function(per_element_cycles=2)            # doctest: +SKIP
    ... def double(x):
    ...     for i in range(x.size):
    ...         x[i] *= 2
    """
    def wrap(f: Callable) -> TileFunction:
        return TileFunction(f, cycles=cycles, per_element_cycles=per_element_cycles, name=name,
                            parallel=parallel, boundscheck=boundscheck)
    return wrap(func) if func is not None else wrap
