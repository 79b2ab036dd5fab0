"""The command line under hostile input: one line and an exit code, never a traceback;
Ctrl-C exits 130; outputs appear all together or not at all, under the names given."""
import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipukern.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--shape", "1,8,8,8", "--cpg", "1", "--gpus", "none", "--no-progress"]


@pytest.mark.parametrize("argv, rc, message", [
    (["conv", "--shape", "1,4,6,6", "--padding", "99999999999999999999"], 1, "padding must be at most"),
    (["conv", "--shape", "1,4,6,6", "--machine", ""], 2, "expected a machine preset"),
    (["matmul", "--shape", "4,99999999999999,4"], 1, "must be between"),
    (["conv", "--shape", "1,4,200,6", "--kernel", "65,1"], 1, "kernel_h 65 is above 64"),
    (["matmul", "--shape", "4,4,4", "--machine", "GC200,BOW"], 2, "expected one machine preset"),
])
def test_bad_numbers_exit_with_one_line(capsys, argv, rc, message):
    with pytest.raises(SystemExit) if rc == 2 else contextlib.nullcontext():
        assert main(argv) == rc
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if rc == 1:
        assert len(err.strip().splitlines()) == 1


def test_keyboard_interrupt_in_a_command_is_one_line_and_130(monkeypatch, capsys):
    import ipukern.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(command="conv", func=interrupted)

    monkeypatch.setattr(cli, "build_parser", Parser)
    assert main(["conv"]) == 130
    assert capsys.readouterr().err.strip() == "ipukern conv: interrupted"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_sweep_exits_130_without_a_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "ipukern", "scaling", "--layer", "all", "--gpus", "none",
                             "--no-progress", "--no-plot", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    proc.stdout.readline()                      # the sweep has started
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().endswith("interrupted")
    assert not list(tmp_path.iterdir())         # nothing half-written


def test_a_failed_output_leaves_no_partial_set(tmp_path, capsys):
    (tmp_path / "scaling.json").mkdir()         # the JSON cannot be written
    assert main(["scaling", *TINY, "--no-plot", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "scaling.json is a directory" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaling.json"]   # no csv, no temp files


def test_outputs_keep_the_names_given(tmp_path, capsys):
    js = tmp_path / "profile"                   # no suffix
    png = tmp_path / "noext"
    argv = ["conv", "--shape", "1,4,6,6", "--gpu", "", "--json", str(js)]
    has_mpl = importlib.util.find_spec("matplotlib") is not None
    if has_mpl:
        argv += ["--memory-png", str(png)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {js}" in out and js.read_text().startswith("{")
    if has_mpl:
        assert f"wrote {png}" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["profile"] + (["noext"] if has_mpl else []))
    umask = os.umask(0)
    os.umask(umask)
    assert js.stat().st_mode & 0o777 == 0o666 & ~umask     # not mkstemp's private 0600


def test_views_without_matplotlib_write_the_json_only(tmp_path, capsys, no_matplotlib):
    js, png = tmp_path / "p.json", tmp_path / "m.png"
    assert main(["conv", "--shape", "1,4,6,6", "--gpu", "", "--json", str(js), "--memory-png", str(png)]) == 0
    captured = capsys.readouterr()
    assert "profile PNGs not written" in captured.err and f"wrote {js}" in captured.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


# --------------------------------------------------------------- usage errors: one line, exit 2
def _commands():
    from ipukern.cli import build_parser
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _bad_inputs(name, p):
    """Usage errors any command can meet: an unknown option, an option without its value,
    every int/float option given a word, every option with choices given a wrong one."""
    yield [name, "--no-such-option"]
    yield [name, "--no-such-option=3"]
    yield [name, "-Z"]
    for a in p._actions:
        if not a.option_strings or a.nargs == 0 or isinstance(a, argparse._VersionAction):
            continue
        opt = a.option_strings[-1]
        yield [name, opt]                                   # expected one argument
        if a.type in (int, float):
            yield [name, opt, "abc"]
        if a.choices:
            yield [name, opt, "no-such-choice"]


def _assert_one_usage_line(capsys, argv, prog):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2, argv
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert err.startswith(f"{prog}: error: ") and err.rstrip().endswith(f"(see '{prog} --help')")
    assert "usage:" not in err and "Traceback" not in err and captured.out == ""
    return err


def test_every_command_reports_usage_errors_in_one_line(capsys):
    commands = _commands()
    assert set(commands) >= {"scaling", "conv", "matmul", "info", "validate", "train", "compare",
                             "network", "diff"}
    for name, p in commands.items():
        cases = list(_bad_inputs(name, p))
        assert len(cases) >= 3, name                     # info: the three above
        for argv in cases:
            _assert_one_usage_line(capsys, argv, f"ipukern {name}")


@pytest.mark.parametrize("argv, prog, message", [
    (["train", "resnet50", "--bn-group", "abc"], "ipukern train",
     "argument --bn-group: invalid int value: 'abc'"),
    (["network", "resnet50", "--batch", "x"], "ipukern network", "argument --batch: invalid int value: 'x'"),
    (["conv", "--shape", "1,2,3"], "ipukern conv", "argument --shape"),
    (["scaling", "--jobs", "0"], "ipukern scaling", "worker processes must be >= 1, got 0"),
    (["scaling", "--cpg", "0"], "ipukern scaling", "channels per group must be >= 1, got 0"),
    (["diff", "a.json"], "ipukern diff", "the following arguments are required: B.json"),
    (["info", "extra"], "ipukern info", "unrecognized arguments: extra"),
    (["train", "resnet50", "--micro-batch"], "ipukern train", "expected one argument"),
    ([], "ipukern", "the following arguments are required: command"),
    (["trian"], "ipukern", "invalid choice: 'trian'"),
    (["--bogus"], "ipukern", "required"),
])
def test_usage_error_messages(capsys, argv, prog, message):
    assert message in _assert_one_usage_line(capsys, argv, prog)


def test_help_is_still_the_full_help(capsys):
    for name in _commands():
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: ipukern {name}") and "options:" in out and "examples:" in out


def test_a_usage_error_in_a_fresh_process_is_one_line_and_exit_2():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "ipukern", "train", "resnet50", "--bn-group", "abc"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("ipukern train: error: argument --bn-group: invalid int value: 'abc' "
                           "(see 'ipukern train --help')\n")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_pooled_sweep_exits_130_without_a_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # a sweep of minutes (every batch 1..48 on three chips: ~10,000 points), so that no host
    # is fast enough to finish it before the signal (the default sweep once did, on an idle
    # machine, and exited 0)
    batches = ",".join(str(b) for b in range(1, 49))
    proc = subprocess.Popen([sys.executable, "-m", "ipukern", "scaling", "--layer", "all", "--gpus", "none",
                             "--batch", batches, "--machines", "GC200,BOW,GC2", "--jobs", "2",
                             "--no-progress", "--no-plot", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    proc.stdout.readline()                      # the sweep is about to start
    time.sleep(3)                               # its pool is up and working
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().endswith("interrupted")
    assert not list(tmp_path.iterdir())         # nothing half-written


def test_scaling_jobs_beyond_the_limit_is_one_line(capsys):
    from ipukern.cli import main
    for bad in ("1025", "99999999999999999999"):
        with pytest.raises(SystemExit) as e:
            main(["scaling", "--jobs", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "at most 1024" in err
