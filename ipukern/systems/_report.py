"""Text of :class:`ipukern.TrainingEstimate` reports: memory cells, the busiest tile's bytes by
kind and the one-line :class:`~ipukern.systems.training.StageMemoryError` message."""
from __future__ import annotations

from .._format import fmt_bytes


def _kinds(kinds: dict) -> str:
    """A tile's bytes by kind, largest first (KiB)."""
    ranked = sorted(kinds.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {fmt_bytes(v, 'KiB')}" for k, v in ranked if v)


def _memory_model(mem: dict) -> str:
    return "per-tile liveness" if "peak_tile_bytes" in mem else "whole chip"


def _memory_cell(r: dict) -> str:
    over = "" if r["fits"] else "  DOES NOT FIT"
    if "peak_tile_bytes" in r:
        return (f"{r['peak_tile_bytes'] / 1024:,.1f} / {fmt_bytes(r['tile_bytes'], 'KiB')} on tile "
                f"{r['busiest_tile']} at {r['busiest_step']}" + over)
    return (f"{r['memory_bytes'] / 2 ** 20:,.1f} / {fmt_bytes(r['budget_bytes'], 'MiB')} (whole chip)"
            + over)


def _no_fit(s: int, names: list[str], mem: dict, chip, recompute: object = None) -> str:
    """The one-line StageMemoryError message of stage s; with ``recompute`` already on it
    does not suggest recomputation."""
    what = f"pipeline stage {s} ({names[0]} .. {names[-1]}) on IPU {s} needs "
    fix = ("; " + ("recompute (checkpoints: recompute=[layers], CLI --checkpoints), " if not recompute
                   else f"even with recompute={recompute!r}; ")
           + "a lower available_memory_proportion, a smaller micro-batch or more IPUs per replica "
             "would lower it (allow_overflow=True, CLI --allow-overflow, estimates anyway)")
    if "peak_tile_bytes" in mem:
        return (what + f"{mem['peak_tile_bytes']:,} B > budget {mem['tile_bytes']:,} B on tile "
                f"{mem['busiest_tile']} at {mem['busiest_step']!r} (per-tile liveness, "
                f"{mem['reserve_bytes']:,} B reserved, {mem['in_flight']} micro-batch(es) in flight; "
                f"{_kinds(mem.get('tile_bytes_by_kind') or {})})" + fix)
    return (what + f"{mem['memory_bytes']:,} B > budget {mem['budget_bytes']:,} B ({chip.n_tiles} tiles x "
            f"{chip.tile_budget_bytes:,} B)" + fix)
