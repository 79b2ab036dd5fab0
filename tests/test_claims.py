"""ipukern.validation.claims: the claims table, the verdict rule, every claim's row, the CLI."""
from __future__ import annotations

import json

import pytest

from ipukern.validation import claims as cl

# ----------------------------------------------------------------------------- the verdict rule


@pytest.mark.parametrize("model, claimed, kind, expected", [
    (14.0, 15.0, "advantage", "reproduced"),                  # 0.93: inside +-25 %
    (18.75, 15.0, "advantage", "reproduced"),                 # 1.25: the edge is inside
    (3.0, 15.0, "advantage", "direction right, size off"),    # IPU ahead, by less
    (40.0, 15.0, "advantage", "direction right, size off"),   # IPU ahead, by more
    (0.5, 15.0, "advantage", "contradicted"),                 # GPU ahead
    (0.95, 1.3, "advantage", "contradicted"),                 # below parity: no advantage
    (0.6, 0.75, "advantage", "reproduced"),                   # a claim below parity
    (0.2, 0.75, "advantage", "direction right, size off"),
    (1.4, 0.75, "advantage", "contradicted"),
    (0.9, 1.0, "advantage", "reproduced"),                    # a parity claim ...
    (0.5, 1.0, "advantage", "contradicted"),                  # ... short of it
    (3.0, 1.0, "advantage", "direction right, size off"),     # ... beyond it
    (28.6, 37.1, "figure", "reproduced"),
    (20.0, 37.1, "figure", "direction right, size off"),      # within a factor of 2
    (80.0, 37.1, "figure", "contradicted"),                   # beyond it
    (10.0, 37.1, "figure", "contradicted"),
])
def test_verdict_on_made_up_numbers(model, claimed, kind, expected):
    assert cl.verdict(model, claimed, kind) == expected


def test_verdict_not_modelled_names_what_is_missing():
    assert cl.verdict(None, 15.0) == "not modelled: no model number"
    assert cl.verdict(3.0, 15.0, missing="no MCMC op") == "not modelled: no MCMC op"


@pytest.mark.parametrize("kwargs, match", [
    (dict(model=1.0, claimed=2.0, kind="speed"), "kind must be one of"),
    (dict(model=1.0, claimed=0.0), "claimed must be a positive number"),
    (dict(model=float("nan"), claimed=2.0), "model must be a finite number"),
])
def test_verdict_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cl.verdict(**kwargs)


# ----------------------------------------------------------------------------- the table
def test_every_claim_of_the_issue_has_rows_with_a_source_and_a_modeller():
    table = cl.load_claims()
    assert sorted({c.claim for c in table}) == list(range(1, 17))
    assert all(c.source and c.statement for c in table)
    assert len({c.id for c in table}) == len(table)
    for c in table:
        assert c.id in cl.MODELLERS or c.id in cl._DERIVED, c.id


def test_load_claims_names_the_bad_row(tmp_path):
    bad = tmp_path / "c.csv"
    bad.write_text("id,claim,topic,statement,claimed,unit,kind,source\n"
                   "1a,1,t,s,abc,min,figure,src\n")
    with pytest.raises(ValueError, match="line 2"):
        cl.load_claims(bad)
    bad.write_text("id,claim,topic,statement,claimed,unit,kind,source\n"
                   "1a,1,t,s,3,min,figure,\n")
    with pytest.raises(ValueError, match="a source"):
        cl.load_claims(bad)


def test_unknown_ids_and_bad_fast_are_errors():
    with pytest.raises(ValueError, match="unknown id"):
        cl.claims_report(ids=["99z"])
    with pytest.raises(TypeError, match="fast must be a bool"):
        cl.claims_report(ids=["14a"], fast="yes")


# ----------------------------------------------------------------------------- the rows
#: rows from presets and sourced data only: a second or so together
CHEAP = ["9a", "11e", "11f", "11g", "12a", "12b", "12c", "12d", "14a", "14b", "14c", "15a", "15b", "15c",
         "16c"]


def test_preset_rows_compute_from_the_presets():
    rep = cl.claims_report(ids=CHEAP)
    rows = {r.claim.id: r for r in rep.rows}
    assert [r.claim.id for r in rep.rows] == [c.id for c in cl.load_claims() if c.id in CHEAP]
    import ipukern as ik
    assert rows["14a"].model.default == pytest.approx(ik.IPU_POD64.peak_flops("float16", "float16") / 1e15)
    assert rows["11g"].model.default == pytest.approx(1472 / 1216)
    for key in ("12d", "15a", "16c"):                       # data or software: not the model's
        assert rows[key].verdict().startswith("not modelled: "), key
    for r in rep.rows:
        assert r.verdict().split(":")[0] in cl.VERDICTS


def test_mcmc_row_runs_the_zoo_hmc_step_on_both_sides():
    """Claim 9a: the zoo's HMC step, chain-steps per second of one GC200 over one A100, each
    at its best chain count (fast mode: 1024 chains), recomputed here from the estimates."""
    import ipukern as ik
    from ipukern.gpu import DGX_A100_40GB, estimate_network_gpu
    row = cl.claims_report(ids=["9a"], fast=True).rows[0]
    m = row.model
    assert not m.not_modelled and "hmc_logistic" in m.ipu and "hmc_logistic" in m.other
    assert "1024 chains" in m.ipu and "float32" in m.other and "per chip" in m.basis
    # one HMC proposal per chain is a chain-step, not a sample of a batch
    assert "chain-steps/s" in m.ipu and "chain-steps/s" in m.other and "samples/s" not in m.ipu
    assert "time to train" in row.claim.statement and "chain-steps per second" in m.basis
    net = ik.models.hmc_logistic(chains=1024)
    ipu = ik.estimate_network(net, batch=1, dtype="float32", partials="float").seconds
    gpu = estimate_network_gpu(net, 1, DGX_A100_40GB, dtype="float32", n_gpus=1, stack="mlperf").step_seconds
    assert m.default == pytest.approx(gpu / ipu)
    assert row.verdict() == cl.verdict(gpu / ipu, 15.0)
    assert "Metropolis accept" in m.note


@pytest.mark.slow
def test_every_row_runs_in_the_fast_mode():
    """Each claim id gets a row with a verdict (a model number, or the reason it has none)."""
    rep = cl.claims_report(fast=True)
    assert [r.claim.id for r in rep.rows] == [c.id for c in cl.load_claims()]
    for r in rep.rows:
        v = r.verdict()
        assert v.split(":")[0] in cl.VERDICTS, (r.claim.id, v)
        if not v.startswith("not modelled"):
            assert r.model.default is not None and r.model.default > 0, r.claim.id
            assert r.model.basis, r.claim.id
        else:
            assert len(v) > len("not modelled: ") + 10, (r.claim.id, v)
    assert sum(rep.summary().values()) == len(rep.rows)
    doc = json.loads(rep.to_json())
    assert doc["schema"] == "ipukern.validation.claims" and len(doc["rows"]) == len(rep.rows)


def test_outputs_carry_every_row(tmp_path):
    rep = cl.claims_report(ids=["12a", "16c"])
    text = rep.to_csv(tmp_path / "c.csv")
    assert (tmp_path / "c.csv").read_text() == text and text.count("\n") == 3
    md = rep.to_markdown()
    assert md.count("\n| 12a |") == 1 and "not modelled" in md
    assert "12a" in rep.format_table() and "[16c]" in rep.format_details()


# ----------------------------------------------------------------------------- the CLI
def test_cli_writes_the_files_and_json_to_stdout(tmp_path, capsys):
    from ipukern.cli import main
    rc = main(["claims", "--ids", "12a,14c", "--csv", str(tmp_path / "c.csv"), "--markdown",
               str(tmp_path / "c.md"), "--json", "-", "--no-progress"])
    assert rc == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["rows"][1]["id"] == "14c"
    assert "12a" in err and (tmp_path / "c.csv").exists() and (tmp_path / "c.md").exists()


@pytest.mark.parametrize("argv, match, code", [
    (["claims", "--ids", "nope"], "unknown id", 2),          # names nothing: a usage error
    (["claims", "--ids", ","], "--ids wants", 1),
    (["claims", "--ids", "12a", "--csv", "/nonexistent-dir/c.csv"], "no directory", 1),
    (["claims", "--ids", "12a", "--markdown", "."], "is a directory", 1),
])
def test_cli_errors_are_one_line(argv, match, code, capsys):
    from ipukern.cli import main
    assert main(argv) == code
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_a_side_without_a_fitting_candidate_makes_the_row_not_modelled():
    """One rule for every row with two searched sides: the first side with no fitting
    candidate names its candidates and why each failed."""
    from ipukern.validation import _claim_models as cm
    from ipukern.validation import _claim_search as cs
    fits = cs.Best("batch 8", 100.0, 0.08, tried={"batch 8": 100.0})
    none = cs.Best(tried={"batch 64": "does not fit: tile 3"})
    m = cm.Modelled()
    assert not cm._no_fit(m, fits, fits) and m.not_modelled == ""
    assert cm._no_fit(m, fits, none)
    assert m.not_modelled == "no fitting configuration: no candidate fits (batch 64: does not fit: tile 3)"
    assert cm._no_fit(m, cs.Best(tried={"batch 1": "does not fit: ipu"}), none)
    assert m.not_modelled.endswith("(batch 1: does not fit: ipu)")


@pytest.mark.slow
def test_generation_row_11c_is_compare_chips_and_states_one_configuration_too(monkeypatch):
    """Row 11c's verdict number is ipukern.compare_chips' (each chip at its best, the basis of
    Graphcore's statement); the note gives the GC2's winner run on the GC200 as well. A small
    network and search stand in for EfficientNet-B3 here (the wiring, not the figure)."""
    import ipukern as ik
    from ipukern.validation import _claim_hw as hw
    from ipukern.nn.models import MODELS
    small = (("max_micro_batch", 4), ("max_global_batch", 16), ("available_memory_proportion", 0.6))
    monkeypatch.setattr(hw, "_net", lambda name, **kw: MODELS["resnet8"]())
    monkeypatch.setattr(hw, "EFFNET_B3_TUNE", small)
    row = cl.claims_report(ids=["11c"]).rows[0]
    m = row.model
    net = MODELS["resnet8"]()
    want = ik.compare_chips(net, ik.on_chip("M2000", "GC2"), "M2000", **dict(small))
    assert m.default == pytest.approx(want.ratio) and m.details["compare_chips_ratio"] == round(want.ratio, 3)
    same = ik.estimate_training(net, "M2000", hw._fixed(want.a.best_config, want.a.best))
    ratio = same.samples_per_second / want.a.samples_per_second
    assert m.details["same_configuration_ratio"] == round(ratio, 3)
    assert f"{m.details['same_configuration_ratio']:.2f}x" in m.note
    assert "Graphcore's 7.4x" in m.basis and "compare_chips" in m.basis
    assert want.a.candidates[0].label() in m.other and want.b.candidates[0].label() in m.ipu
    assert m.datasheet is not None and row.verdict().split(":")[0] in cl.VERDICTS
