"""Host memory of the max-batch search.

The search compiles the whole network at every batch it tries, and a compile's host memory
grows with the batch (index tables of the activations' layouts and exchanges). Unguarded,
EfficientNet-B0's search climbed past batch 256 and a 23 GB host killed it. Each trial now
runs in :func:`~ipukern._memo.trial` (its cache entries dropped after it), its
peak host bytes are measured, and a trial whose predicted bytes exceed what the host has
available is refused with a :class:`MemoryError` that names the batch, the bytes and the
largest batch found to fit, instead of the search being killed.

Peak bytes are read from Linux's ``/proc/self/status`` (``VmHWM``, reset before each trial
through ``/proc/self/clear_refs``); elsewhere the guard only scopes the caches.
"""
from __future__ import annotations

from collections.abc import Callable

from ..._memo import trial as trial_caches

__all__ = ["HostMemoryGuard", "available_bytes"]

#: share of the host's available memory a trial may be predicted to take
HEADROOM = 0.8


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_bytes() -> int | None:
    """``MemAvailable`` of the host in bytes (None where /proc/meminfo is absent)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak() -> int | None:
    """Reset the peak resident size; the current resident bytes (None if unsupported)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    rss = _status_kib("VmRSS")
    return None if rss is None else rss * 1024


class HostMemoryGuard:
    """``spare(batch)`` for :func:`~ipukern.nn.max_batch.search_max_batch`, run trial by trial in
    scoped caches, refusing a batch whose compile would not fit the host's memory.

    The prediction is linear in the batch through the origin with the largest bytes per
    sample seen so far (a trial's peak above what was resident before it, over its batch):
    the fixed part of a compile then counts as if it grew with the batch, which errs on the
    side of stopping early.
    """

    def __init__(self, spare: Callable[[int], float], available: Callable[[], int | None] = available_bytes):
        if not callable(spare) or not callable(available):
            raise TypeError("HostMemoryGuard needs callables: spare (batch -> bytes left) and "
                            "available (-> host bytes available, or None)")
        self._spare = spare
        self._available = available
        self.bytes_per_sample = 0.0
        self.largest_fit = 0

    def __call__(self, batch: int) -> float:
        need = self.bytes_per_sample * batch
        avail = self._available()
        if avail is not None and need > HEADROOM * avail:
            raise MemoryError(
                f"max-batch search stopped before batch {batch}: compiling it needs about "
                f"{need / 2**30:.1f} GiB of host memory and {avail / 2**30:.1f} GiB is available "
                f"(largest batch found to fit so far: {self.largest_fit}); search a bounded range "
                "with ipukern.nn.max_batch.search_max_batch(..., limit=N) or use a larger host")
        before = _reset_peak()
        with trial_caches():
            left = self._spare(batch)
        peak = _status_kib("VmHWM")
        if before is not None and peak is not None:
            self.bytes_per_sample = max(self.bytes_per_sample, (peak * 1024 - before) / batch)
        if left >= 0:
            self.largest_fit = max(self.largest_fit, batch)
        return left
