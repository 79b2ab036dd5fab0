"""ipukern.tune: the best fitting training configuration (small network, small system)."""
import dataclasses

import pytest

import ipukern as ik
from ipukern.cli import main
from ipukern.nn.models import MODELS

#: a small search: resnet8 on 4 IPUs, two proportions, micro-batches up to 16
SMALL = dict(max_micro_batch=16, max_global_batch=64, available_memory_proportion=(0.6, 0.3))


@pytest.fixture(scope="module")
def net():
    return MODELS["resnet8"]()


@pytest.fixture(scope="module")
def result(net):
    return ik.tune(net, "M2000", **SMALL)


def test_winner_fits_and_is_fastest(result, net):
    assert result.best.info["fits"]
    assert result.candidates[0].why == "best"
    again = ik.estimate_training(net, "M2000", result.best_config)
    assert again.samples_per_second == pytest.approx(result.samples_per_second)
    fitting = [c for c in result.candidates if c.fits]
    assert all(c.samples_per_second <= result.samples_per_second for c in fitting)
    assert result.best.global_batch <= 64


def test_refine_tries_a_smaller_micro_batch_with_more_accumulation(result):
    # within max_global_batch (64) the accumulation is whole, so the largest micro-batch below
    # the winner's with more accumulation may be faster: the search must have estimated it
    win = result.best_config
    acc = lambda mb: max(1, 64 // (win.replicas * mb))  # noqa: E731
    more = next(b for b in range(win.micro_batch - 1, 0, -1) if acc(b) > acc(win.micro_batch))
    tried = {(c.config.micro_batch, c.config.recompute, c.config.available_memory_proportion)
             for c in result.candidates if c.fits is not None}
    assert (more, win.recompute, win.available_memory_proportion) in tried


def test_runners_up_say_why(result):
    rest = result.candidates[1:]
    assert rest and all(c.why and c.why != "best" for c in rest)
    assert all(c.why.startswith(("slower:", "does not fit:", "pruned:", "global batch", "not searched"))
               for c in rest)
    assert "runners-up" in result.summary()


def test_deterministic(result, net):
    again = ik.tune(net, "M2000", **SMALL)
    assert again.best_config == result.best_config
    assert [(c.config, c.why) for c in again.candidates] == [(c.config, c.why) for c in result.candidates]


def test_fixed_options_pass_through(net):
    res = ik.tune(net, "M2000", micro_batch=4, available_memory_proportion=0.6, recompute=False,
                  optimizer="adam", max_global_batch=64)
    assert res.best_config.optimizer == "adam" and res.best_config.micro_batch == 4


def test_single_chip_system_of_any_spec(net):
    gc2 = ik.System.pod(1, ik.GC2)
    res = ik.tune(net, gc2, max_micro_batch=8, available_memory_proportion=0.6, recompute=False)
    assert res.best.info["fits"] and res.best.replicas == 1


@pytest.mark.parametrize("kw, match", [
    (dict(micro_batch=0), "micro_batch"),
    (dict(replicas=3), "replicas=3"),
    (dict(pipeline=["nolayer"]), "nolayer"),
    (dict(max_global_batch=0), "max_global_batch"),
    (dict(ipus_per_replica=3), "ipus_per_replica"),
])
def test_bad_inputs_name_the_argument(net, kw, match):
    with pytest.raises(ValueError, match=match):
        ik.tune(net, "M2000", **kw)


def test_cli_tune_json(capsys):
    rc = main(["tune", "resnet8", "--system", "M2000", "--micro-batch", "4", "--available-memory-proportion",
               "0.6", "--max-global-batch", "64", "--no-progress", "--json", "-"])
    out = capsys.readouterr().out
    assert rc == 0
    import json
    assert json.loads(out)["best"]["micro_batch"] == 4


@pytest.mark.parametrize("args, word", [(["--micro-batch", "0"], "micro_batch"),
                                        (["--replicas", "3"], "replicas"),
                                        (["--pipeline", "nolayer"], "nolayer"),
                                        (["--compare-chips", "GC2"], "--compare-chips")])
def test_cli_bad_inputs_one_line(capsys, args, word):
    rc = main(["tune", "resnet8", "--system", "M2000", "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 1 and word in err and len(err.strip().splitlines()) == 1


def test_cli_unknown_chip_is_a_usage_error(capsys):
    """A name that names nothing exits 2 before any work (docs/usage.rst's exit codes)."""
    with pytest.raises(SystemExit) as e:
        main(["tune", "resnet8", "--system", "M2000", "--no-progress", "--chip", "GC9"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "GC9" in err and len(err.strip().splitlines()) == 1


def test_compare_tune_says_so(capsys):
    rc = main(["compare", "resnet8", "--training", "--systems", "M2000", "--tune", "--max-global-batch", "64",
               "--available-memory-proportion", "0.6"])
    out = capsys.readouterr().out
    assert rc == 0 and "best fitting configuration" in out


def test_compare_chips_each_at_its_best(net):
    res = ik.compare_chips(net, ik.on_chip("M2000", "GC2"), "M2000", **SMALL)
    assert res.a.system == "IPU-M2000 (GC2)" and res.b.system == "IPU-M2000"
    assert res.a.best.info["fits"] and res.b.best.info["fits"]
    assert res.ratio == pytest.approx(res.b.samples_per_second / res.a.samples_per_second)
    # each side is tune's own answer on its system, not one configuration for both
    alone = ik.tune(net, ik.on_chip("M2000", "GC2"), **SMALL)
    assert alone.best_config == res.a.best_config
    a, b, ratio = res
    assert "each at its best" in res.summary()


def test_compare_chips_by_model_name():
    with pytest.raises(ValueError, match="model: unknown model 'nonet'"):
        ik.compare_chips("nonet", "M2000", "M2000")


def test_on_chip_keeps_the_system():
    gc2 = ik.on_chip("POD16", "GC2")
    assert gc2.chip.name == "GC2" and gc2.n_ipus == 16 and gc2.links == ik.get_system("POD16").links
    assert ik.on_chip("POD16", "GC200") is ik.get_system("POD16")
    with pytest.raises(ValueError, match="GC9"):
        ik.on_chip("POD16", "GC9")


def test_cli_compare_chips(capsys):
    rc = main(["tune", "resnet8", "--system", "M2000", "--compare-chips", "GC2,GC200", "--micro-batch", "4",
               "--available-memory-proportion", "0.6", "--max-global-batch", "64", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "IPU-M2000 / IPU-M2000 (GC2)" in out


def _tune_cold(net, system, reuse, flag="REUSE_PLANS", **kw):
    """A search from cold caches with the tune module's switch ``flag`` set to ``reuse``."""
    import importlib
    mod = importlib.import_module("ipukern.systems.tune")
    old = getattr(mod, flag)
    setattr(mod, flag, reuse)
    ik.nn.clear_network_caches()          # each run plans from scratch, not from the other's
    try:
        return ik.tune(net, system, **kw)
    finally:
        setattr(mod, flag, old)


@pytest.mark.parametrize("system", ["M2000", ik.on_chip("M2000", "GC2")], ids=["GC200", "GC2"])
def test_plan_reuse_changes_no_answer(net, system):
    kw = dict(max_micro_batch=8, max_global_batch=32, available_memory_proportion=(0.6, 0.3, 0.15))
    fast, slow = _tune_cold(net, system, True, **kw), _tune_cold(net, system, False, **kw)
    assert fast.best_config == slow.best_config
    assert fast.samples_per_second == slow.samples_per_second
    assert [(c.config, c.why, c.samples_per_second) for c in fast.candidates] == \
        [(c.config, c.why, c.samples_per_second) for c in slow.candidates]


def test_plan_reuse_is_scoped():
    from ipukern.conv import ConvParams
    from ipukern.machine import GC200
    from ipukern.nn.convops import pass_program, reuse_across_proportions
    ik.nn.clear_network_caches()
    p = ConvParams.from_shapes((1, 16, 8, 8), (16, 16, 1, 1), dtype="float16", partials="float16")
    with reuse_across_proportions():
        hi = pass_program(p, GC200, 0.6)
        lo = pass_program(p, GC200, 0.3)
    assert hi.plan.temp_bytes <= int(GC200.tile_bytes * 0.3) and lo is hi    # reused
    own = pass_program(p, GC200, 0.3)                                           # outside: planned
    assert own is not hi
    assert dataclasses.replace(lo.plan, temp_bytes_bound=own.plan.temp_bytes_bound) == own.plan


def test_published_mk1_config_names_real_layers():
    from ipukern.systems.tune import PUBLISHED_MK1, published_mk1
    from ipukern.systems.training import _split
    cfg = PUBLISHED_MK1["resnet50"]
    names = [n for n, _ in MODELS["resnet50"]().layers]
    stages = _split(names, cfg["pipeline"], cfg["ipus_per_replica"])
    assert [s[-1] for s in stages[:3]] == ["layer1.2.relu3", "layer2.3.relu3", "layer3.5.relu3"]
    assert cfg["replicas"] * cfg["ipus_per_replica"] == 16
    with pytest.raises(ValueError, match="model: no published Mk1 configuration of 'resnet8'"):
        published_mk1("resnet8", "POD16")


def test_published_mk1_row_in_compare_chips(monkeypatch, capsys):
    import importlib
    mod = importlib.import_module("ipukern.systems.tune")    # ipukern.systems.tune is the function
    # a published-style configuration of the small network (the ResNet-50 one takes minutes)
    monkeypatch.setitem(mod.PUBLISHED_MK1, "resnet8", dict(
        replicas=2, ipus_per_replica=2, micro_batch=2, gradient_accumulation=4, pipeline=["layer2.0.conv1"],
        recompute=True, available_memory_proportion=0.6))
    row = mod.published_mk1("resnet8", ik.on_chip("M2000", "GC2"), sample_bytes=1024, micro_batch=99)
    assert row.config.micro_batch == 2 and row.config.sample_bytes == 1024      # searched fields stay
    assert row.fits and row.samples_per_second > 0
    rc = main(["tune", "resnet8", "--system", "M2000", "--compare-chips", "GC2,GC200", "--micro-batch", "2",
               "--available-memory-proportion", "0.6", "--max-global-batch", "16", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "published Mk1 configuration on IPU-M2000 (GC2)" in out



@pytest.mark.parametrize("system", ["M2000", ik.on_chip("M2000", "GC2")], ids=["GC200", "GC2"])
def test_search_shortcuts_change_no_answer(net, system):
    # the probe order, cross-family bounds, known no-fit caps and early refinement against the
    # search without them: the same winner, and every configuration both estimated judged alike
    kw = dict(max_micro_batch=8, max_global_batch=32, available_memory_proportion=(0.6, 0.3, 0.15))
    fast, slow = (_tune_cold(net, system, on, "SHORTCUTS", **kw) for on in (True, False))
    assert fast.best_config == slow.best_config
    assert fast.samples_per_second == slow.samples_per_second
    a = {c.config: (c.fits, c.samples_per_second) for c in fast.candidates if c.fits is not None}
    b = {c.config: (c.fits, c.samples_per_second) for c in slow.candidates if c.fits is not None}
    assert set(a) & set(b) and all(a[k] == b[k] for k in set(a) & set(b))
    slow_fit = [c.config for c in slow.candidates if c.fits]
    assert all(k in a for k in slow_fit[:2])           # the baseline's best runner-up is reported too


def test_cross_bound_needs_more_work_or_less_memory():
    import importlib
    mod = importlib.import_module("ipukern.systems.tune")
    s = mod._Search(None, ik.get_system("M2000"), ik.systems.TrainingConfig(), None)
    s.free[(4, 8)] = [(0.6, False, 100.0), (0.3, "auto", 50.0)]
    fam = lambda rc, amp: mod._Family(1, 4, rc, amp, [8], lambda mb: 1)  # noqa: E731
    assert s.cross_bound(fam("auto", 0.3), 8) == pytest.approx(100.0 * (1 + mod.CROSS_BOUND_SLACK))
    assert s.cross_bound(fam(False, 0.6), 8) == pytest.approx(101.0)
    assert s.cross_bound(fam("auto", 0.6), 4) is None           # nothing at that micro-batch
    s.free[(4, 8)] = [(0.3, False, 100.0)]
    assert s.cross_bound(fam(False, 0.6), 8) is None            # a smaller proportion bounds nothing
