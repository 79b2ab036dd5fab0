"""The CLI's output writer: regular files replaced atomically, nothing else replaced."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from ipukern.cli import main
from ipukern.cli._common import Outputs, write_output


def _write(target, text: str) -> None:
    with Outputs() as out:
        out.stage(target).write_text(text)
        out.commit()


def test_new_and_regular_files_are_written(tmp_path):
    _write(tmp_path / "a.json", "one")
    _write(tmp_path / "a.json", "two")
    assert (tmp_path / "a.json").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]   # no temporary left


def test_symlink_is_kept_and_its_file_written(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    _write(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "absent.json")
    _write(link, "x")
    assert link.is_symlink() and (tmp_path / "absent.json").read_text() == "x"


def test_hard_link_stays_one_file(tmp_path):
    a = tmp_path / "a.json"
    a.write_text("old")
    b = tmp_path / "b.json"
    os.link(a, b)
    _write(a, "new")
    assert os.stat(a).st_ino == os.stat(b).st_ino
    assert b.read_text() == "new"


def test_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    _write(fifo, "through the pipe")
    reader.join(timeout=30)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_directory_target_is_refused(tmp_path):
    with pytest.raises(OSError, match="is a directory"):
        write_output(tmp_path, b"x")


def test_failure_leaves_nothing_next_to_the_target(tmp_path):
    with pytest.raises(RuntimeError):
        with Outputs() as out:
            out.stage(tmp_path / "a.json").write_text("x")
            raise RuntimeError("the command failed")
    assert list(tmp_path.iterdir()) == []


def _null_device(tmp_path):
    """/dev/null, or as root a copy of it in tmp_path (a regression run as root must not
    be able to replace the real one)."""
    if os.geteuid() != 0:
        return "/dev/null"
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return str(dev)


def test_cli_json_to_a_char_device_keeps_it_a_device(tmp_path, capsys):
    dev = _null_device(tmp_path)
    assert main(["conv", "--shape", "1,16,14,14", "--gpu", "none", "--json", dev]) == 0
    assert stat.S_ISCHR(os.stat(dev).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_layer_list_csv_error_is_one_line(tmp_path, capsys):
    f = tmp_path / "F.csv"
    f.write_text("name,channels,height,width\n" + "a" * 200_000 + ",8,8,8\n")
    assert main(["scaling", "--layers", str(f), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "field larger than field limit" in err and "line 2" in err
    assert not (tmp_path / "o").exists()


def test_empty_batch_blames_batch_and_leaves_no_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["scaling", "--batch", "", "--out", str(tmp_path / "o")])
    assert e.value.code == 2
    assert "--batch" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _profile_json(tmp_path, name: str) -> str:
    path = tmp_path / name
    assert main(["conv", "--shape", "1,8,8,8", "--gpu", "none", "--json", str(path)]) == 0
    return str(path)


def test_diff_json_keeps_links_and_devices(tmp_path, capsys):
    """``diff --json`` opened its target for writing itself: a failed dump left half a file
    and a symlink or /dev/null was not treated as the other outputs are."""
    a = _profile_json(tmp_path, "a.json")
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["diff", a, a, "--json", str(link)]) == 0
    assert link.is_symlink() and '"' in real.read_text()
    hard = tmp_path / "hard.json"
    os.link(real, hard)
    assert main(["diff", a, a, "--json", str(hard)]) == 0
    assert os.stat(hard).st_ino == os.stat(real).st_ino
    dev = _null_device(tmp_path)
    assert main(["diff", a, a, "--json", dev]) == 0
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_validate_failing_writer_leaves_no_half_written_folder(tmp_path, monkeypatch, capsys):
    """``validate`` wrote validation.csv, then .json, then the plot into --out one by one:
    a failure in a later one left the earlier ones behind. Staged through Outputs now."""
    from ipukern.validation import inference

    def broken(self, path=None):
        raise OSError("disk full")
    monkeypatch.setattr(inference.InferenceReport, "to_json", broken)
    out = tmp_path / "o"
    rc = main(["validate", "--inference", "--only", "poprt-bert-base-sl128-b16", "--out", str(out),
               "--no-progress"])
    assert rc == 1 and "disk full" in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []
    monkeypatch.undo()
    assert main(["validate", "--inference", "--only", "poprt-bert-base-sl128-b16", "--out", str(out),
                 "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["inference.csv", "inference.json"]
