"""Every input ends in bounded time or is refused up front (issue 36, item 3). Each case once
ran for minutes or forever; each runs in a fresh interpreter under a timeout and must end
with a result or one clear error."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 90      # seconds; the slowest case takes a few


def _py(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=LIMIT, env=env, cwd=ROOT)


def _cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "ipukern", *args], capture_output=True,
                          text=True, timeout=LIMIT, env=env, cwd=cwd or ROOT)


def _ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, f"rc {res.returncode}\n{res.stdout}\n{res.stderr[-3000:]}"
    return res.stdout


TINY_TILE = """
import dataclasses, ipukern as ik
tiny = dataclasses.replace(ik.GC200, name="tiny", tile_bytes={tb}, reserved_bytes_per_tile=0)
"""


@pytest.mark.parametrize("amp", ["1e-9", "1e-300", "5e-324"])
def test_a_proportion_below_one_byte_ends(amp):
    """The relaxed bound doubled from 0 B forever."""
    out = _ok(_py(f"""
        import ipukern as ik
        p = ik.estimate_conv2d((1, 16, 14, 14), (16, 16, 3, 3), padding=1,
                               available_memory_proportion={amp})
        print("CYCLES", p.total_cycles)
    """))
    assert "CYCLES" in out


@pytest.mark.parametrize("tb", [1, 2, 600])
def test_a_conv_on_a_tiny_tile_ends(tb):
    out = _ok(_py(TINY_TILE.format(tb=tb) + """
for shape in (((1, 1, 1, 1), (1, 1, 1, 1)), ((1, 16, 14, 14), (16, 16, 3, 3))):
    try:
        print("CYCLES", ik.estimate_conv2d(*shape, padding=0, machine=tiny).total_cycles)
    except (ValueError, MemoryError) as e:
        print("REFUSED", type(e).__name__, str(e)[:80])
"""))
    assert out.count("CYCLES") + out.count("REFUSED") == 2


def test_the_command_line_with_a_tiny_tile_machine_file_ends(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text('base = "GC200"\ntile_bytes = 1\nreserved_bytes_per_tile = 0\nname = "tiny"\n')
    res = _cli("conv", "--shape", "1,1,2,2", "--kernel", "1", "--machine-file", str(f))
    assert res.returncode in (0, 1, 2), res.stderr
    assert "Traceback" not in res.stderr


def test_special_files_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = _ok(_py(f"""
        import ipukern as ik
        from ipukern.core.views import load_profile_dict
        for p in ("/dev/zero", {str(fifo)!r}, {str(tmp_path)!r}):
            for f in (ik.MachineSpec.from_toml, load_profile_dict):
                try:
                    f(p)
                except ValueError as e:
                    print("REFUSED", e)
    """))
    assert out.count("REFUSED") == 6
    assert "character device" in out and "FIFO" in out and "directory" in out


def test_a_machine_file_over_the_size_limit_is_refused(tmp_path):
    from ipukern.machine import MAX_MACHINE_FILE_BYTES
    import ipukern as ik
    f = tmp_path / "big.toml"
    f.write_text("# " + "x" * MAX_MACHINE_FILE_BYTES + "\n")
    with pytest.raises(ValueError, match="limit"):
        ik.MachineSpec.from_toml(f)


def test_diff_of_dev_zero_is_refused(tmp_path):
    a = tmp_path / "a.json"
    a.write_text("{}")
    res = _cli("diff", "/dev/zero", str(a))
    assert res.returncode != 0
    assert "character device" in res.stderr and "Traceback" not in res.stderr


def test_train_with_a_proportion_below_one_byte_ends(tmp_path):
    res = subprocess.run([sys.executable, "-m", "ipukern", "train", "resnet8",
                          "--available-memory-proportion", "1e-9"], capture_output=True,
                         text=True, timeout=240, env=dict(os.environ, PYTHONPATH=ROOT),
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]


def test_a_collective_on_the_largest_pod_ends():
    """collective_seconds on System.pod(MAX_IPUS) searched a route from every IPU over the
    whole pod and scanned every link per hop (past 120 s, found by tests/test_fuzz.py); one
    IPU more is refused up front."""
    out = _ok(_py("""
        import ipukern as ik
        from ipukern.systems.spec import MAX_IPUS
        s = ik.System.pod(MAX_IPUS)
        print("SECONDS", ik.collective_seconds(s, "all_reduce", 1e6).seconds > 0)
        try:
            ik.System.pod(MAX_IPUS + 64)
        except ValueError as e:
            print("REFUSED", e)
    """))
    assert "SECONDS True" in out and "REFUSED" in out
