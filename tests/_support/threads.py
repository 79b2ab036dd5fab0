"""A helper for thread-safety tests: release several threads at once, switching often."""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Sequence


def race(fn: Callable[..., Any], args: Sequence[tuple]) -> tuple[list, list[BaseException]]:
    """Call ``fn(*args[i])`` on ``len(args)`` threads released together by a barrier, with
    a 1 us switch interval; returns the results (in thread order) and the exceptions."""
    barrier = threading.Barrier(len(args))
    results: list = [None] * len(args)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(*args[i])
        except BaseException as err:  # noqa: B036 - handed to the test
            errors.append(err)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return results, errors
