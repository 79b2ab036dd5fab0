"""Machine and system variants from ranges of constants (ipukern.design_space.variants)."""
import pytest

import ipukern as ik
from ipukern.design_space import machine_variants, one_at_a_time, system_variants


def test_a_range_is_every_combination_last_constant_fastest():
    vs = machine_variants({"n_tiles": [736, 1472], "tile_bytes": ["x1", "x2"]})
    assert [(v.machine.n_tiles, v.machine.tile_bytes) for v in vs] == [
        (736, 638976), (736, 1277952), (1472, 638976), (1472, 1277952)]
    assert vs[1].changes == (("n_tiles", 736), ("tile_bytes", 1277952))
    assert vs[1].label == "GC200[n_tiles=736,tile_bytes=1277952]" == vs[1].machine.name


def test_derived_constants_and_factors():
    v, = machine_variants({"exchange_bandwidth": [8e12], "clock_ghz": ["x2"], "amp_scale": [0.5]})
    assert v.machine.clock_hz == 2 * ik.GC200.clock_hz
    assert v.machine.exchange_bandwidth == pytest.approx(8e12, rel=1e-12)
    assert v.machine.amp_units("float16", "float16") == 8 and v.machine.amp_units("float16", "float32") == 4
    odd, = machine_variants({"n_tiles": ["x0.3"]})          # 441.6 tiles: the nearest whole number
    assert odd.machine.n_tiles == 442


def test_one_at_a_time_is_the_base_and_each_constant_alone():
    oat = one_at_a_time({"tile_bytes": ["x2"], "exchange_bandwidth": [4e12, 16e12]})
    assert oat == [{}, {"tile_bytes": "x2"}, {"exchange_bandwidth": 4e12}, {"exchange_bandwidth": 16e12}]
    assert [v.label for v in machine_variants(oat, "BOW")][:2] == ["BOW", "BOW[tile_bytes=1277952]"]


@pytest.mark.parametrize("machines, match", [
    ({"tile_bytes": [638976, -1]},
     r"machine variant 1 \(tile_bytes=-1\): MachineSpec.tile_bytes must be a positive"),
    ({"n_tiles": [0]}, r"machine variant 0 \(n_tiles=0\): MachineSpec.n_tiles must be a positive int, got 0"),
    ({"n_tiles": [0], "exchange_bandwidth": [8e12]},
     r"machine variant 0 \(n_tiles=0, .*n_tiles must be a positive int"),
    ([{}, {"tile_bytes": 1000}], r"machine variant 1 \(tile_bytes=1000\): reserved_bytes_per_tile"),
    ({"n_tiles": [1.5]}, r"machine variant 0 \(n_tiles=1.5\): n_tiles must be a whole number"),
    ({"amp_scale": [0.3]}, r"amp_scale 0.3 gives 4.8 AMP units"),
    ({"exchange_bandwidth": [0]}, r"exchange_bandwidth must be > 0"),
    ({"clock_ghz": ["xfast"]}, r"clock_ghz value 'xfast' is not a number"),
    ({"tiles": [4]}, r"unknown constant 'tiles'"),
    ({"n_tiles": []}, r"n_tiles has no values"),
    ({"n_tiles": [float("nan")]}, r"n_tiles must be a finite number"),
])
def test_bad_variants_are_refused_naming_them(machines, match):
    with pytest.raises(ValueError, match=match):
        machine_variants(machines)


def test_bad_types_are_type_errors():
    with pytest.raises(TypeError, match="machines must be"):
        machine_variants(3)
    with pytest.raises(TypeError, match="machine variant 0 must be a dict"):
        machine_variants([3])
    with pytest.raises(TypeError, match="systems must be"):
        system_variants("POD4", machine_variants())


def test_system_variants_use_each_machine_as_their_chip():
    ms = machine_variants({"tile_bytes": ["x1", "x2"]})
    ss = system_variants({"n_ipus": [4, 16], "link_bandwidth_scale": [2.0]}, ms, "POD16")
    assert len(ss) == 4
    assert [(s.system.n_ipus, s.system.chip.tile_bytes) for s in ss] == [
        (4, 638976), (16, 638976), (4, 1277952), (16, 1277952)]
    base = ik.System.pod(4)
    assert ss[0].system.links[0].bytes_per_second == 2 * base.links[0].bytes_per_second
    match = r"system variant 0 \(n_ipus=3\) of GC200\[tile_bytes=638976\]: a pod of 3 IPUs"
    with pytest.raises(ValueError, match=match):
        system_variants({"n_ipus": [3]}, ms[:1])
