"""One point of a design-space sweep: a network on a machine (or system) variant with its
settings; its key and its evaluation into a flat record.

A point's key is a hash of everything its result depends on (the network, every constant of
the machine and system, the mode and settings, the ipukern version), so a resumed sweep
recognises a finished point whatever order, engine or sweep computed it.

:func:`evaluate` runs where the point is sent (a Dask worker, a pool process or here). A
point whose model refuses it (it does not fit the tiles, a setting the estimate rejects) is
a result: its record says ``status="no-fit"`` or ``"error"`` with the message, and the other
points go on. Records hold only JSON numbers, strings and None, so a record read back from
the stream file has the same bits as one just computed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..core import TileMemoryError
from ..machine import MachineSpec
from ..systems import StageMemoryError, System
from .variants import machine_columns, system_columns

__all__ = ["Point", "evaluate", "MODES"]

#: ``network``: :func:`~ipukern.estimate_network` on one chip; ``training``:
#: :func:`~ipukern.estimate_training` on a system; ``tune``: :func:`~ipukern.tune`'s best
#: fitting training configuration on a system
MODES = ("network", "training", "tune")


@dataclass(frozen=True)
class Point:
    """What one point computes (pickled to a worker)."""

    index: int
    net: Any                       # a zoo model name or an ipukern.nn.Network
    variant: str
    changes: tuple[tuple[str, Any], ...]
    machine: MachineSpec
    system: System | None
    mode: str
    settings: tuple[tuple[str, Any], ...]

    @property
    def network(self) -> str:
        return self.net if isinstance(self.net, str) else self.net.name

    @property
    def key(self) -> str:
        """A hash of what the result depends on (not of the index or the labels)."""
        net = self.net if isinstance(self.net, str) else ("network", self.net.name, repr(self.net.layers))
        machine = repr(dataclasses.replace(self.machine, name="", sources=()))
        system = (None if self.system is None
                  else repr(dataclasses.replace(self.system, name="", sources=(), chip=self.machine)))
        text = json.dumps([net, machine, system, self.mode, repr(self.settings), __version__],
                          default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def _num(v: Any) -> Any:
    """A plain JSON number (numpy scalars to int / float; inf and nan to None)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int) or (hasattr(v, "dtype") and v.dtype.kind in "iu"):
        return int(v)
    v = float(v)
    return v if math.isfinite(v) else None


def _setting(v: Any) -> Any:
    return v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)


def _network_result(p: Point, net: Any, settings: dict) -> dict:
    from ..nn import estimate_network
    prof = estimate_network(net, machine=p.machine, **settings)
    return {"cycles": _num(prof.total_cycles), "seconds": _num(prof.seconds),
            "samples_per_second": _num(prof.samples_per_second), "tflops": _num(prof.tflops),
            "fits": bool(prof.fits),
            # not prof.memory: reading it runs the max-batch search, several estimates more
            "peak_bytes": _num(max(prof.step_peak_bytes, default=0))}


def _training_result(p: Point, net: Any, settings: dict) -> dict:
    from ..systems import estimate_training, tune
    extra: dict = {}
    if p.mode == "tune":
        res = tune(net, p.system, **settings)
        est, cfg = res.best, res.best_config
        extra = {"micro_batch": cfg.micro_batch, "replicas": cfg.replicas,
                 "gradient_accumulation": cfg.gradient_accumulation,
                 "recompute": _setting(cfg.recompute),
                 "available_memory_proportion": _setting(cfg.available_memory_proportion),
                 "tune_evaluations": res.evaluations}
    else:
        est = estimate_training(net, p.system, **settings)
    return {"cycles": None, "seconds": _num(est.step_seconds),
            "samples_per_second": _num(est.samples_per_second), "tflops": None,
            "fits": bool(est.info.get("fits", True)), "peak_bytes": None, **extra}


def evaluate(p: Point) -> dict:
    """The point's record: its labels, machine and system constants, settings and results."""
    from ..sweeps import resolve_net
    record: dict[str, Any] = {"key": p.key, "network": p.network, "variant": p.variant, "mode": p.mode}
    record.update(machine_columns(p.machine))
    record.update(system_columns(p.system))
    # the constants as the variant gave them (exact, and the ones with no column of their
    # own: clock_ghz, amp_scale, link_bandwidth_scale ...), and which they were
    record.update(dict(p.changes))
    record["varied"] = ",".join(k for k, _ in p.changes)
    settings = dict(p.settings)
    record.update({f"setting_{k}": _setting(v) for k, v in settings.items() if k != "model_kwargs"})
    status, error, result = "ok", None, {}
    try:
        net = resolve_net(p.net, settings.pop("model_kwargs", None))
        if p.mode == "network":
            result = _network_result(p, net, settings)
        else:
            result = _training_result(p, net, settings)
    except (TileMemoryError, StageMemoryError) as e:
        status, error = "no-fit", f"{type(e).__name__}: {e}"
    except (ValueError, TypeError, ArithmeticError, RuntimeError) as e:
        status, error = "error", f"{type(e).__name__}: {e}"
    record["status"] = status
    record["error"] = error
    record.update(result)
    return {k: _num(v) if not isinstance(v, str) else v for k, v in record.items()}
