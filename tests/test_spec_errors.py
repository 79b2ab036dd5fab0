"""A small fuzz of MachineSpec / System / machine-file construction and Device.alloc:
every bad value is a ValueError/TypeError naming the field, never a bare Python error."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ipukern import Device
from ipukern.machine import GC200, MachineSpec, machine_from_toml
from ipukern.systems.spec import System

#: a list nested 5,000 deep: repr() of it (in an error message) raised RecursionError
DEEP: list = [1]
for _ in range(5000):
    DEEP = [DEEP]
BAD = [1, 2.5, "x", None, -1, 0, float("nan"), float("inf"), 2**70, (1,), [1, [2]], {}, True, 1e300, DEEP]


def _id(v) -> str:
    return "deep" if v is DEEP else repr(v)
#: what a bare Python error says; a field-named message never does
BARE = ("not iterable", "has no len()", "not supported between", "division by zero",
        "recursion", "too large to convert")


def _check(fn, *names: str) -> None:
    try:
        fn()
    except (ValueError, TypeError) as e:
        msg = str(e)
        assert any(n in msg for n in names), msg
        assert not any(b in msg for b in BARE), msg


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(MachineSpec) if f.name != "sources"])
@pytest.mark.parametrize("value", BAD, ids=_id)
def test_machine_spec_field(field, value):
    _check(lambda: GC200.replace(**{field: value}), field)


@pytest.mark.parametrize("value", BAD, ids=_id)
@pytest.mark.parametrize("key,names", [("exchange_bandwidth", ("exchange_b",)), ("clock_ghz", ("clock",))])
def test_machine_spec_derived(key, names, value):
    _check(lambda: GC200.replace(**{key: value}), *names)


@pytest.mark.parametrize("field", ["chip", "n_ipus", "links", "n_hosts", "host_bytes_per_second",
                                   "streaming_bytes_per_machine", "streaming_bytes_per_second",
                                   "sync_latency_per_hop_s", "domain_ipus"])
@pytest.mark.parametrize("value", BAD, ids=_id)
def test_system_field(field, value):
    _check(lambda: System.pod(4).replace(**{field: value}), field, "link", "IPU")


@pytest.mark.parametrize("value", BAD, ids=_id)
@pytest.mark.parametrize("key", ["link_latency_s", "link_bandwidth_scale"])
def test_system_link_rewrites(key, value):
    _check(lambda: System.pod(4).replace(**{key: value}), key, "latency", "bandwidth")


@pytest.mark.parametrize("value", BAD, ids=_id)
@pytest.mark.parametrize("key", ["n", "chip", "domain_ipus"])
def test_pod_arguments(key, value):
    kw = {"n": 4, key: value}
    _check(lambda: System.pod(**kw), key, "pod", "IPUs", "chip")


def test_pod_size_is_bounded():
    with pytest.raises(ValueError, match="beyond"):
        System.pod(64 * 4096)


@pytest.mark.parametrize("line", ["n_tiles = [1, 2]", "clock_hz = 'fast'", "amp_conv_units = 3",
                                  "tile_bytes = 0", "coeff_load_bytes_per_cycle = 0",
                                  "exchange_bandwidth = 0", "sources = 1", "n_tiles = 1e400"])
def test_machine_file_values(tmp_path, line):
    f = tmp_path / "m.toml"
    f.write_text(f'base = "GC200"\n{line}\n')
    key = line.split(" =")[0]
    _check(lambda: machine_from_toml(f), key, "sources")


@pytest.mark.parametrize("text", ["n_tiles = " + "[" * 5000 + "]" * 5000,
                                  "x = " + "{a = " * 3000 + "1" + "}" * 3000,
                                  "amp_conv_units = " + "[" * 40 + "]" * 40])
def test_machine_file_nested_too_deeply(tmp_path, text):
    """tomllib parses nesting recursively: RecursionError instead of a named error."""
    f = tmp_path / "m.toml"
    f.write_text(f'base = "GC200"\n{text}\n')
    with pytest.raises(ValueError, match="machine file .*(nested|not valid TOML)"):
        machine_from_toml(f)


def test_coeff_load_of_one_estimates():
    from ipukern import estimate_conv2d
    m = GC200.replace(coeff_load_bytes_per_cycle=1)
    assert estimate_conv2d((1, 16, 8, 8), (16, 16, 3, 3), padding=1, machine=m).total_cycles > 0


@pytest.mark.parametrize("size", [5.5, True, np.float64(3.0), None, "8"])
def test_alloc_refuses_non_integer_sizes(size):
    dev = Device(GC200.replace(n_tiles=4))
    with pytest.raises(TypeError, match="size"):
        dev.alloc("x", size)


@pytest.mark.parametrize("size", [2**70, -1])
def test_alloc_refuses_sizes_out_of_range(size):
    dev = Device(GC200.replace(n_tiles=4))
    with pytest.raises(ValueError, match="size"):
        dev.alloc("x", size)
