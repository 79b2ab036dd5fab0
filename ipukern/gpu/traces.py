"""NeuSight's traced transformer op graphs as the launches eager PyTorch makes.

Each ``ipukern/gpu/data/neusight/opgraph/<model>-<mode>-<seq>-<batch>.csv`` is one torch.fx
trace: per node the kernels of its forward (``FwOps``), backward (``BwOps``) and gradient
accumulation (``AccOps``) as NeuSight recorded them, for the embedding, **one** transformer
layer and the head. A model of ``num_layer`` layers repeats that layer (the layer's first
and last node are NeuSight's own, ``neusight/Prediction/aggregator.py``).

Kernel tuples (NeuSight's conventions, checked against the single-kernel tables):
``Linear (rows, reduction, out)``; ``BMM (B, M, N, K)`` = ``(B, M, N) @ (B, N, K)``;
``VEC<op> (B, H)``; ``MEM (shapes...)``: a copy of those tensors' elements.

:func:`trace_step` prices every launch with the kernel model and plays them with eager
PyTorch's host cost per launch (:func:`~ipukern.gpu.network.play_launches`): forward, then
backward (with accumulation) in reverse order, as ``loss.backward()`` runs them.
"""
from __future__ import annotations

import ast
import csv
import functools
from dataclasses import dataclass
from importlib import resources

import numpy as np

from .calibration import EAGER_HOST_S
from .kernels import KernelCall, kernel_seconds
from .measured import _VECTOR
from .network import play_launches
from .specs import GPUSpec

__all__ = ["TraceStep", "LAYER_BOUNDS", "trace_configs", "trace_step", "node_seconds"]

#: model -> (first, last) node of its one traced layer (NeuSight's aggregator)
LAYER_BOUNDS = {
    "bert_large": ("bert_encoder_layer_0_attention_self_query", "bert_encoder_layer_0_output_layer_norm"),
    "gpt2_large": ("transformer_h_0_ln_1", "add_15"),
    "gpt3_xl": ("transformer_h_0_ln_1", "add_15"),
    "gpt3_27": ("transformer_h_0_ln_1", "add_15"),
    "opt_13": ("model_decoder_layers_0_self_attn_layer_norm", "view_11"),
}


@dataclass(frozen=True)
class TraceStep:
    forward_seconds: float
    backward_seconds: float
    launches: int

    @property
    def seconds(self) -> float:
        return self.forward_seconds + self.backward_seconds


def _call(op: list) -> KernelCall:
    kind, dims = op[0], op[1] if len(op) > 1 else ()
    if kind == "Linear":
        rows, red, out = (int(d) for d in dims)
        return KernelCall("gemm", "linear", m=rows, n=out, k=red)
    if kind == "BMM":
        b, m, n, k = (int(d) for d in dims)
        return KernelCall("gemm", "bmm", m=m, n=k, k=n, batch=b)
    if kind == "MEM":
        elems = sum(int(np.prod(s)) for s in dims)
        return KernelCall("copy", "copy", nbytes=4 * elems)
    if kind.startswith("VEC") and kind[3:] in _VECTOR:
        mem_kind, per = _VECTOR[kind[3:]]
        b, h = (int(d) for d in dims)
        return KernelCall(mem_kind, kind[3:], nbytes=b * h * per)
    raise ValueError(f"unknown NeuSight kernel {kind!r}")


@functools.lru_cache(maxsize=None)
def _graph(config: str) -> tuple[tuple[str, tuple, tuple], ...]:
    """(node name, forward calls, backward + accumulation calls) per node, file order."""
    ref = resources.files("ipukern.gpu").joinpath(f"data/neusight/opgraph/{config}.csv")
    if not ref.is_file():
        raise ValueError(f"no NeuSight op graph {config!r}; graphs are {trace_configs()}")
    out = []
    with ref.open("r", encoding="utf-8", newline="") as f:
        for r in csv.DictReader(f):
            fw = tuple(_call(o) for o in ast.literal_eval(r["FwOps"]))
            bw = tuple(_call(o) for o in ast.literal_eval(r["BwOps"]) + ast.literal_eval(r["AccOps"]))
            out.append((r["Name"], fw, bw))
    return tuple(out)


def trace_configs() -> list[str]:
    d = resources.files("ipukern.gpu").joinpath("data/neusight/opgraph")
    return sorted(p.name[:-4] for p in d.iterdir() if p.name.endswith(".csv"))


def _expanded(config: str, num_layer: int) -> list[tuple[tuple, tuple]]:
    nodes = _graph(config)
    model = config.split("-")[0]
    first, last = LAYER_BOUNDS[model]
    names = [n for n, _, _ in nodes]
    i, j = names.index(first), names.index(last)
    body = [(fw, bw) for _, fw, bw in nodes]
    return body[:i] + body[i:j + 1] * num_layer + body[j + 1:]


def trace_step(config: str, num_layer: int, gpu: GPUSpec, *, training: bool,
               host_per_launch_s: float = EAGER_HOST_S) -> TraceStep:
    """Forward (and backward) seconds of a NeuSight-traced model of ``num_layer`` layers."""
    nodes = _expanded(config, num_layer)
    cache: dict[KernelCall, float] = {}

    def t(c: KernelCall) -> float:
        s = cache.get(c)
        if s is None:
            s = cache[c] = kernel_seconds(c, gpu, "float32").seconds
        return s

    fw = np.array([t(c) for f, _ in nodes for c in f], dtype=np.float64)
    ends, _ = play_launches(fw, host_per_launch_s, 0.0, 0.0)
    t_fw = float(ends[-1]) if ends.size else 0.0
    if not training:
        return TraceStep(t_fw, 0.0, int(fw.size))
    bw = np.array([t(c) for _, b in reversed(nodes) for c in b], dtype=np.float64)
    ends_b, _ = play_launches(bw, host_per_launch_s, fw.size * host_per_launch_s, t_fw)
    t_bw = (float(ends_b[-1]) - t_fw) if ends_b.size else 0.0
    return TraceStep(t_fw, t_bw, int(fw.size + bw.size))


@functools.lru_cache(maxsize=None)
def _node_calls(config: str) -> dict[str, tuple[tuple, tuple]]:
    """node name -> (forward calls, backward calls without AccumulateGrad), as NeuSight's
    per-op labels time them (``bw_latency`` leaves the accumulation out)."""
    ref = resources.files("ipukern.gpu").joinpath(f"data/neusight/opgraph/{config}.csv")
    if not ref.is_file():
        raise ValueError(f"no NeuSight op graph {config!r}; graphs are {trace_configs()}")
    with ref.open("r", encoding="utf-8", newline="") as f:
        return {r["Name"]: (tuple(_call(o) for o in ast.literal_eval(r["FwOps"])),
                            tuple(_call(o) for o in ast.literal_eval(r["BwOps"])))
                for r in csv.DictReader(f)}


def node_seconds(config: str, name: str, gpu: GPUSpec, *, backward: bool = False,
                 host_per_launch_s: float = EAGER_HOST_S) -> float | None:
    """One traced node's forward (or backward) as CUDA events around the eager op see it:
    its launches played with the host cost per launch. None when it launches nothing."""
    calls = _node_calls(config).get(name)
    if calls is None:
        raise ValueError(f"op graph {config!r} has no node {name!r}")
    launches = calls[1] if backward else calls[0]
    if not launches:
        return None
    times = np.array([kernel_seconds(c, gpu, "float32").seconds for c in launches], dtype=np.float64)
    # each launch is issued after the host's dispatch, as in the single-kernel rows
    # (ipukern.gpu.measured: measured = host + kernel)
    ends, _ = play_launches(times, host_per_launch_s, host_per_launch_s, 0.0)
    return float(ends[-1])
