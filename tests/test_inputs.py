"""Machine files (TOML) and layer lists (CSV): round trips, errors, and the CLI options."""
from __future__ import annotations

import json

import pytest

import ipukern as ik
from ipukern.cli import main
from ipukern.machine import machine_from_toml, machine_to_toml
from ipukern.scaling import read_layers, write_layers
from ipukern.scaling import DEFAULT_LAYERS, ConvLayer

VARIANT = """
base = "GC200"
name = "GC200-fastsync"
exchange_bandwidth = 8e12
sync_cycles = 45
[sources]
sync_cycles = "what-if: half of PopLibs' 90 cycles"
"""


@pytest.mark.parametrize("preset", list(ik.PRESETS.values()), ids=list(ik.PRESETS))
def test_machine_file_round_trip(preset, tmp_path):
    path = tmp_path / "m.toml"
    text = preset.to_toml(path)
    back = ik.MachineSpec.from_toml(path)
    assert back == preset and back.name == preset.name
    assert machine_to_toml(back).splitlines()[1:] and text.startswith("# ipukern machine file")
    # a changed spec survives the round trip too
    odd = preset.replace(sync_cycles=7, exchange_bytes_per_cycle=3.25, name="odd")
    odd.to_toml(path)
    assert machine_from_toml(path) == odd


def test_machine_file_variant_of_a_preset(tmp_path):
    path = tmp_path / "variant.toml"
    path.write_text(VARIANT)
    m = ik.MachineSpec.from_toml(path)
    assert m == ik.GC200.replace(exchange_bandwidth=8e12, sync_cycles=45, name="GC200-fastsync")
    src = dict(m.sources)
    assert src["sync_cycles"].startswith("what-if")
    assert src["exchange_bandwidth"] == "machine file variant.toml"
    assert "clock" in src                                    # the preset's sources are kept
    prof = ik.estimate_conv2d((1, 16, 8, 8), (16, 4, 3, 3), padding=1, groups=4, machine=m)
    assert all(s.sync_cycles == 45 for s in prof.supersteps)


@pytest.mark.parametrize("text, match", [
    ("base = \"GC200\"\nsync_cycle = 4\n", "unknown key.*sync_cycle"),
    ("base = \"GC200\"\nsync_cycles = -1\n", "sync_cycles"),
    ("base = \"GC200\"\nsync_cycles = [1]\n", "must be a number"),
    ("base = \"Z80\"\n", "unknown machine"),
    ("sync_cycles = 4\n", "no base preset"),
    ("base = \n", "not valid TOML"),
    ("base = \"GC200\"\n[amp_conv_units]\n\"float16\" = 4\n", "amp_conv_units"),
])
def test_machine_file_errors_name_the_file(text, match, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        machine_from_toml(path)
    assert "bad.toml" in str(e.value)


def test_layer_list_round_trip(tmp_path):
    path = tmp_path / "layers.csv"
    write_layers(DEFAULT_LAYERS, path)
    back = read_layers(path)
    assert back == list(DEFAULT_LAYERS)
    assert [b.note for b in back] == [d.note for d in DEFAULT_LAYERS]


def test_layer_list_minimal_columns_and_defaults(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("# my layers\nname,channels,height,width,stride\nx,32,14,14,2\ny,16,8,8,\n")
    assert read_layers(path) == [ConvLayer("x", 32, 14, 14, stride=2), ConvLayer("y", 16, 8, 8)]


@pytest.mark.parametrize("text, match", [
    ("", "empty"),
    ("name,channels,height\nx,1,2\n", "missing column.*width"),
    ("name,channels,height,width,colour\nx,1,2,2,red\n", "unknown column.*colour"),
    ("name,channels,height,width\nx,1,2,two\n", "line 2: width must be an integer"),
    ("name,channels,height,width\nx,8,8,8\nx,8,8,8\n", "line 3: duplicate"),
    ("name,channels,height,width,kernel,padding\nx,8,2,2,5,0\n", "line 2"),
    ("name,channels,height,width\n", "no layers"),
])
def test_layer_list_errors(text, match, tmp_path):
    path = tmp_path / "l.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_layers(path)


def test_cli_machine_file_and_layer_list(tmp_path, capsys):
    mf = tmp_path / "variant.toml"
    mf.write_text(VARIANT)
    js = tmp_path / "p.json"
    assert main(["conv", "--shape", "1,16,8,8", "--gpu", "none", "--machine-file", str(mf),
                 "--json", str(js)]) == 0
    d = json.loads(js.read_text())
    assert d["machine"] == "GC200-fastsync" and {s["sync_cycles"] for s in d["supersteps"]} == {45}
    layers = tmp_path / "layers.csv"
    layers.write_text("name,channels,height,width\nmine,16,8,8\n")
    out = tmp_path / "out"
    assert main(["scaling", "--layers", str(layers), "--machine-file", str(mf), "--cpg", "4",
                 "--batch", "1", "--gpus", "none", "--no-plot", "--out", str(out)]) == 0
    rows = json.loads((out / "scaling.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert {r["layer"] for r in rows} == {"mine"} and {r["device"] for r in rows} == {"GC200-fastsync"}
    capsys.readouterr()
    bad = tmp_path / "bad.toml"
    bad.write_text("nonsense = 1\n")
    with pytest.raises(SystemExit) as e:                    # a usage error: one line, exit 2
        main(["conv", "--machine-file", str(bad)])
    assert e.value.code == 2 and "unknown key" in capsys.readouterr().err
