import atexit
import builtins
import os
import shutil
import tempfile

import numpy as np
import pytest

# hypothesis: deterministic, CI-friendly
try:
    from hypothesis import settings

    settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
    settings.register_profile("dev", max_examples=50, deadline=None)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")
except ImportError:  # pragma: no cover
    pass


# the suite never writes the user's cache (~/.cache/ipukern): tile-function drivers and
# network copy tables go to a directory of this session, removed at exit
_CACHE = tempfile.mkdtemp(prefix="ipukern-test-cache-")
os.environ["IPUKERN_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Make ``import matplotlib`` fail, as on a machine without the plot extra."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
