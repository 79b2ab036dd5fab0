"""The best fitting training configuration of a network on a system: :func:`tune`.

:func:`tune` searches the layout of a training step (replicas x IPUs per replica and, for
pipelines, the split), the micro-batch, recomputation and PopLibs' availableMemoryProportion
for the highest :func:`~ipukern.estimate_training` throughput whose every stage fits its
IPU's tiles, and reports the winner with the runners-up and why each lost.

The search is not a grid. It works through *families* (a layout, a recomputation mode and an
availableMemoryProportion) in a fixed order, the data-parallel layout first:

- **micro-batch**: per family, the largest fitting micro-batch on a ladder of about 1.2x
  steps (1, 2, 3, 4, 5, 6, 8, 10, 12, ... 256), found by galloping then bisecting, assuming
  what fits at a micro-batch also fits at a smaller one. The ladder is shared by all
  families, so the per-layer plans of a (micro-batch, proportion) pair are made once
  (:func:`ipukern.estimate_network`'s caches) and re-used by every recomputation mode and
  layout. The winner's micro-batch is then refined between its ladder step and the next.
- **pruning**: before a family is searched it is bounded: a single-IPU replica by its exact
  estimate with memory ignored (``allow_overflow=True``), a pipeline by its compute alone
  (every stage at most ``1/S`` of the network's cycles, ``M + S - 1`` pipeline cycles).
  Assuming throughput does not fall as the micro-batch grows, only micro-batches whose bound
  beats the best found so far are tried; a family whose smallest such micro-batch does not
  fit is dropped after one estimate.
- **order and shortcuts** (:data:`SHORTCUTS`): every single-IPU family is first estimated at
  :data:`PROBE_MICRO_BATCH` (one plan per proportion, shared by the recomputation modes) and
  the families that fit there are searched first, fastest first; each new best's family is
  refined at once, so a strong incumbent prunes the rest early. A family's bound may come
  from an estimate already made at the same micro-batch with no more work and no smaller
  proportion (:data:`CROSS_BOUND_SLACK`), and a family's steps above one known not to fit are
  not estimated, so most pruned families are never planned at all.
- **gradient accumulation**: throughput only grows with it (the step's fixed costs are
  amortised over more micro-batches), so it is the largest that keeps the global batch
  (replicas x micro-batch x accumulation) within ``max_global_batch``.
- **pipeline splits**: ``pipeline="auto"`` of :func:`~ipukern.estimate_training` (the
  fastest split among those that fit).

The same inputs give the same result: the order is fixed and nothing depends on time.
"""
from __future__ import annotations

import dataclasses
import math
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from .._checks import as_int
from ..machine import MachineSpec, get_machine
from ..nn.checkpoints import network_checkpoints
from ..nn.compile import trial_caches
from ..nn.convops import reuse_across_proportions
from .config import TrainingConfig
from .spec import System, get_system
from .training import StageMemoryError, TrainingEstimate, _costs_from_network, estimate_training
from .tune_result import TuneCandidate, TuneResult, _short_reason
from .tune_space import _FIXABLE, _as_list, _Fixed, _fixed_options, _layouts

__all__ = ["tune", "TuneResult", "TuneCandidate", "DEFAULT_MAX_GLOBAL_BATCH", "AMP_VALUES",
           "RECOMPUTE_MODES", "MICRO_BATCH_LADDER", "compare_chips", "ChipComparison", "on_chip",
           "PUBLISHED_MK1", "published_mk1"]

#: Default bound on replicas x micro-batch x gradient accumulation. Throughput alone always
#: favours a larger global batch (more micro-batches per step amortise its fixed costs), but
#: a larger batch needs more epochs to converge, which samples/s does not show. 4096 is above
#: every published ResNet-50 training configuration in ``validation/published_systems.csv``
#: (IPU 1,920-3,840, DGX A100 3,264), so each of them lies inside the default search.
DEFAULT_MAX_GLOBAL_BATCH = 4096

#: availableMemoryProportion values tried by default: PopLibs' default 0.6, and 0.3 and 0.15
#: (Graphcore's MLPerf ResNet-50 configurations set 0.15 / 0.14)
AMP_VALUES = (0.6, 0.3, 0.15)

#: recomputation modes tried by default: none, "auto" checkpoints (about sqrt(n) block
#: boundaries) and stage recomputation (re-run each stage's forward in its backward)
RECOMPUTE_MODES = (False, "auto", True)

#: micro-batches tried (about 1.2x apart); a cap below 256 (``max_micro_batch`` or the global
#: batch bound) is added as the top step
MICRO_BATCH_LADDER = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112,
                      128, 160, 192, 224, 256)

#: the search reuses a conv pass's plan at a smaller proportion when it meets that bound
#: (:func:`ipukern.nn.convops.reuse_across_proportions`); False plans every pass at every
#: proportion (the baseline ``bench/test_bench_tune.py`` and ``tests/test_tune.py`` compare with)
REUSE_PLANS = True

#: the search's shortcuts (each below): the probe that orders the families, bounds from
#: other families' estimates, a family's steps above one known not to fit left unestimated,
#: and the refinement of each new best's family before the next family. False: the search
#: as it was before them (the baseline ``tests/test_tune.py`` and ``bench/test_bench_tune.py``
#: compare with: the same winner).
SHORTCUTS = True

#: a single-IPU family's bound at a micro-batch may come from an estimate already made at the
#: same micro-batch (memory ignored) without recomputation, or with the same stage
#: recomputation, at a proportion at least as large, times ``1 + CROSS_BOUND_SLACK``: that
#: configuration has no more work (recomputation only adds forward passes) and no smaller
#: choice of plans (availableMemoryProportion only bounds the planner's candidates; the
#: planner keeps plans within ``conv.search.NEAR_TIE`` = 0.5% of the fastest, hence the slack).
#: Used only to prune, so that a family is not planned at a micro-batch that cannot win.
CROSS_BOUND_SLACK = 0.01

#: micro-batch at which :func:`tune` first estimates every single-IPU family (memory
#: ignored), to search the ones that fit there, fastest first: a good incumbent early lets
#: the bounds prune the rest.
PROBE_MICRO_BATCH = 16


@dataclass
class _Family:
    ipr: int
    reps: int
    recompute: Any
    amp: float | None
    ladder: list[int]
    accumulation: Callable[[int], int]


class _Search:
    def __init__(self, net: Any, system: System, base: TrainingConfig, progress: Any,
                 limits: tuple = (None, 256, False)) -> None:
        self.net, self.system, self.base, self.progress = net, system, base, progress
        self.limits = limits
        self.est: dict[TrainingConfig, tuple[TrainingEstimate | None, str]] = {}
        self.bounds: dict[tuple, float] = {}
        self.rows: dict[TrainingConfig, TuneCandidate] = {}
        self.best: tuple[float, TrainingConfig] | None = None
        self.evaluations = 0
        #: (replicas, micro-batch) -> [(proportion, recompute, samples/s memory ignored)]
        self.free: dict[tuple[int, int], list[tuple[float, Any, float]]] = {}

    def config(self, f: _Family, mb: int) -> TrainingConfig:
        return self.base.replace(micro_batch=mb, gradient_accumulation=f.accumulation(mb), replicas=f.reps,
                                 ipus_per_replica=f.ipr, recompute=f.recompute,
                                 available_memory_proportion=f.amp,
                                 pipeline=self.base.pipeline if f.ipr > 1 and self.base.pipeline else
                                 ("auto" if f.ipr > 1 else None))

    def estimate(self, cfg: TrainingConfig, overflow: bool = False) -> tuple[TrainingEstimate | None, str]:
        """(estimate or None, reason); with ``overflow`` the estimate even if it does not fit."""
        key = cfg.replace(allow_overflow=overflow)
        if key not in self.est:
            self.evaluations += 1
            try:
                e = estimate_training(self.net, self.system, key)
                why = "" if e.info["fits"] else _short_reason(_first_overflow(e, self.system))
                self.est[key] = (e, why)
                if overflow and cfg.ipus_per_replica == 1:
                    self.free.setdefault((cfg.replicas, cfg.micro_batch), []).append(
                        (_amp(cfg.available_memory_proportion), cfg.recompute, e.samples_per_second))
            except StageMemoryError as err:
                self.est[key] = (None, _short_reason(str(err)))
            except MemoryError as err:     # a layer with no plan that fits the tiles at all
                self.est[key] = (None, "does not fit: " + str(err).split(":")[0])
        return self.est[key]

    def fits(self, cfg: TrainingConfig) -> bool:
        """Estimate ``cfg`` (fitting only) and record it as a candidate."""
        if cfg.ipus_per_replica == 1:
            e, why = self.estimate(cfg, overflow=True)
            ok = e is not None and e.info["fits"]
        else:
            e, why = self.estimate(cfg)
            ok = e is not None
        if ok:
            sps = e.samples_per_second
            self.rows[cfg] = TuneCandidate(cfg, sps, True, "")
            if self.best is None or sps > self.best[0]:
                self.best = (sps, cfg)
        else:
            self.rows[cfg] = TuneCandidate(cfg, None, False, why)
        return ok

    def cap(self, f: _Family) -> int:
        """The family's smallest ladder step estimated not to fit (its ladder length if
        none): by the search's assumption no larger step fits either."""
        if SHORTCUTS:
            for k, mb in enumerate(f.ladder):
                r = self.est.get(self.config(f, mb).replace(allow_overflow=f.ipr == 1))
                if r is not None and (r[0] is None or not r[0].info["fits"]):
                    return k
        return len(f.ladder)

    def planned(self, f: _Family, mb: int) -> bool:
        """Whether the family's configuration at ``mb`` has been estimated."""
        return self.config(f, mb).replace(allow_overflow=f.ipr == 1) in self.est

    def cross_bound(self, f: _Family, mb: int) -> float | None:
        """A bound on a single-IPU family at ``mb`` from estimates already made
        (:data:`CROSS_BOUND_SLACK`), or None."""
        if not SHORTCUTS or f.ipr != 1:
            return None
        amp = _amp(f.amp)
        vals = [v for a, rc, v in self.free.get((f.reps, mb), ())
                if a >= amp and (rc is False or (rc is True and f.recompute is True))]
        return min(vals) * (1 + CROSS_BOUND_SLACK) if vals else None

    def bound(self, f: _Family, mb: int, beat: float | None = None) -> float:
        """An upper bound on the family's throughput at ``mb``, fitting or not; when it
        cannot beat ``beat`` by estimates already made, that bound (no new estimate)."""
        cfg = self.config(f, mb)
        if f.ipr == 1:                   # exact: the estimate with memory ignored
            if beat is not None and not self.planned(f, mb):
                cheap = self.cross_bound(f, mb)
                if cheap is not None and cheap <= beat:
                    return cheap
            e = self.estimate(cfg, overflow=True)[0]
            # no plan at all: no bound, and none above it either (the search then stops there)
            return math.inf if e is None else e.samples_per_second
        key = (mb, f.recompute, f.amp)
        if key not in self.bounds:
            chip, c = self.system.chip, self.base
            try:
                ck = (network_checkpoints(self.net, mb, chip, c.dtype, c.partials, f.amp)
                      if f.recompute == "auto" else None)
                costs = _costs_from_network(self.net, mb, chip, c.dtype, c.partials, ck, f.amp)
            except MemoryError:
                costs = []
            again = 1 + (f.recompute is True)
            self.bounds[key] = sum(x.fwd_cycles * again + x.bwd_cycles + x.wu_cycles
                                   for x in costs) / chip.clock_hz
        m, s = cfg.gradient_accumulation, f.ipr
        if not self.bounds[key]:
            return math.inf
        return f.reps * s * mb * m / ((m + s - 1) * self.bounds[key])

    def family(self, f: _Family) -> None:  # noqa: C901, PLR0915 - one search, read top to bottom
        """The family's largest fitting ladder step whose bound beats the best so far,
        searched from the best micro-batch found so far (16 at first), so that its probes
        stay where the plans already made are."""
        lad, n = f.ladder, len(f.ladder)
        best = self.best[0] if self.best is not None else -1.0
        near = self.best[1].micro_batch if self.best is not None else 16
        seed = max((k for k, b in enumerate(lad) if b <= near), default=0)
        if SHORTCUTS and self.best is None and f.ipr > 1:
            seed = 0                     # nothing fits yet: most pipelines fit nowhere, one estimate says so
        cap = self.cap(f)                # no step from here up fits
        seed = min(seed, cap)
        kind = "memory ignored" if f.ipr == 1 else "compute alone"

        def ub(k: int) -> float:
            return self.bound(f, lad[k], best)

        def fit(k: int) -> bool:
            return self.fits(self.config(f, lad[k]))

        def prune(k: int, why: str) -> None:
            cfg = self.config(f, lad[k])
            v = ub(k)
            self.rows.setdefault(cfg, TuneCandidate(
                cfg, None, None, f"pruned: at most {v:,.0f} samples/s at micro-batch {lad[k]} ({kind}) "
                                 f"<= best {best:,.0f}; {why}", v))

        if ub(seed) <= best:
            # only larger micro-batches can beat the best: the first whose bound does
            lo, step, top = seed, 1, min(n, cap) - 1
            last = "no larger micro-batch is tried" if cap == n else \
                f"micro-batch {lad[cap]} and above do not fit"
            while True:
                if lo >= top:
                    return prune(lo, last)
                nxt = min(lo + step, top)
                if ub(nxt) > best:
                    hi = nxt
                    break
                if nxt == top:
                    return prune(nxt, last)
                if f.ipr == 1 and (self.planned(f, lad[nxt]) or not SHORTCUTS) and not fit(nxt):
                    return prune(nxt, "larger ones do not fit")
                lo, step = nxt, step * 2
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if ub(mid) > best:
                    hi = mid
                else:
                    lo = mid
            if not fit(hi):
                cfg = self.config(f, lad[hi])
                r = self.rows[cfg]
                self.rows[cfg] = dataclasses.replace(
                    r, why=f"{r.why}; smaller micro-batches at most {ub(lo):,.0f} samples/s ({kind})",
                    upper_bound=ub(lo))
                return
            good = hi
        elif fit(seed):
            good = seed
        else:
            return self._below(seed, best, ub, fit, lambda k: prune(
                k, f"micro-batch {lad[k + 1]} and above do not fit"))
        # gallop up from a fitting step, then bisect: the largest fitting ladder step
        lo, step, hi = good, 1, min(n, cap)
        while lo + step < hi:
            if fit(lo + step):
                lo += step
                step *= 2
            else:
                hi = lo + step
                break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fit(mid):
                lo = mid
            else:
                hi = mid
        if hi == n:
            self.beyond(f, lad[-1])

    #: (max_global_batch, max_micro_batch, micro-batch fixed) of the call
    limits: tuple = (None, 256, False)

    def beyond(self, f: _Family, mb: int) -> None:
        """``mb`` is the family's top step and fits: record the next step as beyond the bound."""
        gb, max_mb, fixed = self.limits
        nxt = next((b for b in MICRO_BATCH_LADDER if b > mb), mb + 1)
        if not fixed and gb is not None and f.reps * nxt * f.accumulation(mb) > gb and nxt <= max_mb:
            cfg = self.config(f, mb).replace(micro_batch=nxt)
            total = f.reps * nxt * cfg.gradient_accumulation
            self.rows.setdefault(cfg, TuneCandidate(
                cfg, None, None, f"global batch {f.reps} x {nxt} x {cfg.gradient_accumulation} = "
                                 f"{total:,} above max_global_batch {gb:,}"))

    def probe(self, fams: list[_Family]) -> list[_Family]:
        """Estimate every single-IPU family at :data:`PROBE_MICRO_BATCH` (its ladder step at
        or below it) and order them: those that fit there first, each group fastest first
        (memory ignored; ties keep the fixed order); the pipelined ones after, in order. The
        micro-batch's plans are made once per proportion and shared by the recomputation
        modes, and a fitting fast family searched first gives the bounds an incumbent that
        prunes most of the others before they are planned at all."""
        if not SHORTCUTS:
            return fams
        single = [f for f in fams if f.ipr == 1]
        key = {}
        for i, f in enumerate(single):
            mb = max((b for b in f.ladder if b <= PROBE_MICRO_BATCH), default=f.ladder[0])
            ok = self.fits(self.config(f, mb))
            e = self.estimate(self.config(f, mb), overflow=True)[0]
            key[id(f)] = (not ok, -(e.samples_per_second if e is not None else 0.0), i)
        return sorted(single, key=lambda f: key[id(f)]) + [f for f in fams if f.ipr > 1]

    def run(self, fams: list[_Family], pipelines: bool | None) -> None:
        """Search every family in order, then refine the winner's micro-batch."""
        progress = self.progress
        fams = self.probe(fams)
        later = pipelines is None and any(f.ipr == 1 for f in fams)
        for k, f in enumerate(fams):
            if later and f.ipr > 1 and self.best is not None:
                cfg = self.config(f, f.ladder[0])
                self.rows.setdefault(cfg, TuneCandidate(
                    cfg, None, None,
                    "not searched: a single-IPU replica fits (pipelines=True / --pipelines searches it)"))
                continue
            before = self.best
            self.family(f)
            if SHORTCUTS and self.best is not before and self.best[1].ipus_per_replica == 1:
                self.refine(f)           # a stronger incumbent before the next family
            if progress is not None:
                progress(k + 1, len(fams) + 1, f"{f.reps}x{f.ipr} IPU, recompute {f.recompute}, amp {f.amp}")
        if self.best is None:
            raise StageMemoryError(f"no configuration searched fits {self.system.name}: "
                                   + "; ".join(sorted({r.why for r in self.rows.values() if r.why})[:3]))
        win = self.best[1]
        self.refine(next(f for f in fams if self.config(f, win.micro_batch) == win))
        if progress is not None:
            progress(len(fams) + 1, len(fams) + 1, "refined")

    @staticmethod
    def _below(seed: int, best: float, ub: Callable[[int], float], fit: Callable[[int], bool],
               prune: Callable[[int], None]) -> None:
        """Seed does not fit: the largest smaller ladder step that fits, while the bound of
        the steps tried still beats the best (else ``prune`` the first that does not)."""
        bad, step = seed, 1
        while True:
            nxt = max(bad - step, 0)
            if ub(nxt) <= best:
                return prune(nxt)
            if fit(nxt):
                good = nxt
                break
            if nxt == 0:
                return None
            bad, step = nxt, step * 2
        while bad - good > 1:
            mid = (good + bad) // 2
            if fit(mid):
                good = mid
            else:
                bad = mid
        return None

    @staticmethod
    def _first(pred: Callable[[int], bool], last: int) -> int:
        """The smallest k in [0, last] with pred(k) (pred(last) is True; pred monotone)."""
        lo, hi = 0, last
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def refine(self, f: _Family) -> None:
        """Integers between the winner's ladder step and the next one that did not fit; then
        the largest smaller micro-batch with more gradient accumulation: within
        ``max_global_batch`` the accumulation is a whole number, so a slightly smaller
        micro-batch can amortise the step's fixed costs over a larger global batch (on
        ResNet-50 POD16, 23 x 11 beats 24 x 10), against the ladder search's assumption."""
        mb = self.best[1].micro_batch
        lad = f.ladder
        k = lad.index(mb) if mb in lad else None
        if k is not None and k + 1 < len(lad):
            lo, hi = mb, lad[k + 1]
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self.fits(self.config(f, mid)):
                    lo = mid
                else:
                    hi = mid
        if self.limits[2]:                  # the micro-batch is fixed
            return
        win = None
        while win is not self.best[1]:      # down while that wins
            win = self.best[1]
            mb = win.micro_batch
            more = next((b for b in range(mb - 1, 0, -1) if f.accumulation(b) > f.accumulation(mb)), None)
            if more is not None:
                self.fits(self.config(f, more))


def _amp(amp: float | None) -> float:
    """A proportion as a number (None: PopLibs' default 0.6)."""
    return 0.6 if amp is None else float(amp)


def _first_overflow(e: TrainingEstimate, system: System) -> str:
    """The StageMemoryError message of the first stage of ``e`` that does not fit."""
    from ._report import _no_fit
    for r in e.breakdown:
        if not r["fits"]:
            return _no_fit(r["stage"], e.stages[r["stage"]], r, system.chip)
    return ""


def _families(layouts: list[tuple[int, int]], fx: _Fixed, base: TrainingConfig, max_mb: int,
              gb: int | None) -> list[_Family]:
    """Every (layout, availableMemoryProportion, recomputation) family with its ladder."""
    modes = _as_list(fx.recompute, RECOMPUTE_MODES, "recompute")
    amps = [base.replace(available_memory_proportion=a).available_memory_proportion
            for a in _as_list(fx.available_memory_proportion, AMP_VALUES, "available_memory_proportion")]
    for mode in modes:                                    # validated once, here
        base.replace(recompute=mode)
    ladder = list(MICRO_BATCH_LADDER)
    while ladder[-1] < max_mb:                            # beyond 256: steps of about 1.25x
        ladder.append(ladder[-1] + ladder[-1] // 4 // 32 * 32)
    acc_fixed, mb_fixed = fx.gradient_accumulation, fx.micro_batch

    def family(s: int, r: int, mode: Any, amp: float | None) -> _Family:
        if acc_fixed is not None:
            acc = (lambda mb: acc_fixed)  # noqa: E731
            cap = max_mb if gb is None else min(max_mb, gb // (r * acc_fixed))
        else:
            acc = (lambda mb: 1 if gb is None else max(1, gb // (r * mb)))  # noqa: E731
            cap = max_mb if gb is None else min(max_mb, gb // r)
        if mb_fixed is not None:
            if cap < mb_fixed:
                raise ValueError(f"micro_batch={mb_fixed} x {r} replicas x accumulation "
                                 f"{acc(mb_fixed)} is above max_global_batch={gb}")
            lad = [mb_fixed]
        else:
            lad = [b for b in ladder if b < cap] + [cap] if cap >= 1 else []
        return _Family(s, r, mode, amp, lad, acc)

    fams = [family(s, r, mode, amp) for s, r in layouts for amp in amps for mode in modes]
    return [f for f in fams if f.ladder]


def _ranked(search: _Search) -> tuple[TuneCandidate, ...]:
    """Every candidate with why it lost: the winner, fitting fastest first, not fitting, the rest."""
    best_sps, win = search.best
    rows = []
    for cfg, r in search.rows.items():
        if cfg == win:
            rows.append(dataclasses.replace(r, why="best"))
        elif r.fits:
            rows.append(dataclasses.replace(r, why=f"slower: {r.samples_per_second / best_sps:.2f}x of best"))
        else:
            rows.append(r)

    def order(c: TuneCandidate) -> tuple:
        rank = 0 if c.why == "best" else 1 if c.fits else 2 if c.fits is False else 3
        return (rank, -(c.samples_per_second or 0.0))
    rows.sort(key=order)                                  # stable: ties keep the search order
    return tuple(rows)


def _reuse_scope() -> ExitStack:
    """The search's scope: with :data:`REUSE_PLANS`, plans reused across proportions, and
    what they made dropped with the scope (the per-batch caches' new entries), so no
    estimate outside a search ever sees a plan the planner did not choose for its own
    proportion."""
    scope = ExitStack()
    if REUSE_PLANS:
        scope.enter_context(trial_caches())
        scope.enter_context(reuse_across_proportions())
    return scope


def tune(net: Any, system: System | str = "POD16", *,
         max_global_batch: int | None = DEFAULT_MAX_GLOBAL_BATCH, max_micro_batch: int = 256,
         pipelines: bool | None = None, progress: Any = None, **options: Any) -> TuneResult:
    """The fastest configuration of training ``net`` on ``system`` that fits (module docstring).

    Each searched option (``micro_batch``, ``gradient_accumulation``, ``replicas``,
    ``ipus_per_replica``, ``pipeline``, ``recompute``, ``available_memory_proportion``) is
    searched when not given (or None) and fixed when given.

    Parameters
    ----------
    net : ipukern.nn.Network
    system : System or preset name
        Any :class:`~ipukern.System`, e.g. ``System.pod(16, ik.GC2)`` for a Mk1 one.
    max_global_batch : int, optional
        Bound on replicas x micro-batch x gradient accumulation (default
        :data:`DEFAULT_MAX_GLOBAL_BATCH` = 4096, above every published ResNet-50 training
        configuration; None: only ``max_micro_batch`` and accumulation 1 bound it).
    max_micro_batch : int
        The largest micro-batch tried (default 256).
    pipelines : bool, optional
        Search pipelined layouts (more than one IPU per replica). Default: only when no
        single-IPU replica fits (or ``ipus_per_replica`` / ``pipeline`` ask for one): a
        pipeline's fit check is an ``"auto"`` split checked stage by stage, seconds per
        micro-batch on ResNet-50, and for a network one IPU holds data parallelism has no
        bubble and no stage imbalance.
    progress : callable, optional
        Called as ``progress(done, total, label)`` after each family (the CLI's progress line).
    micro_batch, gradient_accumulation : int, optional
        Fixed values (default: searched; accumulation the largest within ``max_global_batch``).
    replicas : int, optional
        Fixed replicas; ``system.n_ipus / replicas`` IPUs per replica must be a GCL size.
    ipus_per_replica : {1, 2, 4, 8, 16}, optional
        Fixed IPUs per replica (default: each GCL size dividing the system's IPUs).
    pipeline : list, optional
        A fixed split (split layers, or stage layer lists); it fixes ``ipus_per_replica``.
        Default: ``"auto"`` for every pipelined layout.
    recompute : bool, "auto" or list of layer names, optional
        A fixed recomputation (default: searched over :data:`RECOMPUTE_MODES`).
    available_memory_proportion : float or tuple of floats, optional
        A fixed value or the values to try (default :data:`AMP_VALUES`).
    **options
        Other fixed :class:`~ipukern.systems.TrainingConfig` fields passed through (optimizer,
        optimizer_state, optimizer_state_dtype, dtype, partials, bn_replica_group, ...).

    Returns
    -------
    TuneResult

    Raises
    ------
    ValueError
        A bad option, naming it: micro_batch 0, replicas that do not divide the system's
        IPUs, a split at a layer the network does not have, ...
    StageMemoryError
        No configuration searched fits.
    """
    system = get_system(system)
    if net is None or not hasattr(net, "layers"):
        raise TypeError(f"tune needs an ipukern.nn.Network, got {net!r}")
    names = [nm for nm, _ in net.layers]
    fx, rest = _fixed_options(dict(options), names)
    base = TrainingConfig.of(None, rest)
    if fx.pipeline is not None:
        base = base.replace(pipeline=fx.pipeline)
    max_mb = as_int(max_micro_batch, "max_micro_batch", minimum=1)
    gb = None if max_global_batch is None else as_int(max_global_batch, "max_global_batch", minimum=1)
    layouts = _layouts(system, fx, base, len(names))
    fams = _families(layouts, fx, base, max_mb, gb)
    if pipelines is False:
        fams = [f for f in fams if f.ipr == 1] or fams
    if not fams:
        raise ValueError(f"max_global_batch={gb} leaves no micro-batch for {layouts[0][1]} replicas")
    search = _Search(net, system, base, progress, (gb, max_mb, fx.micro_batch is not None))
    with _reuse_scope():
        search.run(fams, pipelines)
        win = search.best[1]
        best_est = dataclasses.replace(search.estimate(win, overflow=win.ipus_per_replica == 1)[0])
    return TuneResult(best_est, win, _ranked(search), system.name, gb if gb is not None else math.inf,
                      search.evaluations)


def on_chip(system: System | str, chip: MachineSpec | str) -> System:
    """``system`` with every IPU a ``chip`` (e.g. a POD16 of Mk1 GC2s), named
    ``"IPU-POD16 (GC2)"``; links, hosts and sync stay the system's (a simplification for a
    Mk1 system: its IPU-Server's PCIe C2 cards are not modelled apart)."""
    system, chip = get_system(system), get_machine(chip)
    if chip == system.chip:
        return system
    return system.replace(chip=chip, name=f"{system.name} ({chip.name})")


class ChipComparison(NamedTuple):
    """What :func:`compare_chips` returns: each system's :class:`TuneResult` and ``ratio``,
    the best samples/s of ``b`` over that of ``a`` (``b`` is that many times faster)."""

    a: TuneResult
    b: TuneResult
    ratio: float

    def summary(self, max_rows: int = 3) -> str:
        """Both winners (with ``max_rows`` runners-up each) and the ratio."""
        return "\n".join([self.a.summary(max_rows), "", self.b.summary(max_rows), "",
                          f"{self.b.system} / {self.a.system}: {self.ratio:.2f}x "
                          f"(each at its best fitting configuration)"])

    def to_dict(self) -> dict:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "ratio": self.ratio}


def compare_chips(model: Any, system_a: System | str, system_b: System | str = "POD16",
                  **tune_kwargs: Any) -> ChipComparison:
    """Train ``model`` on two systems, each at its own best fitting configuration
    (:func:`tune`), and the ratio of their throughputs: the Mk1 vs Mk2 question ("GC200 vs
    GC2: BERT-Large training 9.3x") answered as Graphcore ran it, each chip with the
    micro-batch, recomputation and pipeline its memory allows, not one configuration for
    both.

    Parameters
    ----------
    model : ipukern.nn.Network or str
        A network, or a model name of :data:`ipukern.nn.models.MODELS` (e.g. ``"resnet50"``).
    system_a, system_b : System or preset name
        E.g. ``on_chip("POD16", "GC2")`` and ``"POD16"``.
    **tune_kwargs
        Passed to both :func:`tune` calls (``max_global_batch``, ``bn_replica_group``,
        ``sample_bytes``, fixed options, ...).

    Returns
    -------
    ChipComparison
        ``(a, b, ratio)``, ``ratio = b.samples_per_second / a.samples_per_second``.

    Raises
    ------
    ValueError
        An unknown model name, or a bad :func:`tune` option (naming it).
    StageMemoryError
        No configuration searched fits one of the systems.
    """
    net = _network(model)
    a = tune(net, system_a, **tune_kwargs)
    b = tune(net, system_b, **tune_kwargs)
    return ChipComparison(a, b, b.samples_per_second / a.samples_per_second)


def _network(model: Any) -> Any:
    """A network, or the zoo network called ``model``."""
    if not isinstance(model, str):
        return model
    from ..nn.models import MODELS
    if model not in MODELS:
        raise ValueError(f"model: unknown model {model!r}; models are {sorted(MODELS)}")
    return MODELS[model]()


#: Graphcore's public Mk1 training configurations, by zoo model. ResNet-50 on 16 GC2s:
#: graphcore/examples applications/tensorflow/cnns/training/configs.yml, ``mk1_resnet50_16ipus``:
#: 4 replicas x 4 shards, micro-batch 4, gradient accumulation 64, pipeline splits
#: stage1/unit3/relu, stage2/unit4/relu, stage3/unit6/relu (after layer1, layer2 and layer3:
#: the next stages start at layer2.0 / layer3.0 / layer4.0 here), enable_recomputation (stage
#: recomputation), half partials; precision unset, so train.py's default 16.16 (float16
#: weights and optimizer state, as ``validation/published_systems.csv`` reads the MLPerf
#: configs). Simplification: its availableMemoryProportion list (0.6 x 6, 0.16, 0.2) is one
#: proportion here, 0.6; no published throughput goes with it.
PUBLISHED_MK1: dict[str, dict[str, Any]] = {
    "resnet50": dict(replicas=4, ipus_per_replica=4, micro_batch=4, gradient_accumulation=64,
                     pipeline=["layer2.0.conv1", "layer3.0.conv1", "layer4.0.conv1"], recompute=True,
                     dtype="float16", partials="half", optimizer_state_dtype="float16",
                     available_memory_proportion=0.6),
}


def published_mk1(model: str, system: System | str, net: Any = None, **options: Any) -> TuneCandidate:
    """:data:`PUBLISHED_MK1`'s configuration of ``model`` estimated on ``system`` (e.g.
    ``on_chip("POD16", "GC2")``), as a row to set beside :func:`tune`'s winner: its samples/s
    (with memory ignored when it does not fit) and whether it fits, and why not.

    ``options``: other :class:`~ipukern.systems.TrainingConfig` fields, e.g. the
    ``sample_bytes`` / ``bn_replica_group`` / ``optimizer_state_dtype`` a :func:`tune` call
    was given, so that the row and the winner differ only in what :func:`tune` searches (the
    published layout, micro-batch, accumulation, split, recomputation and proportion are kept;
    None values are ignored).

    Raises
    ------
    ValueError
        ``model`` has no published Mk1 configuration here.
    """
    if model not in PUBLISHED_MK1:
        raise ValueError(f"model: no published Mk1 configuration of {model!r}; "
                         f"there is one of {sorted(PUBLISHED_MK1)}")
    net = _network(model) if net is None else net
    fixed = PUBLISHED_MK1[model]
    rest = {k: v for k, v in options.items() if v is not None and k not in _FIXABLE}
    cfg = TrainingConfig.of(None, {**fixed, **{k: v for k, v in rest.items() if k not in
                                                ("dtype", "partials")}})
    why = "published Mk1 configuration (graphcore/examples configs.yml)"
    try:
        e = estimate_training(net, system, cfg)
        return TuneCandidate(cfg, e.samples_per_second, True, why)
    except StageMemoryError as err:
        e = estimate_training(net, system, cfg.replace(allow_overflow=True))
        return TuneCandidate(cfg, e.samples_per_second, False, f"{why}; {_short_reason(str(err))}")
