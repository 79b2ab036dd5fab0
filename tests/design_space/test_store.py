"""The stream file of a sweep (ipukern.design_space.store)."""
import json

import pytest

from ipukern.design_space.store import Store


def test_records_are_appended_and_read_back(tmp_path):
    path = tmp_path / "s.jsonl"
    with Store(path) as s:
        got = s.add({"key": "a", "x": 0.1 + 0.2})
        s.add({"key": "b", "x": None})
    assert got == {"key": "a", "x": 0.1 + 0.2}
    assert Store(path).records == {"a": {"key": "a", "x": 0.30000000000000004}, "b": {"key": "b", "x": None}}


def test_a_line_cut_short_is_dropped_and_the_file_stays_appendable(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"key": "a"}) + "\n" + '{"key": "b", "x"')
    s = Store(path)
    assert list(s.records) == ["a"]
    s.add({"key": "c"})
    s.close()
    assert [json.loads(ln)["key"] for ln in path.read_text().splitlines()] == ["a", "c"]


def test_not_a_stream_file_is_a_clear_error(tmp_path):
    (tmp_path / "x.jsonl").write_text("hello\n")
    with pytest.raises(ValueError, match="line 1 is not a JSON record"):
        Store(tmp_path / "x.jsonl")
    (tmp_path / "y.jsonl").write_text("[1]\n")
    with pytest.raises(ValueError, match="line 1 has no point key"):
        Store(tmp_path / "y.jsonl")
    with pytest.raises(ValueError, match="is a directory"):
        Store(tmp_path)


def test_no_path_keeps_records_in_memory():
    s = Store(None)
    s.add({"key": "k", "v": 1})
    assert s.records["k"]["v"] == 1
