"""ipukern.market: every figure sourced, lookups, and the System -> figures mapping."""
import csv
from importlib import resources

import pytest

import ipukern as ik
from ipukern import market
from ipukern.gpu import GPU_SYSTEMS, get_gpu


def _rows():
    text = resources.files("ipukern").joinpath("data/market.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_every_row_has_a_source_a_date_and_a_unit_matching_its_kind():
    rows = _rows()
    assert rows
    for r in rows:
        assert None not in r, f"{r['key']}: a row with more cells than the header"
        assert len(r["source"]) > 20, f"{r['key']} {r['kind']}: no public source"
        assert r["date"][:4].isdigit(), f"{r['key']} {r['kind']}: no date"
        assert (r["kind"], r["unit"]) in (("price", "USD"), ("power", "W")), r
        assert float(r["value"]) > 0


def test_derived_figures_say_they_are_derived():
    # a figure no document states outright (a GC200's share of its machine) must say how it came
    assert "derived" in market.power("GC200").source
    assert market.power("GC200").value == market.power("IPU-M2000").value / 4


def test_the_issue_s_figures():
    assert market.price("IPU-POD16").value == 150_000
    assert market.price("DGX A100 640G").value == 300_000
    assert market.price("DGX A100 320G").value == 199_000
    assert market.price("8x IPU-M2000").value == 259_600 == 8 * market.price("IPU-M2000").value
    assert market.power("IPU-M2000").value == 1100
    assert market.power("A100 SXM 80GB").value == 400
    assert market.power("DGX A100 640G").value == 6500
    # the two DGX A100 prices are two systems with two dates, never one overwritten by the other
    assert market.price("DGX A100 320G").date < market.price("DGX A100 640G").date


def test_gpu_tdps_agree_with_the_gpu_model_specs():
    # the same datasheet TDP lives in ipukern.gpu.specs (its own layer); they must not drift
    for preset in ("A100_80GB", "A100_40GB", "A100_PCIE_40GB", "A100_PCIE_80GB", "V100", "V100_PCIE",
                   "H100", "H100_PCIE", "L4", "T4"):
        assert market.power(preset).value == get_gpu(preset).tdp_watts, preset


def test_lookups_ignore_case_and_punctuation_and_take_preset_names():
    assert market.price("pod16") is market.price("IPU-POD16")
    assert market.power("dgx_a100_320g") is market.power("DGX A100 320G")
    assert market.power("DGX_A100").key == "DGX A100 640G"      # ipukern's DGX_A100 is the 640 GB system
    assert "IPU-M2000" in market.keys() and "T4" in market.keys()
    assert len(market.figures()) == len(_rows())


def test_unknown_key_names_it_and_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown market key 'TPUv4'.*IPU-M2000.*DGX A100 640G"):
        market.price("TPUv4")
    with pytest.raises(ValueError, match=r"no public price for 'A100 SXM 80GB'.*IPU-POD16"):
        market.price("A100_80GB")
    with pytest.raises(TypeError, match="market key must be a str"):
        market.power(400)


def test_figure_rejects_bad_fields():
    with pytest.raises(ValueError, match="unit"):
        market.Figure(1.0, "EUR", "somewhere")
    with pytest.raises(ValueError, match="value"):
        market.Figure(float("nan"), "W", "somewhere")
    with pytest.raises(ValueError, match="source"):
        market.Figure(1.0, "W", " ")


def test_for_system_ipu_presets():
    m_price, m_power = market.for_system(ik.IPU_M2000)
    assert (m_price.value, m_power.value) == (32_450, 1100)
    p16, w16 = market.for_system(ik.IPU_POD16)
    assert p16 is market.price("IPU-POD16")                   # its own stated price wins
    assert w16.value == 4 * 1100 and w16.key == "4 x IPU-M2000" and "no host server" in w16.note
    p64, w64 = market.for_system(ik.IPU_POD64)
    assert p64.value == 16 * 32_450 and w64.value == 16 * 1100 and "16 IPU-M2000" in p64.note
    assert market.for_system("POD16") == (p16, w16)
    p8, w8 = market.for_system("8x IPU-M2000")                 # Graphcore's July 2020 comparison
    assert p8.value == 259_600 and w8.value == 8 * 1100 and w8.key == "8 x IPU-M2000"


def test_for_system_custom_pods_count_their_machines():
    p, w = market.for_system(ik.System.pod(32))
    assert (p.value, w.value) == (8 * 32_450, 8 * 1100)
    p, w = market.for_system(ik.BOW_POD16)
    assert p is None and w.value == 4 * 1700                  # no public Bow price
    # a chip with no machine figures gets none rather than a borrowed one, whatever its name
    assert market.for_system(ik.IPU_POD16.replace(chip=ik.GC2, name="IPU-POD16-GC2")) == (None, None)
    assert market.for_system(ik.IPU_POD16.replace(chip=ik.GC2)) == (None, None)
    # a GC200 system named POD16 but holding 32 IPUs is priced as its 8 machines
    p, w = market.for_system(ik.System.pod(32, name="IPU-POD16"))
    assert (p.key, w.value) == ("8 x IPU-M2000", 8 * 1100)


def test_for_system_gpu_systems():
    p, w = market.for_system(GPU_SYSTEMS["DGX_A100"])
    assert (p.value, w.value) == (300_000, 6500)
    p, w = market.for_system(GPU_SYSTEMS["DGX_A100_40GB"])
    assert (p.value, w.value) == (199_000, 6500)
    p, w = market.for_system(GPU_SYSTEMS["DGX_H100"])
    assert p is None and w.value == 10_200
    two = GPU_SYSTEMS["DGX_A100"].replace(nodes=2, nic_bytes_per_s=200e9)
    p, w = market.for_system(two)
    assert (p.value, w.value) == (600_000, 13_000) and "2 nodes" in p.note
    other_gpus = GPU_SYSTEMS["DGX_A100"].replace(gpu="A100_40GB")     # still named DGX_A100
    p, w = market.for_system(other_gpus)                            # not the DGX the price is for
    assert p is None and (w.key, w.value) == ("8 x A100 SXM 40GB", 8 * 400)
    odd = GPU_SYSTEMS["DGX_A100"].replace(name="4xA100", gpus_per_node=4)
    assert market.for_system(odd) == (None, market.for_system(odd)[1])
    assert market.for_system(odd)[1].value == 4 * 400


def test_for_system_bad_input():
    with pytest.raises(ValueError, match="unknown market key 'POD7'"):
        market.for_system("POD7")
    with pytest.raises(TypeError, match="for_system takes a key"):
        market.for_system(16)


def test_efficiency_divides_by_the_sourced_figures():
    eff = market.efficiency(15_000.0, ik.IPU_POD16)
    assert eff.samples_per_second_per_kusd == pytest.approx(15_000 / 150)        # per US$1,000
    assert eff.samples_per_second_per_watt == pytest.approx(15_000 / 4400)
    doc = eff.to_dict()
    assert doc["price"]["key"] == "IPU-POD16" and "graphcore.ai" in doc["price"]["source"]
    assert doc["power"]["unit"] == "W"
    h100 = market.efficiency(1.0, "DGX_H100")
    assert h100.samples_per_second_per_kusd is None and h100.to_dict()["price"] is None
    own = market.efficiency(1000.0, "DGX_H100", price_usd=500_000)
    assert own.samples_per_second_per_kusd == pytest.approx(2.0) and "given by the user" in own.price.source
    assert "US$150,000 (2021-06-30)" in eff.price.footnote()


@pytest.mark.parametrize("kw, match", [(dict(samples_per_second=-1.0), "samples_per_second"),
                                       (dict(samples_per_second=float("inf")), "samples_per_second"),
                                       (dict(samples_per_second="1"), "samples_per_second"),
                                       (dict(price_usd=0), "price_usd"),
                                       (dict(price_usd=True), "price_usd")])
def test_efficiency_bad_input(kw, match):
    args = dict(samples_per_second=1.0, system="POD16") | kw
    with pytest.raises(ValueError, match=match):
        market.efficiency(**args)
