"""The dtypes the simulated IPU computes in, and their spellings.

Users may say ``"float16"``, ``"half"``, ``np.float16`` and mean the same thing; everything
inside ipukern uses the canonical NumPy names ``"float16"`` and ``"float32"``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DTYPES", "DTYPE_CODE", "canonical_dtype", "partials_dtype"]

#: canonical name -> NumPy dtype
DTYPES: dict[str, np.dtype] = {"float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}

#: canonical name -> the dtype code the compiled kernels take (0 float32, 1 float16); the C
#: side declares the same values once in ipukern/_kernels (keep the two in step)
DTYPE_CODE: dict[str, int] = {"float32": 0, "float16": 1}

_ALIASES = {"half": "float16", "fp16": "float16", "f2": "float16", "float16": "float16",
            "float": "float32", "fp32": "float32", "single": "float32", "f4": "float32",
            "float32": "float32"}


def canonical_dtype(dtype: Any) -> str:
    """Return ``"float16"`` or ``"float32"`` for any accepted spelling; TypeError otherwise.

    Accepts NumPy dtypes and names, the aliases above, and torch dtypes (``torch.float16``,
    ``torch.float32``); ``torch.bfloat16`` and every other dtype are refused.
    """
    if type(dtype) is str and (dtype == "float16" or dtype == "float32"):
        return dtype                                 # canonical already: the hot path
    if type(dtype).__module__ == "torch":            # torch.dtype, without importing torch
        name = str(dtype).rpartition(".")[2]
        if name in ("float16", "half", "float32", "float"):
            return _ALIASES[name]
        raise TypeError(f"unsupported dtype {dtype}: ipukern computes in float32 or float16"
                        + (" (bfloat16 is not modelled: convert with .float() or .half())"
                           if name == "bfloat16" else ""))
    if isinstance(dtype, str):
        key = dtype.lower()
        if key in _ALIASES:
            return _ALIASES[key]
    else:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is not None and dt.name in DTYPES:
            return dt.name
    raise TypeError(f"unsupported dtype {dtype!r}: ipukern computes in float32 or float16")


def partials_dtype(partials: Any, in_dtype: str) -> str:
    """Resolve the ``partials=`` option ("float"/"half") against the input dtype.

    fp32 inputs always accumulate in fp32 (the AMP has no float->half mode); asking for
    half partials with fp32 inputs is an error rather than a silent change.
    """
    p = canonical_dtype(partials)
    if in_dtype == "float32" and p == "float16":
        raise ValueError("partials='half' needs float16 inputs; float32 inputs accumulate in float")
    return p
