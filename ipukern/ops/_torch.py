"""PyTorch interoperability of the ops, without importing torch unless a tensor comes in.

torch tensors are detached, moved to the CPU and viewed as NumPy arrays (no copy for CPU
tensors); results go back as torch tensors when the inputs were torch tensors. Meta tensors
carry shapes and dtypes but no data: they are accepted where only shapes matter (estimates).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import canonical_dtype

__all__ = ["is_torch", "to_numpy", "like_input", "shape_and_dtype"]


def is_torch(a: Any) -> bool:
    """True for a torch.Tensor (checked by module, so torch need not be installed)."""
    return type(a).__module__.startswith("torch") and hasattr(a, "detach")


def to_numpy(a: Any, name: str) -> Any:
    """A torch tensor as a NumPy array (detached, on the CPU); anything else unchanged.

    Raises
    ------
    TypeError
        An unsupported dtype (bfloat16, integers, ...), named with ipukern's message, or a
        meta tensor (it has no data to compute with).
    """
    if not is_torch(a):
        return a
    canonical_dtype(a.dtype)                         # ipukern's message for bf16 and others
    if a.is_meta:
        raise TypeError(f"{name} is a meta tensor (shape {tuple(a.shape)}, no data): use "
                        "ipukern.estimate_conv2d / estimate_matmul for its cycles")
    return a.detach().cpu().resolve_conj().resolve_neg().numpy()


def like_input(out: np.ndarray, *inputs: Any) -> Any:
    """``out`` as a torch tensor when any input was one, else unchanged."""
    if any(is_torch(a) for a in inputs):
        import torch
        return torch.from_numpy(np.require(out, requirements="C"))   # keeps 0-d results 0-d
    return out


def shape_and_dtype(a: Any) -> tuple[Any, Any]:
    """(shape, dtype) of an array or (meta) tensor; (a, None) for a shape or torch.Size."""
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return tuple(int(s) for s in a.shape), a.dtype
    return a, None
