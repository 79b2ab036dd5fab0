"""Command-line conventions shared by every subcommand (version, output to stdout, ...)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ipukern
from ipukern.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "ipukern", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False, **kw)


def test_version_flag_prints_the_single_sourced_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"ipukern {ipukern.__version__}"


def test_version_flag_in_a_fresh_process():
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"ipukern {ipukern.__version__}"


def test_conv_and_matmul_write_a_trace(tmp_path, capsys):
    for cmd in (["conv", "--shape", "1,16,8,8", "--cpg", "4"], ["matmul", "--shape", "32,32,32"]):
        path = tmp_path / f"{cmd[0]}.json"
        assert main([*cmd, "--gpu", "", "--trace", str(path)]) == 0
        trace = json.loads(path.read_text())
        assert trace["traceEvents"] and trace["otherData"]["generator"] == "ipukern"
    assert "ui.perfetto.dev" in capsys.readouterr().out


def test_diff_command_round_trip(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["conv", "--shape", "1,16,8,8", "--gpu", "", "--json", str(a)]) == 0
    assert main(["conv", "--shape", "1,16,8,8", "--gpu", "", "--exchange-bandwidth", "8e12",
                 "--json", str(b)]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "per superstep" in out and "exchange_cycles" in out
    assert main(["diff", str(a), str(b), "--json", "-"]) == 0
    d = json.loads(capsys.readouterr().out)                 # stdout is pure JSON
    pa, pb = json.loads(a.read_text()), json.loads(b.read_text())
    assert d["totals"]["total_cycles"]["delta"] == pb["total_cycles"] - pa["total_cycles"] > 0


def test_diff_command_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["diff", str(bad), str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("ipukern diff: error:") and "not an ipukern profile" in err
    assert "\n" not in err
    assert main(["diff", str(tmp_path / "missing.json"), str(bad)]) == 2     # names nothing


@pytest.mark.parametrize("argv", [
    ["network", "nosuchnet"], ["network", "resnet8", "--machine", "NOPE"],
    ["train", "--costs", "{missing}", "--system", "M2000"], ["diff", "{missing}", "{missing}"],
    ["conv", "--machine-file", "{missing}"], ["scaling", "--layers", "{missing}"],
    ["validate", "--measurements", "{missing}", "--no-plot"], ["compare", "resnet8", "--systems", "POD17"],
    # checked before any work: a known system first, then one that names nothing
    ["compare", "resnet50", "--systems", "POD16,POD17"], ["tune", "resnet8", "--chip", "NOPE"],
    ["explore", "nosuchnet", "--vary", "n_tiles=x1"], ["claims", "--ids", "1a,zz"],
    ["scaling", "--layer", "nosuchlayer"], ["validate", "--only", "mlperf1.0-resnet-pod16"]])
def test_a_name_or_file_that_names_nothing_exits_2(argv, tmp_path, capsys):
    """One code for an unknown model, machine, system and a missing input file (docs/usage)."""
    missing = str(tmp_path / "missing.file")
    argv = [a.replace("{missing}", missing) for a in argv]
    argv += ["--out", str(tmp_path)] * (argv[0] == "validate")
    parsed = {"--machine", "--machine-file", "--chip"} & set(argv)    # argparse types: SystemExit(2)
    with pytest.raises(SystemExit) if parsed else contextlib.nullcontext() as e:
        rc = main(argv)
    rc = e.value.code if e is not None else rc
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--help" in err, err


def _subparsers():
    from ipukern.cli import build_parser
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, action.choices


def test_every_option_has_help_and_every_command_an_examples_epilog():
    parser, commands = _subparsers()
    assert set(commands) >= {"scaling", "conv", "matmul", "info", "diff"}
    for name, p in commands.items():
        for a in p._actions:
            assert a.help and a.help != argparse.SUPPRESS, f"ipukern {name} {a.option_strings}: no help"
        assert p.epilog and p.epilog.startswith("examples:"), f"ipukern {name}: no examples epilog"
        assert f"ipukern {name}" in p.epilog


def test_user_facing_help_names_no_internal_documents():
    parser, commands = _subparsers()
    texts = [parser.format_help()] + [p.format_help() for p in commands.values()]
    for t in texts:
        low = t.lower()
        assert "brief" not in low and not re.search(r"issue\s*#?\d", low), t


def test_json_dash_writes_only_json_to_stdout(capsys):
    for cmd in (["conv", "--shape", "1,16,8,8"], ["matmul", "--shape", "32,32,32"]):
        assert main([*cmd, "--json", "-"]) == 0
        out, err = capsys.readouterr()
        d = json.loads(out)                                 # nothing else on stdout
        assert d["total_cycles"] > 0 and "profile" in err   # the report went to stderr


def test_gpu_none_everywhere(capsys):
    for cmd in (["conv", "--shape", "1,16,8,8"], ["matmul", "--shape", "32,32,32"]):
        for none in ("none", "None", ""):
            assert main([*cmd, "--gpu", none]) == 0
            assert "GPU model" not in capsys.readouterr().out
        assert main([*cmd]) == 0
        assert "GPU model (A100_40GB" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["conv", "--gpu", "Z80"])
    assert e.value.code == 2



def test_gpus_none_on_scaling(tmp_path, capsys):
    assert main(["scaling", "--shape", "1,16,8,8", "--cpg", "4", "--gpus", "none", "--no-plot",
                 "--out", str(tmp_path)]) == 0
    assert "A100" not in capsys.readouterr().out


def test_exchange_bandwidth_both_runs_both_machines(tmp_path, capsys):
    for cmd in (["conv", "--shape", "1,16,8,8"], ["matmul", "--shape", "32,32,32"]):
        path = tmp_path / f"{cmd[0]}.json"
        assert main([*cmd, "--gpu", "none", "--exchange-bandwidth", "both",
                     "--json", str(path)]) == 0
        out = capsys.readouterr().out
        assert "on GC200:" in out and "on GC200-xch8TB:" in out
        assert "exchange bandwidth comparison" in out
        a = json.loads(path.read_text())
        b = json.loads((tmp_path / f"{cmd[0]}-GC200-xch8TB.json").read_text())
        assert a["machine"] == "GC200" and b["machine"] == "GC200-xch8TB"
        assert b["exchange_cycles"] > a["exchange_cycles"]
    # one spelling for the datasheet figure: 'datasheet' == 8e12 == 8TB
    from ipukern.cli._common import DATASHEET_EXCHANGE, bandwidth_list
    assert bandwidth_list("datasheet") == bandwidth_list("8e12") == bandwidth_list("8TB") == \
        [DATASHEET_EXCHANGE]
    assert bandwidth_list("both") == [None, DATASHEET_EXCHANGE]


def test_no_broken_pipe_message_when_piped_to_head():
    res = subprocess.run(
        f"{sys.executable} -m ipukern conv --shape 1,16,8,8 --gpu none | head -n 1",
        shell=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=120, check=False)
    assert res.stdout.startswith("conv2d")
    assert "Broken pipe" not in res.stderr and "BrokenPipeError" not in res.stderr, res.stderr


def test_broken_pipe_exits_quietly_in_process(monkeypatch, capsys):
    class Closed:
        def write(self, _):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            return os.open(os.devnull, os.O_WRONLY)

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["info"]) == 141
    assert "Broken pipe" not in capsys.readouterr().err


def test_info_and_validate_text_name_no_internal_documents(capsys):
    assert main(["info", "--gpus"]) == 0
    out = capsys.readouterr().out.lower()
    assert "brief" not in out and not re.search(r"issue\s*#?\d", out)
    from ipukern import validation
    assert all("brief" not in v for v in validation.VARIANTS.values())


def test_json_dash_with_both_bandwidths_is_one_json_document(capsys):
    assert main(["conv", "--shape", "1,16,8,8", "--gpu", "none", "--exchange-bandwidth", "both",
                 "--json", "-"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["machine"] for d in docs] == ["GC200", "GC200-xch8TB"]


def test_report_commands_write_no_files_unless_asked(tmp_path, monkeypatch, capsys):
    """train, compare and network print a report; files only with --out / --json / --trace."""
    costs = tmp_path / "in" / "costs.json"
    costs.parent.mkdir()
    costs.write_text(json.dumps([dict(name=f"l{i}", fwd_cycles=1000, bwd_cycles=2000, wu_cycles=500,
                                      n_params=10_000, stash_bytes=4096, out_bytes=2048) for i in range(4)]))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["train", "--costs", str(costs), "--system", "M2000", "--micro-batch", "2"]) == 0
    assert main(["compare", "--costs", str(costs), "--systems", "POD16"]) == 0
    assert main(["network", "resnet8", "--batch", "2", "--no-progress"]) == 0
    assert "wrote" not in capsys.readouterr().out
    assert list(work.iterdir()) == []


def test_partials_defaults_follow_one_documented_rule():
    """float (PopLibs' default) for one op and the op sweep; half (the published network runs)
    for networks, training and tuning; every --help says which and why."""
    _, commands = _subparsers()
    want = {"conv": "float", "matmul": "float", "scaling": "float", "network": "half",
            "train": "half", "compare": "half", "tune": "half"}
    for name, default in want.items():
        action = next(a for a in commands[name]._actions if a.dest == "partials")
        assert action.default == default, name
        assert f"default {default}:" in action.help and ("PopLibs" in action.help), name
    usage = (ROOT / "docs" / "usage.rst").read_text(encoding="utf-8")
    assert "PopLibs' default partialsType" in usage


def test_conv_and_matmul_take_out_dir_like_the_other_commands(tmp_path, capsys):
    """--out DIR on the single-op commands: the profile's JSON, trace and plots, one set per
    machine variant; nothing else in the directory."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "o"
    assert main(["matmul", "--shape", "64,64,64", "--gpu", "none", "--out", str(out)]) == 0
    assert main(["conv", "--shape", "1,16,8,8", "--gpu", "none", "--out", str(out),
                 "--exchange-bandwidth", "both"]) == 0
    names = {p.name for p in out.iterdir()}
    for stem in ("matmul", "conv", "conv-GC200-xch8TB"):
        assert {f"{stem}.json", f"{stem}.trace.json", f"{stem}_memory.png", f"{stem}_timeline.png",
                f"{stem}_activity.png"} <= names, names
    assert len(names) == 15
    assert json.loads((out / "conv.json").read_text())["schema"] == "ipukern.profile"
    assert "conv.trace.json (open it in ui.perfetto.dev" in capsys.readouterr().out
    (tmp_path / "file").write_text("x")
    assert main(["conv", "--shape", "1,16,8,8", "--gpu", "none", "--out", str(tmp_path / "file")]) == 1


def test_tune_writes_json_with_a_schema_a_trace_and_out_dir(tmp_path, capsys):
    argv = ["tune", "resnet8", "--system", "M2000", "--max-global-batch", "16", "--micro-batch", "4",
            "--replicas", "4", "--ipus-per-replica", "1", "--no-progress"]
    views = ["--json", "-", "--trace", str(tmp_path / "t.json"), "--out", str(tmp_path / "o")]
    assert main([*argv, *views]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["schema"] == "ipukern.tune" and doc["schema_version"] >= 1 and doc["best"]
    assert json.loads((tmp_path / "o" / "tune.json").read_text()) == doc
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["otherData"]["kind"] == "tune" and any(e["ph"] == "X" for e in trace["traceEvents"])
    assert "ui.perfetto.dev" in cap.err                       # the report went to stderr


# ----------------------------------------------------------------------------- JSON outputs
def _costs(tmp_path: Path) -> str:
    rows = [dict(name=f"l{i}", fwd_cycles=1000, bwd_cycles=2000, wu_cycles=500, n_params=10_000,
                 stash_bytes=4096, out_bytes=2048) for i in range(4)]
    (tmp_path / "costs.json").write_text(json.dumps(rows))
    return str(tmp_path / "costs.json")


#: command -> (argv before the JSON option, schema); "{costs}" is a layer-cost file
JSON_COMMANDS = {
    "conv": (["conv", "--shape", "1,16,8,8", "--cpg", "4", "--gpu", "none"], "ipukern.profile"),
    "matmul": (["matmul", "--shape", "64,64,64", "--gpu", "none"], "ipukern.profile"),
    "network": (["network", "mobilenet_v1", "--image-size", "32", "--batch", "1"], "ipukern.network"),
    "train": (["train", "--costs", "{costs}", "--system", "M2000", "--micro-batch", "2"], "ipukern.training"),
    "compare": (["compare", "--costs", "{costs}", "--systems", "POD16,POD64"], "ipukern.compare"),
    "tune": (["tune", "resnet8", "--system", "M2000", "--max-global-batch", "16", "--micro-batch", "4",
              "--replicas", "4", "--ipus-per-replica", "1"], "ipukern.tune"),
}


@pytest.mark.parametrize("command", sorted(JSON_COMMANDS))
def test_every_json_output_opens_with_a_schema_and_its_version(command, tmp_path, capsys):
    """``--json -`` of every command that produces a document: the JSON alone on stdout,
    opening with ``schema`` (``ipukern.<kind>``) and ``schema_version`` (issue 35)."""
    argv, kind = JSON_COMMANDS[command]
    argv = [a.replace("{costs}", _costs(tmp_path)) for a in argv]
    assert main([*argv, "--no-progress", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc)[:2] == ["schema", "schema_version"], list(doc)[:4]
    assert doc["schema"] == kind and isinstance(doc["schema_version"], int) and doc["schema_version"] >= 1


def test_diff_and_file_outputs_carry_a_schema(tmp_path, capsys):
    """``diff --json``, ``scaling``'s scaling.json and ``--out``'s JSON files: the same two fields."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    conv = ["conv", "--shape", "1,16,8,8", "--cpg", "4", "--gpu", "none", "--no-progress"]
    assert main([*conv, "--json", str(a)]) == 0
    assert main([*conv, "--exchange-bandwidth", "8e12", "--json", str(b)]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "ipukern.diff"
    assert main(["scaling", "--shape", "1,16,8,8", "--cpg", "1,dense", "--batch", "1", "--gpus", "none",
                 "--no-plot", "--no-progress", "-q", "--out", str(tmp_path / "s")]) == 0
    doc = json.loads((tmp_path / "s" / "scaling.json").read_text())
    assert doc["schema"] == "ipukern.sweep" and doc["schema_version"] >= 1
    assert main(["network", "mobilenet_v1", "--image-size", "32", "--batch", "1", "--no-progress",
                 "--out", str(tmp_path / "n")]) == 0
    for path in (tmp_path / "n").glob("*.json"):
        assert json.loads(path.read_text())["schema"].startswith("ipukern."), path


def test_tune_machine_file_changes_the_chip(tmp_path, capsys):
    """tune takes --machine-file as train and compare do: every IPU of the system is that chip."""
    mf = tmp_path / "m.toml"
    mf.write_text('base = "GC200"\nname = "GC200-fastsync"\nsync_cycles = 45\n'
                  '[sources]\nsync_cycles = "what-if"\n')
    argv, _ = JSON_COMMANDS["tune"]
    assert main([*argv, "--no-progress", "--machine-file", str(mf), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == "IPU-M2000 (GC200-fastsync)"
    with pytest.raises(SystemExit) as e:            # one chip: a name or a file, not both
        main([*argv, "--chip", "GC2", "--machine-file", str(mf)])
    assert e.value.code == 2


def test_network_max_batch_stopped_by_host_memory_keeps_the_estimate(monkeypatch, capsys):
    """When the host's memory stops the max-batch search, the estimate is still printed, then
    the one-line error naming the largest batch found (exit 1), instead of losing both."""
    from ipukern.nn.host import host_memory

    def refuse(self, batch):
        raise MemoryError(f"max-batch search stopped before batch {batch}: compiling it needs "
                          "about 9.0 GiB of host memory and 1.0 GiB is available (largest batch "
                          "found to fit so far: 1)")
    monkeypatch.setattr(host_memory.HostMemoryGuard, "__call__", refuse)
    code = main(["network", "mobilenet_v1", "--image-size", "32", "--batch", "1", "--no-progress",
                 "--max-batch"])
    cap = capsys.readouterr()
    assert code == 1
    assert "network mobilenet_v1" in cap.out and "samples/s" in cap.out and "max batch" not in cap.out
    assert cap.err.startswith("ipukern network: error: max-batch search stopped before batch")
    assert len(cap.err.strip().splitlines()) == 1


def test_network_prints_the_gpu_comparison(capsys):
    """``ipukern network`` sets the network beside one GPU of a GPU system (the package's main
    comparison), as conv and matmul do; the ratio is the two printed rates' quotient."""
    from ipukern.gpu import estimate_network_gpu
    argv = ["network", "mobilenet_v1", "--image-size", "32", "--batch", "2", "--no-progress"]
    assert main([*argv, "--training", "--gpu", "DGX_H100"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("GPU model"))
    assert "one H100" in line and "DGX_H100" in line
    ipu = float(re.search(r"-> ([\d,.]+) samples/s", out).group(1).replace(",", ""))
    gpu = float(re.search(r"-> ([\d,.]+) samples/s; IPU/GPU throughput ratio: ([\d.]+)x", line)
                .group(1).replace(",", ""))
    ratio = float(re.search(r"ratio: ([\d.]+)x", line).group(1))
    assert abs(ratio - ipu / gpu) <= 0.01 * ratio
    net = ipukern.nn.models.MODELS["mobilenet_v1"](image_size=32)
    ref = estimate_network_gpu(net, 2, "DGX_H100", n_gpus=1, training=True)
    assert abs(gpu - ref.samples_per_second) <= 0.1
    assert main([*argv, "--gpu", "none"]) == 0
    assert "GPU model" not in capsys.readouterr().out
