"""``from_torch``: a PyTorch module traced with torch.fx becomes an ipukern Network.

Every fx node is looked up in :mod:`ipukern.nn.torch_table`, the table of supported
(target, argument) pairs: a node maps to one layer, a view or an identity only when every
argument it passes (defaults included) has a value the table honours; anything else raises
:class:`UnsupportedTorchNode` naming the node, the argument and its value, so nothing is
dropped silently. In-place targets (``add_``, ``relu_``, ``inplace=True``) keep torch's
aliasing: later uses of the mutated tensor, and of every alias of it, see the new value (a
mutation that a differently shaped view would have to see is refused). The network carries
the module's weights (``net.params``, float32, named by module path like a ``state_dict``).
torch is imported only when this is called.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .network import Network
from .torch_table import REQUIRED, Built, Call, Entry, Refused, UnsupportedTorchNode, module_entries, targets

__all__ = ["from_torch", "UnsupportedTorchNode"]


def _bind(entry: Entry, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The node's arguments by name, defaults filled; Refused for one the table lacks."""
    names = [a.name for a in entry.args]
    if entry.varargs and len(args) >= len(names):
        rest = args[len(names) - 1:]
        args = args[:len(names) - 1] + (tuple(rest[0]) if len(rest) == 1 and isinstance(
            rest[0], (tuple, list)) else tuple(rest),)
    if len(args) > len(names):
        raise Refused(f"#{len(names) + 1}", args[len(names)], "a positional argument the table "
                      f"does not list (it lists {', '.join(names)})")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise Refused(k, v, f"not in the table for this target (it lists {', '.join(names)})")
        bound[k] = v
    for a in entry.args:
        if a.name not in bound:
            if a.default is REQUIRED:
                raise Refused(a.name, None, "required")
            bound[a.name] = a.default
        if a.ok is not None and not a.ok(bound[a.name]):
            raise Refused(a.name, bound[a.name], f"honoured: {a.honoured}")
    return bound


def _module_call(node, mod, tnn) -> tuple[Entry, dict[str, Any]]:
    """A call_module node's entry and bound arguments: the module's constructor constants."""
    entry = module_entries(tnn).get(type(mod))
    if entry is None:
        raise UnsupportedTorchNode(f"module type {type(mod).__name__} is not in the table")
    if mod._forward_hooks or mod._forward_pre_hooks:
        raise UnsupportedTorchNode(f"module {node.target!r} has forward hooks (not imported)")
    names = {a.name for a in entry.args}
    for c in getattr(type(mod), "__constants__", ()):
        if c not in names:
            raise Refused(c, getattr(mod, c, None), "a module argument the table does not list")
    if len(node.args) != 1 or node.kwargs:
        raise Refused("#2" if len(node.args) > 1 else next(iter(node.kwargs), "input"),
                      node.args[1] if len(node.args) > 1 else node.kwargs,
                      "the module is called with one tensor")
    consts = {a.name: getattr(mod, a.name) for a in entry.args[1:]}
    return entry, _bind(entry, (node.args[0],), consts)


class _Aliases:
    """Which traced tensors share storage, so an in-place update reaches every alias.

    ``key[n]`` is the (storage, view) a tensor is: aliases of the same tensor have the same
    key, views of one storage the same storage but another view."""

    def __init__(self, nodes: dict[str, Any]):
        self.nodes = nodes
        self.order = {n: i for i, n in enumerate(nodes)}
        self.key: dict[str, tuple[str, str]] = {}
        self.permuted: set[str] = set()

    def record(self, node, built: Built) -> None:
        src = built.srcs[0].name if built.srcs else None
        how = built.storage
        if how == "contiguous":
            how = "new" if src in self.permuted else "alias"
        if how == "alias":
            self.key[node.name] = self.key[src]
        elif how == "view":
            self.key[node.name] = (self.key[src][0], node.name)
        else:
            self.key[node.name] = (node.name, node.name)
        if how == "view" and built.layer is not None and type(built.layer).__name__ == "Permute" or \
                how == "alias" and src in self.permuted:
            self.permuted.add(node.name)

    def mutate(self, node, target, env: dict[str, str]) -> None:
        """``node`` wrote its value into ``target``: rebind every alias used after it."""
        k = self.key[target.name]
        here = self.order[node.name]
        for name, key in list(self.key.items()):
            if key[0] != k[0] or name == node.name:
                continue
            later = [u.name for u in self._users(name) if self.order[u.name] > here]
            if key == k:
                env[name] = env[node.name]
            elif later:
                raise Refused("input", target, f"updated in place while its view {name!r} (used "
                              f"by {later[0]!r}) would have to see the change")
        self.key[node.name] = k

    def _users(self, name: str):
        return self.nodes[name].users

def from_torch(module: Any, example_input: Any, *, name: str | None = None) -> Network:
    """Trace ``module`` with torch.fx on ``example_input`` and build the equivalent Network.

    Parameters
    ----------
    module : torch.nn.Module
        Put in eval mode for the trace (batch norms use their running statistics, dropout
        modules are identities).
    example_input : torch.Tensor or ndarray of shape (batch, ...)
        Fixes the per-sample input shape.

    Raises
    ------
    ImportError
        Without torch.
    UnsupportedTorchNode
        For a node whose target is not in :mod:`ipukern.nn.torch_table`, or an argument
        (default included) with a value it does not honour, naming the node, the argument
        and the value.
    """
    try:
        import torch
        import torch.fx
        import torch.nn as tnn
    except ImportError as e:  # pragma: no cover - torch is optional
        raise ImportError("ik.from_torch needs PyTorch (pip install torch)") from e
    # a copy: the shape pass runs the module, and an in-place step on its input (x.relu_())
    # would otherwise rewrite the caller's array or tensor
    x = torch.tensor(np.asarray(example_input, dtype=np.float32)) if not torch.is_tensor(example_input) \
        else example_input.detach().float().clone()
    was_training = module.training
    module.eval()
    try:
        gm = torch.fx.symbolic_trace(module)
        from torch.fx.passes.shape_prop import ShapeProp
        ShapeProp(gm).propagate(x)
    finally:
        module.train(was_training)
    return _Importer(gm, torch, tnn).run(name or type(module).__name__, tuple(x.shape[1:]))


class _Importer:
    """One traced graph turned into a Network, node by node in program order."""

    def __init__(self, gm, torch, tnn):
        self.gm, self.torch, self.tnn = gm, torch, tnn
        self.nodes = {n.name: n for n in gm.graph.nodes}
        self.mods = dict(gm.named_modules())
        self.shapes: dict[str, tuple] = {}
        for n in gm.graph.nodes:
            meta = n.meta.get("tensor_meta")
            if meta is not None and hasattr(meta, "shape"):
                self.shapes[n.name] = tuple(int(s) for s in meta.shape)
        self.env: dict[str, str] = {}
        self.params: dict[str, np.ndarray] = {}
        self.used: dict[str, int] = {}
        self.alias = _Aliases(self.nodes)

    def run(self, name: str, sample_shape: tuple) -> Network:
        self.net = Network(name)
        for node in self.gm.graph.nodes:
            try:
                self._node(node, sample_shape)
            except Refused as e:
                raise UnsupportedTorchNode(self._where(node) + str(e)) from None
            except UnsupportedTorchNode as e:
                raise UnsupportedTorchNode(self._where(node) + str(e)) from None
        self.net.params = self.params
        return self.net

    @staticmethod
    def _where(node) -> str:
        return (f"from_torch: node {node.name!r} ({node.op} {getattr(node.target, '__name__', node.target)}) "
                "is not supported: ")

    def _node(self, node, sample_shape: tuple) -> None:
        if node.op == "placeholder":
            if self.net.inputs:
                raise UnsupportedTorchNode("a second forward argument (one tensor input is imported)")
            self.env[node.name] = self.net.input(node.name, sample_shape)
            self.alias.key[node.name] = (node.name, node.name)
            return
        if node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            for o in outs:
                if type(o).__name__ != "Node" or o.name not in self.env:
                    raise UnsupportedTorchNode(f"output {o!r} is not a tensor of the network")
            self.net.output(*[self.env[o.name] for o in outs])
            return
        if node.op == "get_attr":
            raise UnsupportedTorchNode(f"get_attr {node.target}: tensors read from module attributes "
                                       "are not supported")
        entry, bound, mod = self._lookup(node)
        built = entry.build(Call(node, bound, self.shapes, mod))
        self._emit(node, built, node.target if node.op == "call_module" else node.name)
        if entry.inplace or bound.get("inplace") is True:
            self.alias.mutate(node, bound["input"], self.env)

    def _lookup(self, node) -> tuple[Entry, dict, Any]:
        if node.op == "call_module":
            mod = self.mods[node.target]
            entry, bound = _module_call(node, mod, self.tnn)
            return entry, bound, mod
        fns, meths = targets(self.torch)
        entry = (meths if node.op == "call_method" else fns).get(node.target)
        if entry is None:
            raise UnsupportedTorchNode(f"{'method' if node.op == 'call_method' else 'function'} "
                                       f"{getattr(node.target, '__name__', node.target)} is not in the table")
        return entry, _bind(entry, tuple(node.args), dict(node.kwargs)), None

    def _emit(self, node, built: Built, base: str) -> None:
        if built.storage == "size":          # a shape query: only view/reshape read it
            return
        for s in built.srcs:
            if s.name not in self.env:
                raise Refused("input", s, "not a tensor of the network")
        self.alias.record(node, built)
        if built.layer is None:
            self.env[node.name] = self.env[built.srcs[0].name]
            return
        k = self.used.get(base, 0)
        self.used[base] = k + 1
        lname = base if k == 0 else f"{base}_{k}"
        try:
            self.env[node.name] = self.net.add(built.layer, *[self.env[s.name] for s in built.srcs],
                                               name=lname)
        except ValueError as e:
            raise UnsupportedTorchNode(f"the layer {built.layer.describe()} does not fit: {e}") from None
        for pn, v in built.params.items():
            self.params[f"{lname}.{pn}"] = v
