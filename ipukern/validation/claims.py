"""Graphcore's public claims, side by side with the model: ``ipukern claims``.

``claims.csv`` (shipped with the package) holds the claims of Graphcore's Mk2 launch (July
2020), its December 2020 benchmark post and its MLPerf Training v1.0 statements (June 2021)
as stated: the claim number of issue 32, the statement, the claimed figure and its unit, and
the source (Graphcore's post or press release, the outlet that reported it). A claim with
several figures is several rows (``1a`` .. ``1d``).

:func:`claims_report` runs each row through the model as it stands: the MLPerf rows through
:func:`ipukern.validation.systems.systems_report` (computed once for claims 1-4), per-chip
comparisons through :func:`ipukern.estimate_network` / :func:`ipukern.estimate_training`
and :func:`ipukern.gpu.estimate_network_gpu`, the grouped-conv claims through
:func:`ipukern.scaling.grouped_conv_sweep`, datasheet figures from the presets and prices and
power from :mod:`ipukern.market`. Each row states the configuration of both sides and the
basis chosen, the model's number on the default exchange (47.5 TB/s) and on the datasheet
IPU-Exchange (8 TB/s), model / claim, and a verdict (:func:`verdict`):

* ``reproduced``: model / claim within +-25 %;
* ``direction right, size off``: an advantage claim (``kind`` "advantage": a factor, 1 = parity)
  on the claimed side of parity, outside +-25 %; a plain figure (``kind`` "figure": minutes,
  PFLOPS, GB) within a factor of 2;
* ``contradicted``: the model puts the advantage on the other side of parity (a parity claim:
  more than 25 % short of it), or a figure more than a factor of 2 off;
* ``not modelled: <what is missing>``.

Nothing is tuned toward a claim: the searches over batch sizes and layouts pick the fastest
fitting candidate of a stated list on each side, whatever the claim says.
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import _memo
from .._format import Rest, format_table
from .._version import schema
from . import _claim_hw as hw
from . import _claim_models as cm
from ._table import read_table, select

__all__ = ["TOLERANCE", "VERDICTS", "Claim", "ClaimRow", "ClaimsReport", "claims_report", "load_claims",
           "verdict"]

#: model / claim within 1 +- TOLERANCE is "reproduced"
TOLERANCE = 0.25
#: a "figure" claim within this factor (either way) has its "size off", beyond it "contradicted"
FIGURE_FACTOR = 2.0
VERDICTS = ("reproduced", "direction right, size off", "contradicted", "not modelled")
_FIELDS = ("id", "claim", "topic", "statement", "claimed", "unit", "kind", "source")
_KINDS = ("advantage", "figure")


@dataclass(frozen=True)
class Claim:
    """One row of ``claims.csv``: a claim as stated."""

    id: str
    claim: int
    topic: str
    statement: str
    claimed: float
    unit: str
    #: "advantage" (a factor, 1 = parity) or "figure" (an absolute quantity)
    kind: str
    source: str


def verdict(model: float | None, claimed: float, kind: str = "advantage", *,
            missing: str = "") -> str:
    """The verdict of a model number on a claimed one (module docstring); ``missing`` (or a
    None model) gives ``"not modelled: <missing>"``."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if not (isinstance(claimed, (int, float)) and math.isfinite(claimed) and claimed > 0):
        raise ValueError(f"claimed must be a positive number, got {claimed!r}")
    if missing or model is None:
        return f"not modelled: {missing or 'no model number'}"
    if not math.isfinite(model) or model < 0:
        raise ValueError(f"model must be a finite number >= 0, got {model!r}")
    r = model / claimed
    if abs(r - 1.0) <= TOLERANCE:
        return "reproduced"
    if kind == "figure":
        return VERDICTS[1] if 1 / FIGURE_FACTOR <= r <= FIGURE_FACTOR else VERDICTS[2]
    if claimed == 1.0:                # a parity claim: short of it contradicts, beyond it is more
        return VERDICTS[2] if model < claimed else VERDICTS[1]
    same_side = (model > 1.0) == (claimed > 1.0) and model != 1.0
    return VERDICTS[1] if same_side else VERDICTS[2]


@dataclass
class ClaimRow:
    """A claim with the model's side."""

    claim: Claim
    model: cm.Modelled = field(default_factory=cm.Modelled)

    def ratio(self, variant: str = "default") -> float | None:
        """model / claim on ``variant`` ("default" or "datasheet")."""
        v = getattr(self.model, variant)
        return None if v is None or self.model.not_modelled else v / self.claim.claimed

    def verdict(self, variant: str = "default") -> str:
        value = None if self.model.not_modelled else getattr(self.model, variant)
        missing = self.model.not_modelled or (
            "no run on the datasheet exchange (--fast skips it)" if variant == "datasheet" else "")
        return verdict(value, self.claim.claimed, self.claim.kind, missing=missing if value is None else "")

    def to_dict(self) -> dict[str, Any]:
        m = self.model
        d = asdict(self.claim)
        d.update(ipu_side=m.ipu, other_side=m.other, basis=m.basis,
                 model_default=_round(None if m.not_modelled else m.default),
                 model_datasheet=_round(None if m.not_modelled else m.datasheet),
                 ratio_default=_round(self.ratio("default")), ratio_datasheet=_round(self.ratio("datasheet")),
                 verdict=self.verdict("default"), verdict_datasheet=self.verdict("datasheet"), note=m.note)
        return d


def _round(v: float | None, sig: int = 4) -> float | None:
    return None if v is None else float(f"{v:.{sig}g}")


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """The claims (the packaged ``claims.csv`` unless ``path`` is given); ValueError naming
    the row on a bad number, kind, missing source or repeated id."""
    where, records = read_table("claims.csv", path, _FIELDS)
    out: list[Claim] = []
    for lineno, rec in records:
        try:
            c = Claim(**{k: (rec[k] or "").strip() for k in _FIELDS if k not in ("claim", "claimed")},
                      claim=int(rec["claim"]), claimed=float(rec["claimed"]))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where} line {lineno}: {e}") from None
        if c.kind not in _KINDS or not c.source or not (math.isfinite(c.claimed) and c.claimed > 0):
            raise ValueError(f"{where} line {lineno}: {c.id}: needs kind in {_KINDS}, a source and a "
                             f"positive claimed value (got kind {c.kind!r}, claimed {c.claimed})")
        if any(o.id == c.id for o in out):
            raise ValueError(f"{where} line {lineno}: duplicate id {c.id!r}")
        out.append(c)
    return out


#: claim id -> the modeller (a function of the report's Context)
MODELLERS: dict[str, Callable[[cm.Context], cm.Modelled]] = {
    "1a": lambda c: cm.mlperf_time(c, "mlperf1.0-resnet-pod16"),
    "1b": lambda c: cm.mlperf_time(c, "mlperf1.0-bert-pod16"),
    "1c": lambda c: cm.mlperf_time(c, "mlperf1.0-resnet-pod64"),
    "1d": lambda c: cm.mlperf_time(c, "mlperf1.0-bert-pod64",
                                   "the claim is the open-division time; the configuration modelled is the "
                                   "closed-division one (published 11.08 min), the only POD64 "
                                   "BERT run in the table"),
    "2": cm.bert_scaling,
    "3a": lambda c: cm.mlperf_time(c, "mlperf1.0-resnet-dgxa100"),
    "3b": lambda c: cm.mlperf_time(c, "mlperf1.0-bert-dgxa100"),
    "4a": lambda c: cm.per_dollar(c, "resnet"),
    "4b": lambda c: cm.per_dollar(c, "bert"),
    "5a": lambda c: cm.inference_advantage(c, "efficientnet_b0"),
    "5b": lambda c: cm.training_advantage(c, "efficientnet_b0"),
    "6a": lambda c: cm.inference_advantage(c, "resnext101_32x4d"),
    "6b": lambda c: cm.inference_advantage(c, "resnext101_32x4d", latency=True),
    "7": lambda c: cm.training_advantage(c, "resnext50_32x4d"),
    "8a": cm.bert_base_same_latency,
    "8b": cm.bert_base_training,
    "9a": cm.mcmc,
    "9b": lambda c: cm.small_model(c, "vae_dense"),
    "9c": lambda c: cm.small_model(c, "mlp_sales"),
    "9d": lambda c: cm.small_model(c, "deeprec_autoencoder"),
    "10a": lambda c: hw.grouped(c, "max"),
    "10b": lambda c: hw.grouped(c, "min"),
    "10c": lambda c: hw.grouped(c, "monotone"),
    "11a": lambda c: hw.generation(c, "bert_large"),
    "11b": lambda c: hw.generation(c, "bert3"),
    "11c": hw.effnet_b3_generation,
    "11e": lambda c: hw.chip_figure(c, "peak"),
    "11f": lambda c: hw.chip_figure(c, "memory"),
    "11g": lambda c: hw.chip_figure(c, "tiles"),
    "12a": lambda c: hw.datasheet_ratio(c, "fp32"),
    "12b": lambda c: hw.datasheet_ratio(c, "ai"),
    "12c": lambda c: hw.datasheet_ratio(c, "memory"),
    "12d": lambda c: hw.market_figure(c, "8x IPU-M2000", "price", "DGX A100 320G"),
    "13": hw.effnet_b4_pod32,
    "14a": lambda c: hw.pod64_figure(c, "flops"),
    "14b": lambda c: hw.pod64_figure(c, "memory"),
    "14c": lambda c: hw.pod64_figure(c, "streaming"),
    "15a": lambda c: hw.market_figure(c, "IPU-M2000", "power"),
    "15b": lambda c: hw.per_watt(c, "ipu"),
    "15c": lambda c: hw.per_watt(c, "gpu"),
    "16a": lambda c: hw.sdk(c, "mlperf1.0-resnet-pod16"),
    "16b": lambda c: hw.sdk(c, "mlperf1.0-bert-pod16"),
    "16c": lambda c: hw.sdk(c, None),
}
#: rows computed from other rows (after them)
_DERIVED = {"11d": lambda c, done: hw.generation_average(c, done)}


@dataclass
class ClaimsReport:
    """One row per claim, in table order."""

    rows: list[ClaimRow]
    fast: bool = False

    def summary(self) -> dict[str, int]:
        """Rows per verdict (on the default exchange)."""
        out = {v: 0 for v in VERDICTS}
        for r in self.rows:
            v = r.verdict()
            out["not modelled" if v.startswith("not modelled") else v] += 1
        return out

    def to_dicts(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.rows]

    def to_csv(self, path: str | Path | None = None) -> str:
        """CSV text (one line per row); written to ``path`` when given."""
        buf = io.StringIO()
        rows = self.to_dicts()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else list(_FIELDS), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps({**schema("validation.claims"), "fast": self.fast, "tolerance": TOLERANCE,
                           "summary": self.summary(),
                           "rows": [r.to_dict() | {"details": r.model.details} for r in self.rows]},
                          indent=1, default=str)
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_markdown(self) -> str:
        """A Markdown table (claim, configuration, model numbers, ratio, verdict)."""
        lines = ["| id | claim | claimed | model (47.5 TB/s) | model (8 TB/s) | model / claim | verdict | "
                 "configuration modelled |", "|" + "---|" * 8]
        for r in self.rows:
            d = r.to_dict()
            cfg = "; ".join(x for x in (f"IPU side: {d['ipu_side']}" if d["ipu_side"] else "",
                                        f"other side: {d['other_side']}" if d["other_side"] else "",
                                        f"basis: {d['basis']}", d["note"]) if x)
            lines.append(f"| {d['id']} | {d['statement']} | {_num(d['claimed'])} {d['unit']} | "
                         f"{_num(d['model_default'])} | {_num(d['model_datasheet'])} | "
                         f"{_num(d['ratio_default'])} | {d['verdict']} | {cfg.replace('|', '/')} |")
        return "\n".join(lines)

    def format_table(self) -> str:
        """An aligned text table: id, claimed, model on both exchanges, ratio, verdict."""
        rows = []
        for r in self.rows:
            d = r.to_dict()
            v = d["verdict"]
            rows.append([d["id"], d["topic"][:28], _num(d["claimed"]), _num(d["model_default"]),
                         _num(d["model_datasheet"]), _num(d["ratio_default"]),
                         Rest(v if len(v) < 70 else v[:67] + "...")])
        lines = format_table(["id", "topic", "claimed", "model", "8 TB/s", "ratio", "verdict"], rows,
                             align="llrrrrl", rule=True).splitlines()
        s = self.summary()
        lines.append("")
        lines.append(", ".join(f"{n} {v}" for v, n in s.items())
                     + f" ({len(self.rows)} rows; verdicts on the "
                     f"default exchange, +-{TOLERANCE:.0%}; the JSON and Markdown outputs carry each row's "
                     "configuration and basis)")
        return "\n".join(lines)


    def format_details(self) -> str:
        """Every row in full: the claim and its source, both sides' configurations, the basis,
        the model's numbers, the ratio and the verdict on each exchange."""
        out = []
        for r in self.rows:
            d = r.to_dict()
            out += [f"[{d['id']}] {d['statement']}",
                    f"    claimed: {_num(d['claimed'])} {d['unit']} ({d['kind']}); source: {d['source']}"]
            out += [f"    {k}: {d[f]}" for k, f in (("IPU side", "ipu_side"), ("other side", "other_side"),
                                                      ("basis", "basis"), ("note", "note")) if d[f]]
            out += [f"    model: {_num(d['model_default'])} (47.5 TB/s), "
                    f"{_num(d['model_datasheet'])} (8 TB/s); "
                    f"model / claim {_num(d['ratio_default'])}, {_num(d['ratio_datasheet'])}",
                    f"    verdict: {d['verdict']}"]
            if d["verdict_datasheet"] != d["verdict"]:
                out.append(f"    verdict on 8 TB/s: {d['verdict_datasheet']}")
            out.append("")
        return "\n".join(out).rstrip("\n")


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _model_row(claim: Claim, ctx: cm.Context, done: dict[str, cm.Modelled]) -> cm.Modelled:
    fn = MODELLERS.get(claim.id)
    try:
        if fn is not None:
            return fn(ctx)
        if claim.id in _DERIVED:
            return _DERIVED[claim.id](ctx, done)
    except (ValueError, MemoryError, NotImplementedError) as e:
        return cm.Modelled(not_modelled="model error: " + " ".join(str(e).split()))
    return cm.Modelled(not_modelled=f"no modeller for claim {claim.id} in ipukern.validation.claims")


def claims_report(claims: Sequence[Claim] | None = None, *, ids: Sequence[str] | None = None,
                  fast: bool = False, progress: Any = None) -> ClaimsReport:
    """Run the claims through the model.

    Parameters
    ----------
    claims : list of Claim, optional
        Defaults to the packaged table (:func:`load_claims`).
    ids : list of str, optional
        Only these rows (exact ids); unknown ids raise ValueError. A derived row (11d) runs
        the rows it is made of as well.
    fast : bool
        One candidate per search and no datasheet-exchange runs (every row still gets a model
        number or its reason; the datasheet verdicts say "not run in the fast mode").
    progress : callable(done, total, label), optional

    Returns
    -------
    ClaimsReport
        A model error on a row becomes its "not modelled" reason; it is not raised.
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be a bool, got {type(fast).__name__}")
    table = list(load_claims() if claims is None else claims)
    wanted = select(table, ids, lambda c: c.id, "id")
    ctx = cm.Context(fast, {c.id: c.claimed for c in table})
    done: dict[str, cm.Modelled] = {}
    order = [c for c in wanted if c.id not in _DERIVED] + [c for c in wanted if c.id in _DERIVED]
    if any(c.id == "11d" for c in wanted):          # 11d is made of 11a-c
        order = [c for c in table if c.id in ("11a", "11b", "11c") and c not in wanted] + order
    for k, claim in enumerate(order):
        # each row's plans are dropped after it (rows share results through ctx, not plans):
        # kept, the full report's plans peaked at 9.2 GB of host memory
        with _memo.trial():
            done[claim.id] = _model_row(claim, ctx, done)
        if progress is not None:
            progress(k + 1, len(order), claim.id)
    return ClaimsReport([ClaimRow(c, done[c.id]) for c in wanted], fast=fast)
