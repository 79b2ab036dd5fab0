"""The configuration of a training step on a system, as one frozen, validated record.

:func:`~ipukern.estimate_training`, :func:`~ipukern.run_training_step`, the sweeps and the
CLI take their many options through :class:`TrainingConfig`; their keyword arguments are a
thin layer that builds one. What can be checked without knowing the system is checked here,
once (types, ranges, names); what depends on the system (replicas, the bn group, memory)
is checked where the system is known.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .._checks import as_int
from ..dtypes import canonical_dtype
from ..ops import OPTIMIZERS, Optimizer, state_dtypes

__all__ = ["TrainingConfig", "GCL_REPLICA_SIZES"]

#: IPUs per replica that GCL's replica groups support (powers of two up to 16)
GCL_REPLICA_SIZES = (1, 2, 4, 8, 16)


def _freeze(v: Any) -> Any:
    """Lists (pipeline splits, checkpoints) as tuples, so the record is hashable."""
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _positive(name: str, v: Any) -> int:
    return as_int(v, name, minimum=1)


@dataclass(frozen=True)
class TrainingConfig:
    """How a training step is laid out on a system and what it computes.

    Every option is described with :func:`~ipukern.estimate_training`. The record is
    frozen and hashable; :meth:`replace` gives a changed, re-validated copy.

    Parameters
    ----------
    micro_batch : int, optional
        Samples per replica per micro-batch (an estimate needs it; an executed step can
        derive it from its batch).
    gradient_accumulation : int
        Micro-batches per step (per replica).
    replicas : int, optional
        Data-parallel replicas (default: as many as the system holds).
    ipus_per_replica : {1, 2, 4, 8, 16}
        > 1 pipelines the network over that many IPUs.
    pipeline : None, "auto", list of split layers, or list of stage layer lists
    dtype, partials : str
        Activation/weight dtype and the convs' and matmuls' accumulation dtype.
    recompute : bool, "auto", list of layer names, or None
    optimizer : name or :class:`~ipukern.Optimizer`
    optimizer_state : {"chip", "streaming"}
    optimizer_state_dtype : "float32", "float16" or one per state slot
    replicated_sharding : bool
    sample_bytes : int, optional
        Host bytes per sample (default: the network's inputs in ``dtype``).
    bn_replica_group : int
    allow_overflow : bool
    available_memory_proportion : float in (0, 1], optional
    io_tiles : int
        Tiles set aside for host I/O (Poplar's I/O tiles; TensorFlow's ``--num-io-tiles``).
        0 (default, as in Graphcore's MLPerf ResNet-50 runs): each micro-batch's input is a
        synchronous host exchange the IPUs wait for. > 0: the copies land on the I/O tiles
        while the other tiles compute (the network is planned on ``n_tiles - io_tiles``).
    """

    micro_batch: int | None = None
    gradient_accumulation: int = 1
    replicas: int | None = None
    ipus_per_replica: int = 1
    pipeline: Any = None
    dtype: str = "float16"
    partials: str = "half"
    recompute: Any = None
    optimizer: Any = "sgd_momentum"
    optimizer_state: str = "chip"
    optimizer_state_dtype: Any = "float32"
    replicated_sharding: bool = False
    sample_bytes: int | None = None
    bn_replica_group: int = 1
    allow_overflow: bool = False
    available_memory_proportion: float | None = None
    io_tiles: int = 0

    def __post_init__(self) -> None:
        put = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - frozen record
        if self.micro_batch is not None:
            put("micro_batch", _positive("micro_batch", self.micro_batch))
        put("gradient_accumulation", _positive("gradient_accumulation", self.gradient_accumulation))
        if self.replicas is not None:
            put("replicas", _positive("replicas", self.replicas))
        ipr = _positive("ipus_per_replica", self.ipus_per_replica)
        if ipr not in GCL_REPLICA_SIZES:
            raise ValueError(f"ipus_per_replica must be 1, 2, 4, 8 or 16 (GCL replica sizes), got {ipr}")
        put("ipus_per_replica", ipr)
        put("dtype", canonical_dtype(self.dtype))
        put("pipeline", _freeze(self.pipeline))
        r = self.recompute
        if isinstance(r, (list, tuple)):
            put("recompute", tuple(str(c) for c in r))
        elif not (r is None or isinstance(r, bool) or (isinstance(r, str) and r == "auto")):
            raise ValueError(f"recompute must be a bool, 'auto', None or a list of layer names, "
                             f"got {r!r}")
        opt = self.optimizer
        if not isinstance(opt, Optimizer) and (not isinstance(opt, str) or opt not in OPTIMIZERS):
            raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)} or an ipukern.Optimizer, "
                             f"got {opt!r}")
        if self.optimizer_state not in ("chip", "streaming"):
            raise ValueError(f"optimizer_state must be 'chip' or 'streaming', got {self.optimizer_state!r}")
        put("optimizer_state_dtype", state_dtypes(self.optimizer_name, _freeze(self.optimizer_state_dtype)))
        if self.sample_bytes is not None:
            put("sample_bytes", as_int(self.sample_bytes, "sample_bytes", minimum=0))
        put("bn_replica_group", _positive("bn_replica_group", self.bn_replica_group))
        for k in ("replicated_sharding", "allow_overflow"):
            if not isinstance(getattr(self, k), bool):
                raise TypeError(f"{k} must be True or False, got {getattr(self, k)!r}")
        amp = self.available_memory_proportion
        if amp is not None and (isinstance(amp, bool) or not isinstance(amp, (int, float))
                                or not math.isfinite(amp) or not 0 < amp <= 1):
            raise ValueError(f"available_memory_proportion must be in (0, 1], got {amp!r}")
        put("io_tiles", as_int(self.io_tiles, "io_tiles", minimum=0))

    @property
    def optimizer_name(self) -> str:
        """The optimizer's name ("sgd", "sgd_momentum", "adam", "lamb", "lars")."""
        return self.optimizer.name if isinstance(self.optimizer, Optimizer) else self.optimizer

    def replace(self, **changes: Any) -> "TrainingConfig":
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, config: "TrainingConfig | None", options: dict[str, Any]) -> "TrainingConfig":
        """``config`` with keyword ``options`` applied, or a new record from them: the thin
        keyword layer of the entry points (an unknown option is a TypeError naming it)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown training option(s) {', '.join(unknown)}; valid: "
                            f"{', '.join(sorted(names))}")
        if config is None:
            return cls(**options)
        if not isinstance(config, cls):
            raise TypeError(f"config must be an ipukern.systems.TrainingConfig, got {config!r}")
        return config.replace(**options) if options else config
