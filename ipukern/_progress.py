"""Progress lines on stderr for work that can run longer than about two seconds: one helper
for the CLI and the library.

- :class:`Progress` draws one line (tqdm when it is installed, a plain ``\\r`` line otherwise)
  after ``delay`` seconds, so quick work prints nothing. Called as
  ``progress(done, total, label)`` (the sweeps' callback); as a context manager it also ticks
  an "elapsed" line while a single long call runs, and erases the line at the end.
- :class:`Eta` is the estimate of the time left: measured seconds per unit of work over the
  recent half of the run, where a unit is one item or, given :meth:`Progress.set_costs`, an
  item's cost proxy. The recent window drops one-time costs of the first items (imports,
  first plans) and follows a switch from serial points to a process pool; an average since
  the start did neither and was several times off.
- :func:`task` / :func:`note`: library code announces a long step (the max-batch search
  behind ``NetworkProfile.memory``); inside a CLI command it becomes the label of the
  command's line, on its own it draws its own line when :func:`enabled` says so.

Whether a line is drawn: the CLI's ``--progress`` / ``--no-progress``; otherwise
``IPUKERN_PROGRESS`` (1 always, 0 never); otherwise only when stderr is a terminal, so piped
output and log files stay clean.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from . import _settings

__all__ = ["DELAY_S", "Eta", "Progress", "enabled", "note", "task"]

#: nothing is drawn before this many seconds: work that ends sooner stays silent (below the
#: issue's two-second bound for a silent command)
DELAY_S = 1.0
#: share of the elapsed time the rate is measured over (the most recent part)
WINDOW = 0.5


def enabled(flag: bool | None = None) -> bool:
    """Whether to draw: ``flag`` when given (``--progress`` / ``--no-progress``), else
    ``IPUKERN_PROGRESS``, else whether stderr is a terminal."""
    if flag is not None:
        return bool(flag)
    env = _settings.progress()
    if env is not None:
        return env
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):         # a closed or replaced stderr
        return False


class Eta:
    """Seconds left from the measured rate over the recent part of the run.

    ``add(t, done)`` records that ``done`` units (items, or summed cost proxies) were finished
    at time ``t``; ``seconds_left(t, total)`` divides the units left by the units per second
    since a reference record, minus the time since the last record. The reference is the
    later of the last record at least ``window`` of the elapsed time old and the record
    halfway through the records so far (so a few items after a change are enough), and at
    least one record back. With one item done, that item's time is all there is to go by.
    """

    def __init__(self, t0: float, window: float = WINDOW):
        if not 0 < window <= 1:
            raise ValueError(f"Eta: window must be in (0, 1], got {window!r}")
        self.window = window
        self.t0 = t0
        self.marks: list[tuple[float, float]] = [(t0, 0.0)]

    def add(self, t: float, done: float) -> None:
        if done != self.marks[-1][1]:          # a repeated count (an item starting) adds nothing
            self.marks.append((t, float(done)))

    def seconds_left(self, t: float, total: float) -> float | None:
        """None before the first finished unit (no rate to go by)."""
        t_last, c_last = self.marks[-1]
        if c_last <= 0:
            return None
        if c_last >= total:
            return 0.0
        start = t_last - self.window * (t_last - self.t0)
        ref = (len(self.marks) - 1) // 2
        for i in range(len(self.marks) - 2, ref, -1):
            if self.marks[i][0] <= start:
                ref = i
                break
        t_ref, c_ref = self.marks[ref]
        if c_last <= c_ref or t_last <= t_ref:
            return None
        rate = (c_last - c_ref) / (t_last - t_ref)
        return max(0.0, (total - c_last) / rate - (t - t_last))


#: tqdm's line with counts (a sweep) and without (one long call, ticking)
_TQDM_COUNTS = "{desc}: {bar} {n_fmt}/{total_fmt} {elapsed}{postfix}"
_TQDM_ELAPSED = "{desc} ... {elapsed}{postfix}"


def _tqdm() -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """One progress line on ``stream`` (default stderr); see the module docstring.

    Parameters
    ----------
    title : str
        What runs, e.g. ``"sweep"`` or ``"network resnet50"``.
    enabled : bool
        Draw at all (the caller decides with :func:`enabled`).
    stream : text stream, optional
    delay : float
        Seconds before the first line is drawn.
    clock : callable, optional
        Returns seconds (default ``time.perf_counter``; tests pass a fake clock).
    use_tqdm : bool, optional
        Draw with tqdm (default: when it is importable and ``stream`` is stderr).
    """

    def __init__(self, title: str, *, enabled: bool, stream: TextIO | None = None,
                 delay: float = DELAY_S, width: int = 28, clock: Callable[[], float] | None = None,
                 use_tqdm: bool | None = None):
        self.title = title
        self.enabled = bool(enabled)
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.width = width
        self.clock = clock or time.perf_counter
        self.t0 = self.clock()
        self.eta = Eta(self.t0)
        self.label = ""
        self._tq = _tqdm() if use_tqdm is None and stream is None else (_tqdm() if use_tqdm else None)
        self._bar: Any = None
        self._costs: list[float] | None = None
        self._state: tuple[int, int] | None = None
        self._drawn = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ updates
    def set_costs(self, costs: Sequence[float]) -> None:
        """Per-item cost proxies, in the order items finish: the ETA then counts cost, not items."""
        vals = [float(c) for c in costs]
        if any(not c >= 0 for c in vals):
            raise ValueError("Progress.set_costs: costs must be numbers >= 0")
        self._costs = vals

    def __call__(self, done: int, total: int, label: str = "") -> None:
        self._state = (int(done), int(total))
        self.label = str(label)
        self.eta.add(self.clock(), self._done_units(done))
        self._draw()

    def note(self, label: str) -> None:
        """Change the label only (a sub-step of the current item)."""
        self.label = str(label)
        self._draw()

    def _done_units(self, done: int) -> float:
        if self._costs is None or len(self._costs) < done:
            return float(done)
        return float(sum(self._costs[:done]))

    def _total_units(self, total: int) -> float:
        if self._costs is None or len(self._costs) != total:
            return float(total)
        return float(sum(self._costs))

    # ------------------------------------------------------------------ drawing
    def line(self) -> str:
        """The text of the line now (without the bar when tqdm draws it)."""
        elapsed = self.clock() - self.t0
        if self._state is None:
            return f"{self.title} ... {elapsed:.0f} s  {self.label}".rstrip()
        done, total = self._state
        left = self.eta.seconds_left(self.clock(), self._total_units(total))
        eta = f", ~{left:.0f} s left" if left is not None and done < total else ""
        frac = done / total if total else 1.0
        fill = int(round(self.width * min(1.0, frac)))
        return (f"{self.title} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} "
                f"{elapsed:.0f} s{eta}  {self.label}").rstrip()

    def _draw(self) -> None:
        if not self.enabled or self.clock() - self.t0 < self.delay:
            return
        with self._lock:
            if self._tq is not None:
                self._draw_tqdm()
                return
            text = self.line()
            pad = max(0, self._drawn - len(text))
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._drawn = len(text)

    def _draw_tqdm(self) -> None:
        # tqdm draws the bar and fits the terminal; the ETA is ours (its own rate is the
        # since-the-start average, or a smoothing of it)
        if self._bar is None:
            self._bar = self._tq(total=None, desc=self.title, file=self.stream, leave=False,
                                 dynamic_ncols=True, bar_format=_TQDM_ELAPSED)
        # a single long call has no counts: elapsed time and the step's label only (tqdm's
        # own format would show an empty bar and "0/?")
        self._bar.bar_format = _TQDM_ELAPSED if self._state is None else _TQDM_COUNTS
        if self._state is not None:
            done, total = self._state
            self._bar.total, self._bar.n = total, done
            left = self.eta.seconds_left(self.clock(), self._total_units(total))
            eta = f"~{left:.0f} s left " if left is not None and done < total else ""
        else:
            eta = ""
        self._bar.set_postfix_str(f"{eta}{self.label}", refresh=False)
        self._bar.refresh()

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            self._draw()

    def __enter__(self) -> "Progress":
        _ACTIVE.append(self)
        if self.enabled:
            self._draw()                    # at once when there is no delay; ticks after that
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.close()

    def close(self) -> None:
        """Stop ticking and erase the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            if self._drawn:
                self.stream.write("\r" + " " * self._drawn + "\r")
                self.stream.flush()
                self._drawn = 0


class _Step:
    """A library step inside an open line: its notes label that line as "title: note"."""

    def __init__(self, outer: Any, title: str):
        self.outer, self.title = outer, title

    def note(self, label: str) -> None:
        self.outer.note(f"{self.title}: {label}")


#: the progress lines (and library steps) open in this process, innermost last
_ACTIVE: list[Any] = []


@contextmanager
def task(title: str) -> Iterator[Callable[[str], None]]:
    """A long library step: yields ``note(label)`` (:func:`note` reaches it too). Inside an
    open :class:`Progress` (a CLI command) it labels that line; otherwise it opens its own
    line, drawn per :func:`enabled`."""
    if not _ACTIVE:
        with Progress(title, enabled=enabled()) as own:
            yield own.note
        return
    outer = _ACTIVE[-1]
    before = getattr(outer, "label", None)
    step = _Step(outer, title)
    outer.note(title)
    _ACTIVE.append(step)
    try:
        yield step.note
    finally:
        _ACTIVE.remove(step)
        if before is not None:
            outer.note(before)


def note(label: str) -> None:
    """Label the innermost open progress line or step (nothing when none is open)."""
    if _ACTIVE:
        _ACTIVE[-1].note(label)
