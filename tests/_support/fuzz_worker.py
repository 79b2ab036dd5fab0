"""The fuzz suites' worker (tests/test_fuzz.py, tests/nn/test_torch_fuzz.py): a spawned
process calling fuzz targets by name, so a segfault, an abort or a hang fails one check
instead of taking the test runner down."""
from __future__ import annotations

import importlib
import multiprocessing as mp
import traceback

__all__ = ["Worker", "serve"]


def serve(conn, targets: str = "tests._support.fuzz_targets") -> None:
    """Answer ``(name, args)`` messages on ``conn`` until ``None``: ("ok" | "allowed" | "bug",
    exception type, message or traceback). ``targets`` names the module holding the targets
    (its ``ALLOWED`` errors and its functions); it loads here, in the worker."""
    mod = importlib.import_module(targets)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        name, args = msg
        try:
            getattr(mod, name)(*args)
            conn.send(("ok", "", ""))
        except mod.ALLOWED as err:
            conn.send(("allowed", type(err).__name__, str(err)))
        except BaseException as err:  # noqa: B036 - reported to the test process
            conn.send(("bug", type(err).__name__, traceback.format_exc()))


class Worker:
    """One spawned process running the targets of module ``targets``; restarted after a
    crash or a hang (``timeout`` seconds without an answer)."""

    def __init__(self, targets: str = "tests._support.fuzz_targets", timeout: float = 120):
        self.targets, self.timeout = targets, timeout
        self.proc = None
        self.conn = None

    def _start(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, self.targets), daemon=True)
        self.proc.start()
        child.close()

    def call(self, name, *args, timeout: float | None = None):
        """(status, exception type, detail): status "ok", "allowed", "bug", "crash" or "hang"."""
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send((name, args))
        limit = self.timeout if timeout is None else timeout
        if not self.conn.poll(limit):
            self.proc.kill()
            self.proc.join()
            self.proc = None
            return "hang", "", f"no answer in {limit} s"
        try:
            return self.conn.recv()
        except EOFError:
            self.proc.join()
            code = self.proc.exitcode
            self.proc = None
            return "crash", "", f"worker died with exit code {code} (negative: signal)"

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(10)
