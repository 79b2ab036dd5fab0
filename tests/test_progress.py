"""The shared progress line (ipukern._progress): when it draws, its ETA on a fake clock,
the tqdm path, and library steps inside a command's line."""
import io
import sys
import types

import pytest

from ipukern import _progress
from ipukern._progress import Eta, Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run(durations, costs=None, check_from=0.1):
    """Feed items of the given durations to a Progress on a fake clock; return the worst
    ratio between the ETA shown and the true time left, over the items after the first
    ``check_from`` of the run and the first two items (one item is all a first ETA knows)."""
    clock = Clock()
    bar = Progress("t", enabled=False, clock=clock, stream=io.StringIO())
    if costs is not None:
        bar.set_costs(costs)
    total_time = sum(durations)
    worst = 1.0
    for i, d in enumerate(durations):
        clock.t += d
        bar(i + 1, len(durations), str(i))
        left_true = total_time - clock.t
        if i >= 2 and clock.t >= check_from * total_time and left_true > 0.05 * total_time:
            left = bar.eta.seconds_left(clock.t, bar._total_units(len(durations)))
            worst = max(worst, left / left_true, left_true / left)
    return worst


def test_eta_exact_for_even_items():
    assert _run([1.0] * 50) == pytest.approx(1.0)


def test_eta_forgets_a_slow_first_item():
    # a first point that pays imports and tables (here 20x a point): an average since the
    # start says 6x too much at 20%; the recent half of the items is exact past the third
    durations = [20.0] + [1.0] * 99
    assert _run(durations, check_from=0.0) == pytest.approx(1.0)


def test_eta_follows_a_switch_to_a_pool():
    # ten serial points, then a pool running four times as fast (from 17% of the run on):
    # within 1.5x eight points after the switch, exact later, where the since-the-start
    # average stays 2-4x off (the "211 s left" at 23 s of a 46 s run). Before the
    # switch no rate can know the pool is coming.
    durations = [4.0] * 10 + [1.0] * 200
    assert _run(durations, check_from=0.2) < 1.5
    assert _run(durations, check_from=0.3) == pytest.approx(1.0)


def test_eta_weighs_items_by_cost():
    # big items first, then small ones: by item count the ETA is far off, by cost exact
    durations = [10.0] * 10 + [1.0] * 90
    assert _run(durations, costs=durations) == pytest.approx(1.0)
    assert _run(durations) > 4.0                   # what counting items alone would show


def test_eta_none_before_the_first_item_and_zero_at_the_end():
    eta = Eta(0.0)
    assert eta.seconds_left(5.0, 10) is None
    eta.add(1.0, 10)
    assert eta.seconds_left(1.0, 10) == 0.0
    with pytest.raises(ValueError, match="window"):
        Eta(0.0, window=0)


def test_set_costs_rejects_negative():
    with pytest.raises(ValueError, match="costs"):
        Progress("t", enabled=False).set_costs([1, -1])


def test_line_shows_counts_elapsed_eta_and_label():
    clock, buf = Clock(), io.StringIO()
    bar = Progress("sweep", enabled=True, stream=buf, clock=clock, delay=0.0)
    for i in range(4):
        clock.t += 2.0
        bar(i + 1, 10, f"point {i}")
    assert "4/10 8 s, ~12 s left  point 3" in bar.line()
    assert buf.getvalue().startswith("\r")


def test_nothing_before_the_delay_or_when_disabled():
    clock, buf = Clock(), io.StringIO()
    bar = Progress("t", enabled=True, stream=buf, clock=clock, delay=1.0)
    clock.t = 0.5
    bar(1, 2)
    assert buf.getvalue() == ""
    off = Progress("t", enabled=False, stream=buf, clock=clock, delay=0.0)
    clock.t = 5.0
    off(1, 2)
    assert buf.getvalue() == ""


def test_enabled_flag_then_environment_then_terminal(monkeypatch):
    monkeypatch.setenv("IPUKERN_PROGRESS", "1")
    assert _progress.enabled(None) is True and _progress.enabled(False) is False
    monkeypatch.setenv("IPUKERN_PROGRESS", "0")
    assert _progress.enabled(None) is False and _progress.enabled(True) is True
    monkeypatch.delenv("IPUKERN_PROGRESS")
    monkeypatch.setattr(sys, "stderr", io.StringIO())        # not a terminal
    assert _progress.enabled(None) is False
    monkeypatch.setenv("IPUKERN_PROGRESS", "yes")
    with pytest.raises(ValueError, match="IPUKERN_PROGRESS"):
        _progress.enabled(None)


def test_tqdm_draws_when_installed(monkeypatch):
    calls = []

    class FakeTqdm:
        def __init__(self, **kw):
            calls.append(("new", kw["desc"]))
            self.n, self.total = 0, None

        def set_postfix_str(self, text, refresh=True):
            calls.append(("postfix", text))

        def refresh(self):
            calls.append(("refresh", self.n, self.total))

        def close(self):
            calls.append(("close",))

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    clock = Clock()
    with Progress("sweep", enabled=True, clock=clock, delay=0.0, use_tqdm=True,
                  stream=io.StringIO()) as bar:
        clock.t = 2.0
        bar(1, 4, "a")
    assert calls[0] == ("new", "sweep")
    assert ("refresh", 1, 4) in calls and ("postfix", "~6 s left a") in calls
    assert calls[-1] == ("close",)


def test_library_step_labels_the_open_line():
    clock, buf = Clock(), io.StringIO()
    with Progress("network", enabled=True, stream=buf, clock=clock, delay=0.0) as bar:
        bar.note("planning")
        with _progress.task("max batch search"):
            _progress.note("batch 64 (trial 2)")
            assert bar.label == "max batch search: batch 64 (trial 2)"
        assert bar.label == "planning"
    assert "max batch search: batch 64 (trial 2)" in buf.getvalue()
    assert _progress._ACTIVE == []


def test_library_step_alone_follows_enabled(monkeypatch):
    monkeypatch.setenv("IPUKERN_PROGRESS", "0")
    with _progress.task("max batch search") as note:
        note("batch 2")
        assert isinstance(_progress._ACTIVE[-1], Progress)
        assert _progress._ACTIVE[-1].enabled is False
    assert _progress._ACTIVE == []
    _progress.note("nothing open: ignored")


def test_max_batch_search_reports_its_trials():
    from ipukern.nn.max_batch import search_max_batch
    clock, buf = Clock(), io.StringIO()
    with Progress("network", enabled=True, stream=buf, clock=clock, delay=0.0):
        with _progress.task("max batch search"):
            assert search_max_batch(lambda b: b <= 5, start=1, limit=64) == 5
    assert "max batch search: batch 8 (trial 4)" in buf.getvalue()


def test_run_points_hands_the_cost_proxy_to_the_bar():
    from ipukern import _pool
    bar = Progress("t", enabled=False)
    out, _ = _pool.run_points(abs, [-1, -2, -3], None, progress=bar, cost=lambda x: -x)
    assert out == [1, 2, 3] and bar._costs == [1.0, 2.0, 3.0]
    assert bar._done_units(2) == 3.0


def test_every_long_subcommand_takes_the_progress_options():
    # each subcommand that can run for seconds draws a line: --progress / --no-progress are
    # its switches (info and diff read or print in well under a second)
    import argparse

    from ipukern.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name, p in sub.choices.items() if name not in ("info", "diff")
               and not {"--progress", "--no-progress"} <= set(p._option_string_actions)]
    assert missing == []


def test_train_and_compare_open_a_line(tmp_path, monkeypatch):
    # the commands open the shared line, enabled by --progress, off by --no-progress
    import dataclasses
    import json

    from ipukern.cli import main, train
    from ipukern.systems import LayerCost
    opened = []

    class Recording(Progress):
        def __init__(self, title, **kw):
            super().__init__(title, **kw)
            opened.append((title, self.enabled))

    monkeypatch.setattr(train, "Progress", Recording)
    costs = tmp_path / "layers.json"
    costs.write_text(json.dumps([dataclasses.asdict(LayerCost(
        name=f"l{i}", fwd_cycles=100_000, bwd_cycles=200_000, wu_cycles=10_000, n_params=1 << 18,
        stash_bytes=1 << 20, out_bytes=1 << 20)) for i in range(4)]))
    assert main(["train", "--costs", str(costs), "--out", str(tmp_path), "--progress"]) == 0
    assert main(["compare", "--costs", str(costs), "--systems", "POD16", "--no-progress"]) == 0
    assert opened == [(f"train {costs} on POD16", True), ("compare", False)]


def _stderr_progress(monkeypatch, **kw):
    """A Progress on the process's stderr (the CLI's case: no stream given), on a fake clock."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    clock = Clock()
    return Progress("sweep", enabled=True, clock=clock, delay=0.0, **kw), clock, err


def test_the_real_tqdm_draws_counts_our_eta_and_clears(monkeypatch):
    tqdm = pytest.importorskip("tqdm")          # in the test extra: the path users get
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)     # no monitor thread in a test
    bar, clock, err = _stderr_progress(monkeypatch)
    assert bar._tq is tqdm.tqdm
    with bar:
        bar.note("planning")
        first = err.getvalue()
        clock.t = 2.0
        bar(1, 4, "a")
        text = err.getvalue()
    assert "sweep ..." in first and "planning" in first and "0/?" not in first
    assert "sweep:" in text and "1/4" in text and "~6 s left a" in text
    assert err.getvalue().endswith("\r") or err.getvalue().endswith("\x1b[A")  # leave=False


def test_without_tqdm_the_plain_line_goes_to_stderr(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)                 # import tqdm fails
    bar, clock, err = _stderr_progress(monkeypatch)
    assert bar._tq is None
    with bar:
        clock.t = 2.0
        bar(1, 4, "a")
    text = err.getvalue()
    assert "sweep [#######" in text and "1/4 2 s, ~6 s left  a" in text and text.endswith("\r")


@pytest.mark.parametrize("flag, env, drawn", [(None, None, False), ("--no-progress", "1", False),
                                              ("--progress", None, True), (None, "1", True)])
def test_piped_stderr_stays_clean_unless_asked(flag, env, drawn, monkeypatch, tmp_path):
    """The CLI in a fresh process with stderr a pipe: nothing unless --progress or
    IPUKERN_PROGRESS=1; --no-progress beats the environment. With the delay set to 0 the line
    is drawn as the command opens it, so no timing is involved."""
    import os
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    script = ("import sys; from ipukern import _progress; "
              "_progress.Progress.__init__.__kwdefaults__['delay'] = 0.0; "
              "from ipukern.cli import main; sys.exit(main(sys.argv[1:]))")
    environ = {k: v for k, v in os.environ.items() if k != "IPUKERN_PROGRESS"}
    environ["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    if env is not None:
        environ["IPUKERN_PROGRESS"] = env
    argv = ["network", "resnet8", "--batch", "2", "--max-rows", "1", *([flag] if flag else [])]
    res = subprocess.run([sys.executable, "-c", script, *argv], env=environ, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert ("network resnet8" in res.stderr) is drawn, res.stderr
    assert "network resnet8 on GC200" in res.stdout            # the report itself is on stdout
