"""Run a snippet in a fresh interpreter, for tests of input that once crashed the process:
a regression then fails one test instead of taking the test runner down."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

__all__ = ["PRELUDE", "run_isolated"]

PRELUDE = """
import numpy as np
import ipukern as ik
from ipukern.core.program import ComputeSet, Exchange, ExchangeError, Superstep, VertexBatch

def expect(fn, exc, text):
    try:
        fn()
    except exc as e:
        assert text in str(e), str(e)
        print("REJECTED:", type(e).__name__, e)
    else:
        raise SystemExit(f"no {exc} raised (expected {text!r})")
"""


def run_isolated(code: str, env: dict | None = None) -> str:
    """Run ``code`` (after PRELUDE) in a fresh interpreter; it must exit 0. Returns stdout."""
    full_env = dict(os.environ, **(env or {}))
    res = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=180, env=full_env)
    assert res.returncode == 0, (f"child exited with {res.returncode} (negative: killed by signal)\n"
                                 f"stdout:\n{res.stdout}\nstderr:\n{res.stderr[-3000:]}")
    return res.stdout
