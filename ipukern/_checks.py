"""Checks of user-given integers shared by the public entry points.

Python ints are unbounded but everything downstream computes in int64, so an integer is
accepted only if it is a real integer (not a bool, not a float that happens to be whole)
and lies in the range the caller names; the error says which argument and why.
"""
from __future__ import annotations

import numbers
import reprlib
from typing import Any, Sequence

__all__ = ["as_int", "as_shape", "check_depth", "show", "MAX_DIM", "MAX_NESTING"]

#: deepest nesting of lists / tuples / dicts a spec field may have (the real ones have 2):
#: deeper values made repr() in the error message, or the reader, raise RecursionError
MAX_NESTING = 16

#: largest size of one dimension: products of a few dimensions must stay inside int64
MAX_DIM = 2**31 - 1


def as_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int; TypeError for non-integers (bools, floats, strings),
    ValueError outside ``[minimum, maximum]`` (default: int64)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    v = int(value)
    lo = -2**63 if minimum is None else minimum
    hi = 2**63 - 1 if maximum is None else maximum
    if v < lo or v > hi:
        if maximum is None:            # no upper bound of the caller's: say what it wants
            raise ValueError(f"{name} must be an int >= {lo}, got {v}")
        raise ValueError(f"{name} must be between {lo} and {hi}, got {v}")
    return v


def as_shape(shape: Any, name: str, *, minimum: int = 1) -> tuple[int, ...]:
    """A shape: a sequence of ints in ``[minimum, MAX_DIM]``."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, numbers.Integral)) \
            and not hasattr(shape, "__len__"):
        raise TypeError(f"{name} must be a sequence of ints, got {shape!r}")
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    return tuple(as_int(s, f"{name}[{i}]", minimum=minimum, maximum=MAX_DIM)
                 for i, s in enumerate(shape))


def check_depth(value: Any, name: str, limit: int = MAX_NESTING) -> None:
    """ValueError naming ``name`` if ``value`` nests containers more than ``limit`` levels
    (checked without recursion, before anything formats or walks the value)."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, tuple, set, frozenset, dict)):
            if depth >= limit:
                raise ValueError(f"{name}: nested more than {limit} levels deep (a spec field "
                                 "holds numbers, names or short tables)")
            items = v.items() if isinstance(v, dict) else v
            for x in items:
                stack.append((x, depth + 1))


_SHOW = reprlib.Repr()          # keyword arguments only from Python 3.12
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother = 3, 60, 60


def show(value: Any) -> str:
    """``repr(value)`` for an error message, shortened and depth-limited (a repr of a list
    nested thousands deep raises RecursionError; of a huge one, fills the screen)."""
    return _SHOW.repr(value)
