"""``ipukern explore``: outputs, one-line errors, resume after Ctrl-C (a real SIGINT)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipukern.cli import main

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["explore", "resnet8", "--vary", "exchange_bandwidth=8e12,47.5e12", "--batch", "2",
        "--scheduler", "serial", "--no-progress"]


def test_writes_the_table_and_resumes(tmp_path, capsys):
    out = tmp_path / "ex"
    assert main(ARGS + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 points (2 computed, 0 from the stream file) on serial" in text
    assert "resnet8 gains" in text and "exchange_bandwidth" in text
    names = {p.name for p in out.iterdir()}
    assert {"explore.jsonl", "explore.csv"} <= names
    assert main(ARGS + ["--out", str(out), "--oat"]) == 0      # the same two points, one at a time
    assert "(0 computed, 2 from the stream file)" in capsys.readouterr().out


@pytest.mark.parametrize("extra, code, match", [
    (["--vary", "tile_bytes=-1"], 1, r"machine variant 0 \(.*tile_bytes=-1.0\): MachineSpec.tile_bytes"),
    (["--vary", "n_tiles=0"], 1,
     r"machine variant 0 \(.*n_tiles=0.0\): MachineSpec.n_tiles must be a positive int"),
    (["--vary", "tiles=4"], 2, "unknown constant 'tiles'"),
    (["--vary", "n_tiles"], 2, "expected NAME=V1,V2"),
    (["--vary", "n_tiles=abc"], 2, "'abc' is not a number"),
    (["--vary", "exchange_bandwidth=1e12"], 1, "--vary exchange_bandwidth given twice"),
    (["--scheduler", "nowhere"], 1, "scheduler must be a Dask address"),
    (["--workers", "0"], 1, "n_workers must be an int >= 1"),
])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, capsys, extra, code, match):
    import re
    out = tmp_path / "ex"
    try:
        got = main(ARGS + extra + ["--out", str(out)])
    except SystemExit as e:                      # argparse's usage errors
        got = e.code
    assert got == code
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(match, err)
    assert not out.exists()


def test_resume_after_ctrl_c_recomputes_no_finished_point(tmp_path):
    out = tmp_path / "ex"
    stream = out / "explore.jsonl"
    args = [sys.executable, "-m", "ipukern", "explore", "resnet8", "--vary",
            "exchange_bandwidth=4e12,8e12,16e12,32e12,47.5e12,64e12", "--batch", "2", "--scheduler", "serial",
            "--no-progress", "--no-plot", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if stream.exists() and len(stream.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be interrupted")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip() == "ipukern explore: interrupted"
    finished = [json.loads(ln)["key"] for ln in stream.read_text().splitlines()]
    assert 2 <= len(finished) < 6
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"6 points ({6 - len(finished)} computed, {len(finished)} from the stream file)" in again.stdout
    keys = [json.loads(ln)["key"] for ln in stream.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 6
