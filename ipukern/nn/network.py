"""A network: named layers over named tensors, shapes inferred, parameters carried."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._format import Rest, format_table
from .layers import Layer

__all__ = ["Network", "Node"]


@dataclass
class Node:
    """One named tensor of a network: a network input (``layer`` None) or a layer's output."""

    name: str
    layer: Layer | None
    inputs: tuple[str, ...]
    #: per-sample shape (batch axis excluded) for inputs; None for layer outputs
    sample_shape: tuple[int, ...] | None = None
    #: "float" (the network's compute dtype) or "int" (host data: token ids, labels)
    kind: str = "float"


class Network:
    """A graph of layers; every layer output is a named tensor.

    Build it by adding inputs and layers; each call returns the name of the new tensor::

        net = ik.Network("tiny")
        x = net.input("x", (3, 32, 32))
        y = net.add(ik.nn.Conv2d(3, 8, 3, padding=1), x, name="conv1")
        y = net.add(ik.nn.ReLU(), y, name="relu1")
        net.output(y)

    Shapes are inferred as layers are added (a wrong shape fails there, naming the layer).
    Parameters are named ``"<layer>.<param>"`` like a PyTorch ``state_dict``.
    """

    def __init__(self, name: str = "network"):
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        #: weights the network carries (e.g. from ``from_torch``); None = initialise
        self.params: dict[str, np.ndarray] | None = None
        self._version = 0
        self._count: dict[str, int] = {}
        self._shape1: dict[str, tuple[int, ...]] = {}

    # ------------------------------------------------------------------ building

    @property
    def version(self) -> int:
        """Changes whenever an input, a layer or an output is added: caches keyed by a network
        (plans, schedules, derived networks) check it."""
        return self._version

    def _new_name(self, name: str | None, op: str) -> str:
        if name is None:
            k = self._count.get(op, 0)
            while f"{op}{k}" in self.nodes:
                k += 1
            self._count[op] = k + 1
            name = f"{op}{k}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"layer names must be non-empty strings, got {name!r}")
        if name in self.nodes:
            raise ValueError(f"network {self.name!r} already has a tensor named {name!r}")
        return name

    def input(self, name: str, shape: Sequence[int], kind: str = "float") -> str:
        """Declare an input of per-sample ``shape`` (the batch axis is added when the
        network is estimated or run). ``kind="int"`` is host data (token ids, labels)."""
        if kind not in ("float", "int"):
            raise ValueError(f"input kind must be 'float' or 'int', got {kind!r}")
        shape = tuple(int(s) for s in shape)
        if any(s < 1 for s in shape):
            raise ValueError(f"input {name!r}: shape {shape} must have positive sizes")
        name = self._new_name(name, "input")
        self.nodes[name] = Node(name, None, (), shape, kind)
        self._shape1[name] = (1,) + shape
        self.inputs.append(name)
        self._version += 1
        return name

    def add(self, layer: Layer, *inputs: str, name: str | None = None) -> str:
        """Add ``layer`` applied to the named tensors; returns the new tensor's name."""
        if not isinstance(layer, Layer):
            raise TypeError(f"expected an ipukern.nn layer, got {type(layer).__name__}")
        if len(inputs) != layer.n_inputs:
            raise ValueError(f"{layer.describe()} takes {layer.n_inputs} input(s), got {len(inputs)}")
        for i in inputs:
            if i not in self.nodes:
                raise ValueError(f"unknown tensor {i!r} (known: {', '.join(list(self.nodes)[-5:])} ...)")
        name = self._new_name(name, layer.op)
        try:
            shape = tuple(int(s) for s in layer.out_shape([self._shape1[i] for i in inputs]))
        except ValueError as e:
            raise ValueError(f"layer {name!r}: {e}") from None
        self.nodes[name] = Node(name, layer, tuple(inputs))
        self._shape1[name] = shape
        self._version += 1
        return name

    def output(self, *names: str) -> None:
        """Mark tensors as network outputs (fetched to the host by :func:`run_network`)."""
        for n in names:
            if n not in self.nodes:
                raise ValueError(f"unknown tensor {n!r}")
            if n not in self.outputs:
                self.outputs.append(n)
        self._version += 1

    # ------------------------------------------------------------------ queries
    def shape(self, name: str, batch: int = 1) -> tuple[int, ...]:
        """Full shape (batch first) of a tensor for the given batch size."""
        return self.shapes(batch)[name]

    def shapes(self, batch: int = 1) -> dict[str, tuple[int, ...]]:
        """Every tensor's full shape for the given batch size."""
        if batch == 1:
            return dict(self._shape1)
        out: dict[str, tuple[int, ...]] = {}
        for n, node in self.nodes.items():
            if node.layer is None:
                out[n] = (batch,) + node.sample_shape
            else:
                out[n] = tuple(int(s) for s in node.layer.out_shape([out[i] for i in node.inputs]))
        return out

    @property
    def layers(self) -> list[tuple[str, Layer]]:
        """(name, layer) in program order."""
        return [(n, node.layer) for n, node in self.nodes.items() if node.layer is not None]

    def consumers(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {n: [] for n in self.nodes}
        for n, node in self.nodes.items():
            for i in node.inputs:
                out[i].append(n)
        return out

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """``"<layer>.<param>" -> shape`` for every parameter."""
        shapes = self.shapes(1)
        out = {}
        for n, layer in self.layers:
            for p, s in layer.param_shapes([shapes[i] for i in self.nodes[n].inputs]).items():
                out[f"{n}.{p}"] = tuple(s)
        return out

    @property
    def n_params(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.param_shapes().values()))

    def init_params(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Fresh float32 parameters (PyTorch-like initialisation), deterministic in ``seed``."""
        rng = np.random.default_rng(seed)
        shapes = self.shapes(1)
        out = {}
        for n, layer in self.layers:
            for p, v in layer.init_params([shapes[i] for i in self.nodes[n].inputs], rng).items():
                out[f"{n}.{p}"] = v
        return out

    def check_params(self, params: dict[str, Any]) -> None:
        """Raise naming the first missing or mis-shaped parameter."""
        for k, s in self.param_shapes().items():
            if k not in params:
                raise ValueError(f"missing parameter {k!r} of shape {s}")
            if tuple(np.shape(params[k])) != s:
                raise ValueError(f"parameter {k!r} must have shape {s}, got {tuple(np.shape(params[k]))}")

    def summary(self, batch: int = 1) -> str:
        shapes = self.shapes(batch)
        rows = [[n, str(shapes[n]), Rest("input" if node.layer is None else node.layer.describe())]
                for n, node in self.nodes.items()]
        return "\n".join([f"network {self.name}: {len(self.layers)} layers, {self.n_params:,} parameters",
                          format_table(["node", "shape", "layer"], rows, align="lll", indent="  ")])

    def __repr__(self) -> str:
        return f"Network({self.name!r}, {len(self.layers)} layers)"
