"""System specs: topology from PopLibs' IPUModel link counts, sync cost, routes, errors."""
import math

import pytest

import ipukern as ik
from ipukern.systems.spec import GW_LINK_BYTES_PER_SECOND

LANE = 128 * 2**30 / 8 * 0.85   # PopLibs IPUModel: 128 Gibit/s x 0.85 per IPU-Link


def lanes_per_ipu(system):
    out = [0] * system.n_ipus
    for ln in system.links:
        if ln.kind == "ipu-link":
            out[ln.a] += ln.n_lanes
            out[ln.b] += ln.n_lanes
    return out


def test_presets():
    assert ik.IPU_M2000.n_ipus == 4 and ik.IPU_POD16.n_ipus == 16 and ik.IPU_POD64.n_ipus == 64
    assert ik.IPU_POD16.n_machines == 4 and ik.IPU_POD64.n_machines == 16
    assert ik.BOW_POD16.chip.clock_hz == 1.85e9 and ik.IPU_POD16.chip is ik.GC200
    # 4 x 250 TFLOPS FP16.16 per M2000 = "1 PetaFLOPS" (datasheet)
    assert ik.IPU_M2000.peak_flops("float16") == pytest.approx(4 * ik.GC200.peak_flops("float16"))
    assert ik.get_system("pod16") is ik.IPU_POD16 and ik.get_system("Bow-POD64") is ik.BOW_POD64
    assert "IPU-POD16" in ik.IPU_POD16.describe()


def test_ladder_links_match_poplibs_ipumodel():
    pod16 = ik.IPU_POD16
    rungs = [ln for ln in pod16.links if ln.b == ln.a + 1 and ln.a % 2 == 0]
    rails = [ln for ln in pod16.links if ln.b == ln.a + 2]
    assert len(rungs) == 8 and all(ln.n_lanes == 6 for ln in rungs)
    assert len(rails) == 14 and all(ln.n_lanes == 2 for ln in rails)
    assert len(pod16.links) == 22                       # a ladder, not a torus
    assert rungs[0].bytes_per_second == pytest.approx(6 * LANE)
    # 10 IPU-Links per IPU: the ends of a ladder leave 2 free, a torus uses them all
    assert max(lanes_per_ipu(pod16)) == 10 and min(lanes_per_ipu(pod16)) == 8
    assert set(lanes_per_ipu(ik.IPU_POD64)) == {10}


def test_sync_cycles_poplibs_formula():
    # ceil(15 ns x 1.325 GHz x (1 + (N/2)/2) x 2)
    assert ik.IPU_POD16.sync_cycles() == math.ceil(15e-9 * 1.325e9 * 5 * 2) == 199
    assert ik.IPU_POD64.sync_cycles() == math.ceil(15e-9 * 1.325e9 * 17 * 2) == 676
    assert ik.IPU_POD16.sync_cycles(2) == 40
    assert ik.IPU_POD16.sync_cycles(1) == ik.GC200.sync_cycles


def test_routes():
    assert ik.IPU_POD16.route(0, 15) == [0, 1, 3, 5, 7, 9, 11, 13, 15]   # rung first
    assert ik.IPU_POD16.route(5, 5) == [5]
    assert ik.IPU_POD64.route(0, 62) == [0, 62]                           # torus wrap
    pod128 = ik.System.pod(128)
    assert pod128.route(0, 65) == [0, 65] and pod128.link(0, 65).kind == "gw-link"
    assert pod128.link(0, 65).bytes_per_second == GW_LINK_BYTES_PER_SECOND == 12.5e9
    ring = ik.IPU_POD16.ring()
    assert sorted(ring) == list(range(16))
    for a, b in zip(ring, ring[1:] + ring[:1]):
        ik.IPU_POD16.link(a, b)      # every ring hop is one link


def test_replace_and_pod():
    slow = ik.IPU_POD16.replace(link_latency_s=1e-6, link_bandwidth_scale=0.5)
    assert all(ln.latency_s == 1e-6 for ln in slow.links)
    assert slow.link(0, 1).bytes_per_second == pytest.approx(3 * LANE)
    assert ik.System.pod(2).links[0].n_lanes == 6 and ik.System.pod(1).links == ()
    assert ik.System.pod(16, "BOW").chip is ik.BOW


@pytest.mark.parametrize("call, match", [
    (lambda: ik.System.pod(6), "whole IPU-Machines"),
    (lambda: ik.System.pod(0), "positive int"),
    (lambda: ik.System.pod(True), "positive int"),
    (lambda: ik.System.pod(96), "multiple of 64"),
    (lambda: ik.System.pod(4, torus=True), "at least 3 rungs"),
    (lambda: ik.System.pod(8, domain_ipus=3), "domain_ipus"),
    (lambda: ik.get_system("POD17"), "unknown system"),
    (lambda: ik.IPU_POD16.route(0, 16), "outside 0..15"),
    (lambda: ik.Link(3, 1, "ipu-link", 1, 1e9, 0.0), "0 <= a < b"),
    (lambda: ik.Link(0, 1, "pcie", 1, 1e9, 0.0), "kind"),
    (lambda: ik.Link(0, 1, "ipu-link", 1, -1.0, 0.0), "bandwidth"),
    (lambda: ik.System("x", ik.GC200, 2, (ik.Link(0, 2, "ipu-link", 1, 1e9, 0.0),)), "outside"),
    (lambda: ik.System("x", ik.GC200, 2, (), n_hosts=0), "n_hosts"),
    (lambda: ik.SystemDevice(ik.IPU_M2000, 5), "has 4 IPUs"),
])
def test_bad_input(call, match):
    with pytest.raises(ik.SystemConfigError, match=match):
        call()


def test_pod64_peak_matches_datasheet():
    # POD64 datasheet: 15.98 PFLOPS FP16.16 (64 x 1472 tiles x 64 MAC x 2 x 1.325 GHz)
    assert ik.IPU_POD64.peak_flops("float16") == pytest.approx(15.98e15, rel=1e-3)


def test_streaming_memory_is_each_machines_own_figure():
    """IPU-M2000 systems: the M2000 launch specification's 448 GB per machine (the POD64's
    "7 TB" is 16 of them); Bow systems: the Bow-2000 datasheet's 256 GB; an explicit value wins."""
    assert ik.IPU_M2000.streaming_bytes == 448e9
    assert ik.IPU_POD64.streaming_bytes == 16 * 448e9
    assert ik.System.pod(8, ik.GC200).streaming_bytes_per_machine == 448e9
    bow = ik.System.pod(16, ik.BOW)
    assert bow.streaming_bytes_per_machine == 256e9 and bow.streaming_bytes == 4 * 256e9
    assert "Bow-2000 datasheet" in dict(bow.sources)["streaming memory"]
    assert "IPU-M2000 launch" in dict(ik.IPU_POD16.sources)["streaming memory"]
    own = ik.System.pod(4, ik.BOW, streaming_bytes_per_machine=64e9)
    assert own.streaming_bytes == 64e9 and "given" in dict(own.sources)["streaming memory"]


def test_cli_info_systems(capsys):
    from ipukern.cli import main
    assert main(["info", "--systems"]) == 0
    out = capsys.readouterr().out
    for name in ("IPU-M2000", "IPU-POD16", "IPU-POD64", "Bow-POD64", "DGX_A100", "cross-chip sync"):
        assert name in out
