"""``ik.explore``: networks x machine / system variants x settings, on Dask or here, streamed
to disk; the result as a table, Pareto fronts and a sensitivity summary."""
from __future__ import annotations

import csv
import inspect
import itertools
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .._format import Rest, fmt_num, format_table
from .engines import check_scheduler, engine, run_points
from .pareto import pareto_front, plot_pareto, varied_costs
from .points import Point
from .sensitivity import Sensitivity, sensitivity
from .store import Store
from .variants import Variant, machine_variants, system_variants, with_base_values

__all__ = ["explore", "ExploreResult"]


@dataclasses.dataclass
class ExploreResult:
    """What :func:`explore` returns.

    Attributes
    ----------
    rows : list of dict
        One record per point, in point order (network, then variant, then settings): its
        ``key``, ``network``, ``variant``, ``mode``, every machine constant (``n_tiles``,
        ``tile_bytes``, ``clock_hz``, ``exchange_bandwidth``, ``amp_units_*`` ...), the
        system's for training points, the ``setting_*`` values, ``status`` (``"ok"``,
        ``"no-fit"`` or ``"error"`` with ``error``), and the results: ``samples_per_second``,
        ``seconds``, ``cycles``, ``tflops``, ``peak_bytes`` (and the tuned configuration).
    lost : list of (dict, str)
        Points the engine lost (a worker died, the cluster went away): the point's
        configuration and why. They are not in ``rows`` and a later run computes them.
    computed, reused : int
        Points computed by this call, and taken from the stream file of an earlier one.
    engine : str
        What ran the points, e.g. ``"Dask LocalCluster (2 workers)"``.
    """

    rows: list[dict]
    lost: list[tuple[dict, str]]
    computed: int
    reused: int
    engine: str

    @property
    def failed(self) -> list[dict]:
        """Rows whose point did not fit or raised (with its configuration and ``error``)."""
        return [r for r in self.rows if r["status"] != "ok"]

    def columns(self) -> list[str]:
        """Every column of the rows, in the order they first appear."""
        return list(dict.fromkeys(k for r in self.rows for k in r))

    def _table(self) -> dict[str, list]:
        """Columns of one type each (a column mixing strings and numbers becomes strings)."""
        cols = {c: [r.get(c) for r in self.rows] for c in self.columns()}
        for c, vals in cols.items():
            if any(isinstance(v, str) for v in vals) and any(isinstance(v, (int, float)) for v in vals):
                cols[c] = [None if v is None else str(v) for v in vals]
            elif any(isinstance(v, float) for v in vals) and any(type(v) is int for v in vals):
                cols[c] = [None if v is None else float(v) for v in vals]
        return cols

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame (pandas must be installed)."""
        import pandas as pd
        return pd.DataFrame(self._table())

    def to_csv(self, path: str | Path) -> Path:
        """Write the rows as CSV (empty cells for missing values)."""
        path = Path(path)
        cols = self.columns()
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=cols, restval="")
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v)
                            for k, v in r.items()})
        return path

    def to_parquet(self, path: str | Path) -> Path:
        """Write the rows as Parquet (needs pyarrow: ``pip install "ipukern[dask]"``)."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError('Parquet output needs pyarrow: pip install "ipukern[dask]"') from None
        path = Path(path)
        pq.write_table(pa.table(self._table()), path)
        return path

    def pareto(self, cost: str, network: str | None = None,
               measure: str = "samples_per_second") -> list[dict]:
        """The rows on the Pareto front of ``measure`` against ``cost`` (e.g.
        ``"total_sram_bytes"``), cheapest first (see :mod:`~ipukern.design_space.pareto`)."""
        return pareto_front(self.rows, cost, measure, network)

    def plot_pareto(self, path: str | Path, costs: list[str] | None = None) -> Path:
        """One panel per cost (default: those that vary) with each network's points and front."""
        return plot_pareto(self.rows, path, costs)

    def sensitivity(self) -> list[Sensitivity]:
        """Each network's gain from each varied constant (:mod:`~ipukern.design_space.sensitivity`)."""
        return sensitivity(self.rows)

    def summary(self) -> str:
        """Points and engine, each network's best variant, the sensitivities and the failures."""
        ok = [r for r in self.rows if r["status"] == "ok"]
        lines = [f"{len(self.rows)} points ({self.computed} computed, {self.reused} from the stream "
                 f"file) on {self.engine}; {len(ok)} ran and fit"]
        best = []
        for net in dict.fromkeys(r["network"] for r in self.rows):
            mine = [r for r in ok if r["network"] == net and r.get("samples_per_second")]
            if mine:
                top = max(mine, key=lambda r: r["samples_per_second"])
                best.append([net, fmt_num(top["samples_per_second"], 1), Rest(top["variant"])])
        if best:
            lines += format_table(["network", "best samples/s", "on variant"], best, align="lrl",
                                  indent="  ").split("\n")
        sens = self.sensitivity()
        if sens:
            lines.append("sensitivity (throughput at the highest value / at the lowest, others equal):")
            lines += ["  " + s.sentence() for s in sens]
        costs = varied_costs(self.rows)
        if costs:
            lines.append(f"Pareto fronts against: {', '.join(costs)}")
        for r in self.failed:
            lines.append(f"  {r['status']}: {r['network']} on {r['variant']}: {r['error']}")
        for cfg, why in self.lost:
            lines.append(f"  lost: {cfg['network']} on {cfg['variant']} {cfg['settings']}: {why}")
        return "\n".join(lines)


def _mode(systems: Any, tune: bool, settings: dict) -> str:
    if not isinstance(tune, bool):
        raise TypeError(f"tune must be True or False, got {tune!r}")
    if tune:
        return "tune"
    return "training" if systems is not None or "system" in settings else "network"


def _allowed(mode: str) -> set[str]:
    from ..nn import estimate_network
    from ..systems import TrainingConfig, estimate_training
    from ..systems import tune as tune_fn
    if mode == "network":
        names = set(inspect.signature(estimate_network).parameters) - {"net", "machine", "training_kw"}
        return names | {"model_kwargs"}
    fn = tune_fn if mode == "tune" else estimate_training
    names = set(inspect.signature(fn).parameters) - {"net", "system", "config", "costs", "options",
                                                     "progress"}
    return names | {f.name for f in dataclasses.fields(TrainingConfig)} | {"model_kwargs"}


def _settings_grid(settings: dict, mode: str) -> list[tuple[tuple[str, Any], ...]]:
    """Every combination of the settings (a list value is swept; wrap a list that is one
    value in a list of its own)."""
    bad = sorted(set(settings) - _allowed(mode))
    if bad:
        raise TypeError(f"explore ({mode} points) takes no setting(s) {bad}")
    names = list(settings)
    values = [v if isinstance(v, list) else [v] for v in settings.values()]
    for n, v in zip(names, values):
        if not v:
            raise ValueError(f"setting {n} has no values")
    return [tuple(zip(names, combo)) for combo in itertools.product(*values)]


def _networks(networks: Any) -> list:
    from ..nn.models import MODELS
    if isinstance(networks, str) or hasattr(networks, "layers"):
        networks = [networks]
    if not isinstance(networks, Iterable):
        raise TypeError(f"networks must be a zoo model name, a Network or a list of them, got {networks!r}")
    networks = list(networks)
    if not networks:
        raise ValueError("networks is empty: give at least one zoo model name or Network")
    for n in networks:
        if isinstance(n, str) and n not in MODELS:
            raise ValueError(f"unknown network {n!r}; zoo models are {sorted(MODELS)}")
        if not isinstance(n, str) and not hasattr(n, "layers"):
            raise TypeError(f"a network must be a zoo model name or an ipukern.nn.Network, got {n!r}")
    return networks


def _variants(machines: Any, systems: Any, mode: str, settings: dict) -> list[Variant]:
    base_machine = settings.pop("machine", None)
    base_system = settings.pop("system", None)
    variants = machine_variants(machines, base_machine)
    if mode != "network":
        variants = system_variants(systems, variants, base_system)
    return with_base_values(variants, base_machine, base_system)


def _points(networks: list, variants: list[Variant], grid: list, mode: str) -> list[Point]:
    combos = itertools.product(networks, variants, grid)
    return [Point(i, net, v.label, v.changes, v.machine, v.system, mode, s)
            for i, (net, v, s) in enumerate(combos)]


def explore(networks: Any, machines: Any = None, systems: Any = None, *, tune: bool = False,
            scheduler: Any = None, n_workers: int | None = None, out: str | Path | None = None,
            progress: Callable[[int, int, str], None] | None = None, **settings: Any) -> ExploreResult:
    """Sweep networks over machine (and system) variants and settings.

    Parameters
    ----------
    networks : str, Network or list of them
        Zoo model names (``ik.models.MODELS``) or :class:`~ipukern.nn.Network` objects.
    machines : mapping, list or MachineSpec, optional
        Ranges of constants, ``{"tile_bytes": ["x0.5", "x1", "x2"], "exchange_bandwidth":
        [8e12, 47.5e12]}`` (every combination; ``"x2"`` is twice the base's value), a list of
        variants (dicts of changes or MachineSpecs), or one spec. Constants:
        :data:`~ipukern.design_space.MACHINE_CONSTANTS` (tiles, bytes per tile, clock,
        exchange rate, ``amp_scale`` for the AMP units, links ...). The base is the
        ``machine=`` setting (default GC200). Default: the base alone.
    systems : mapping or list, optional
        Ranges of :data:`~ipukern.design_space.SYSTEM_CONSTANTS` (``n_ipus``,
        ``link_bandwidth_scale``, ``link_latency_s`` ...) over the ``system=`` setting
        (default POD16) with each machine variant as its chip. Given (or ``system=`` or
        ``tune=True``), points are training estimates on the systems; otherwise
        :func:`~ipukern.estimate_network` on one chip.
    tune : bool, default False
        Each point is :func:`~ipukern.tune`'s best fitting training configuration on its
        system (micro-batch, replicas, recomputation, availableMemoryProportion searched)
        instead of the configuration the settings fix.
    scheduler : None, str, distributed.Client or Executor
        Where the points run: None a Dask LocalCluster (an ipukern process pool without
        Dask), ``"tcp://host:8786"`` a Dask scheduler, ``"local"``, ``"process"``,
        ``"serial"`` (see :mod:`~ipukern.design_space.engines`).
    n_workers : int, optional
        Workers of a LocalCluster or process pool (default: the CPUs).
    out : path, optional
        The stream file (JSON lines): each finished point is appended at once, and the
        points it already holds are not computed again (resume after an interruption).
    progress : callable(done, total, label), optional
    **settings
        ``machine=`` / ``system=`` (the bases), then keyword arguments of
        ``estimate_network`` (``batch``, ``dtype``, ``partials``, ``model_kwargs`` ...) or of
        ``estimate_training`` / ``tune``. A list value is swept (``batch=[1, 16]``).

    Returns
    -------
    ExploreResult

    Raises
    ------
    ValueError, TypeError
        Before any point runs: a bad variant (naming it: ``machine variant 2 (tile_bytes=-1):
        MachineSpec.tile_bytes must be a positive int, got -1``), an unknown constant,
        network or setting, a bad scheduler.
    """
    check_scheduler(scheduler, n_workers)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable(done, total, label), got {progress!r}")
    nets = _networks(networks)
    mode = _mode(systems, tune, settings)
    settings = dict(settings)
    variants = _variants(machines, systems, mode, settings)
    points = _points(nets, variants, _settings_grid(settings, mode), mode)
    with Store(out) as store:
        todo = {}
        for p in points:
            if p.key not in store.records and p.key not in todo:
                todo[p.key] = p
        reused = len({p.key for p in points}) - len(todo)
        with engine(scheduler, n_workers, len(todo)) as (executor, how):
            lost = run_points(list(todo.values()), executor, store, progress)
        records = store.records
    lost_keys = {p.key for p, _ in lost}
    rows = [{**records[p.key], "network": p.network, "variant": p.variant}
            for p in points if p.key not in lost_keys]
    lost_cfg = [({"network": p.network, "variant": p.variant, "changes": dict(p.changes),
                  "settings": dict(p.settings)}, why) for p, why in lost]
    return ExploreResult(rows, lost_cfg, len(todo) - len(lost), reused, how)
