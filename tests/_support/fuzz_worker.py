"""The fuzz suite's worker loop (tests/test_fuzz.py spawns it): calls the targets of
:mod:`tests._support.fuzz_targets` by name and sends back how each call ended."""
from __future__ import annotations

import traceback


def serve(conn) -> None:
    """Answer ``(name, args)`` messages on ``conn`` until ``None``: ("ok" | "allowed" | "bug",
    exception type, message or traceback). The targets load here, in the worker."""
    from tests._support.fuzz_targets import ALLOWED, call
    while True:
        msg = conn.recv()
        if msg is None:
            return
        name, args = msg
        try:
            call(name, args)
            conn.send(("ok", "", ""))
        except ALLOWED as err:
            conn.send(("allowed", type(err).__name__, str(err)))
        except BaseException as err:  # noqa: B036 - reported to the test process
            conn.send(("bug", type(err).__name__, traceback.format_exc()))
