"""What the training commands (``train``, ``compare``, ``tune``) share: a zoo model named on
the command line, and a ``--pipeline`` split; one module so those commands need not import
each other."""
from __future__ import annotations

from typing import Any

from ._common import UsageError


def model(name: str | None) -> Any:
    """The zoo network called ``name`` (None: none)."""
    if name is None:
        return None
    try:
        from ..nn.models import MODELS
    except ImportError:
        raise RuntimeError("the model zoo (ipukern.nn.models) is not in this build; use --costs") from None
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; models are {sorted(MODELS)}")
    return MODELS[name]()


def known_system(name: str) -> str:
    """``name`` if it names an IPU system preset (case and ``-``/``_`` as ``get_system``
    takes them); otherwise a usage error listing the presets."""
    from ..systems import SYSTEM_PRESETS
    if name.replace("-", "_").upper() not in SYSTEM_PRESETS:
        raise UsageError(f"unknown system {name!r}; systems are {sorted(SYSTEM_PRESETS)}")
    return name


def pipeline(text: str | None) -> Any:
    """A ``--pipeline`` value: ``auto``, or the split layers separated by commas."""
    if text is None or text == "auto":
        return text
    return [s for s in text.split(",") if s]
