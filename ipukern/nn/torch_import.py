"""``from_torch``: a PyTorch module traced with torch.fx becomes an ipukern Network.

Every fx node maps to one layer (or is a view / identity stated below); anything else
raises :class:`UnsupportedTorchNode` naming the node and its op, so nothing is skipped
silently. The network carries the module's weights (``net.params``, float32, named by
module path like a ``state_dict``). torch is imported only when this is called.

Identities at inference: ``nn.Dropout``, ``nn.Identity``, ``F.dropout``. Views:
``flatten`` / ``nn.Flatten`` (from axis 1), ``reshape`` / ``view`` (batch axis kept).
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import layers as L
from .network import Network

__all__ = ["from_torch", "UnsupportedTorchNode"]


class UnsupportedTorchNode(ValueError):
    """A traced node with no ipukern equivalent."""


def _mod_layer(mod, tnn, shape):
    """(layer, params) for a call_module node; None for identities."""
    t = type(mod)
    acts = {tnn.ReLU: "relu", tnn.ReLU6: "relu6", tnn.SiLU: "silu", tnn.Sigmoid: "sigmoid",
            tnn.Tanh: "tanh", tnn.SELU: "selu"}
    if t in acts:
        return L.Activation(acts[t]), {}
    if t is tnn.GELU:
        if getattr(mod, "approximate", "none") != "tanh":
            raise UnsupportedTorchNode("GELU: ipukern computes the tanh form (popnn's); use "
                                       "nn.GELU(approximate='tanh')")
        return L.GELU(), {}
    if t is tnn.Conv2d:
        if mod.padding_mode != "zeros" or isinstance(mod.padding, str):
            raise UnsupportedTorchNode(f"Conv2d with padding {mod.padding!r} / mode {mod.padding_mode!r}")
        layer = L.Conv2d(mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
                         mod.dilation, mod.groups, bias=mod.bias is not None)
        return layer, _state(mod, ("weight", "bias"))
    if t is tnn.BatchNorm2d:
        return L.BatchNorm2d(mod.num_features, mod.eps), _state(mod, ("weight", "bias", "running_mean",
                                                                       "running_var"))
    if t is tnn.Linear:
        layer = L.Linear(mod.in_features, mod.out_features, mod.bias is not None)
        return layer, _state(mod, ("weight", "bias"))
    if t is tnn.LayerNorm:
        if len(mod.normalized_shape) != 1:
            raise UnsupportedTorchNode(f"LayerNorm over {tuple(mod.normalized_shape)} (one axis only)")
        return L.LayerNorm(mod.normalized_shape[0], mod.eps), _state(mod, ("weight", "bias"))
    if t is tnn.MaxPool2d:
        if mod.dilation not in (1, (1, 1)) or mod.ceil_mode:
            raise UnsupportedTorchNode("MaxPool2d with dilation or ceil_mode")
        return L.MaxPool2d(mod.kernel_size, mod.stride, mod.padding), {}
    if t is tnn.AvgPool2d:
        if mod.ceil_mode or not mod.count_include_pad:
            raise UnsupportedTorchNode("AvgPool2d with ceil_mode or count_include_pad=False")
        return L.AvgPool2d(mod.kernel_size, mod.stride, mod.padding), {}
    if t is tnn.AdaptiveAvgPool2d:
        if mod.output_size not in (1, (1, 1)):
            raise UnsupportedTorchNode(f"AdaptiveAvgPool2d to {mod.output_size} (only 1x1)")
        return L.GlobalAvgPool(), {}
    if t is tnn.Flatten:
        if mod.start_dim != 1 or mod.end_dim != -1:
            raise UnsupportedTorchNode("Flatten other than from axis 1")
        return L.Flatten(), {}
    if t is tnn.Softmax:
        if mod.dim not in (-1, len(shape) - 1):
            raise UnsupportedTorchNode("Softmax over an axis other than the last")
        return L.Softmax(), {}
    if t in (tnn.Dropout, tnn.Identity):
        return None, {}
    raise UnsupportedTorchNode(f"module type {t.__name__}")


def _state(mod, names) -> dict[str, np.ndarray]:
    out = {}
    for n in names:
        v = getattr(mod, n, None)
        if v is not None:
            out[n] = v.detach().cpu().numpy().astype(np.float32)
    return out


def _fn_layer(node, torch, F, shapes):
    """Layer for a call_function / call_method node; None = identity; 'view' handled."""
    tgt = node.target
    args = node.args
    method = node.op == "call_method"
    if tgt in (operator.add, operator.iadd, torch.add) or (method and tgt in ("add", "add_")):
        return L.Add()
    if tgt in (operator.mul, torch.mul) or (node.op == "call_method" and tgt == "mul"):
        a, b = (shapes.get(getattr(x, "name", None)) for x in args[:2])
        if a and b and len(a) == 4 and len(b) == 4 and (b == (a[0], a[1], 1, 1) or a == (b[0], b[1], 1, 1)):
            return L.ScaleChannels()
        raise UnsupportedTorchNode("multiply other than x (N, C, H, W) * s (N, C, 1, 1)")
    acts = {F.relu: "relu", torch.relu: "relu", F.relu6: "relu6", F.silu: "silu",
            torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh"}
    if node.op == "call_function" and tgt in acts:
        return L.Activation(acts[tgt])
    if node.op == "call_method" and tgt in ("relu", "sigmoid", "tanh"):
        return L.Activation(tgt)
    if tgt in (torch.flatten,) or (node.op == "call_method" and tgt == "flatten"):
        start = args[1] if len(args) > 1 else node.kwargs.get("start_dim", 0 if tgt is torch.flatten else 0)
        if start != 1:
            raise UnsupportedTorchNode("flatten other than from axis 1")
        return L.Flatten()
    if tgt is F.adaptive_avg_pool2d and args[1] in (1, (1, 1)):
        return L.GlobalAvgPool()
    if tgt is F.dropout:
        return None
    if node.op == "call_method" and tgt in ("view", "reshape"):
        dims = [int(d) for d in (args[1] if isinstance(args[1], (tuple, list)) else args[1:])]
        return L.Reshape(tuple([-1] + dims[1:]))
    raise UnsupportedTorchNode(f"function {getattr(tgt, '__name__', tgt)}")


def from_torch(module: Any, example_input: Any, *, name: str | None = None) -> Network:
    """Trace ``module`` with torch.fx on ``example_input`` and build the equivalent Network.

    Parameters
    ----------
    module : torch.nn.Module
        Put in eval mode for the trace (batch norms use their running statistics).
    example_input : torch.Tensor or ndarray of shape (batch, ...)
        Fixes the per-sample input shape.

    Raises
    ------
    ImportError
        Without torch.
    UnsupportedTorchNode
        For a node with no ipukern layer, naming the node and its op.
    """
    try:
        import torch
        import torch.fx
        import torch.nn as tnn
        import torch.nn.functional as F
    except ImportError as e:  # pragma: no cover - torch is optional
        raise ImportError("ik.from_torch needs PyTorch (pip install torch)") from e
    x = torch.as_tensor(np.asarray(example_input, dtype=np.float32)) if not torch.is_tensor(example_input) \
        else example_input.float()
    was_training = module.training
    module.eval()
    try:
        gm = torch.fx.symbolic_trace(module)
        from torch.fx.passes.shape_prop import ShapeProp
        ShapeProp(gm).propagate(x)
    finally:
        module.train(was_training)
    net = Network(name or type(module).__name__)
    env: dict[str, str] = {}
    shapes: dict[str, tuple] = {}
    params: dict[str, np.ndarray] = {}
    used: dict[str, int] = {}
    mods = dict(gm.named_modules())
    for node in gm.graph.nodes:
        meta = node.meta.get("tensor_meta")
        if meta is not None and hasattr(meta, "shape"):
            shapes[node.name] = tuple(int(s) for s in meta.shape)
        if node.op == "placeholder":
            env[node.name] = net.input(node.name, tuple(x.shape[1:]))
            continue
        if node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            net.output(*[env[o.name] for o in outs])
            continue
        if node.op == "get_attr":
            raise UnsupportedTorchNode(f"node {node.name!r} (get_attr {node.target}): tensors read "
                                       "from module attributes are not supported")
        srcs = [a for a in node.args if isinstance(a, torch.fx.Node)]
        try:
            if node.op == "call_module":
                layer, p = _mod_layer(mods[node.target], tnn, shapes.get(srcs[0].name, ()))
                base = node.target
            else:
                layer, p = _fn_layer(node, torch, F, shapes), {}
                base = node.name
        except UnsupportedTorchNode as e:
            raise UnsupportedTorchNode(f"from_torch: node {node.name!r} ({node.op} "
                                       f"{getattr(node.target, '__name__', node.target)}) is not "
                                       f"supported: {e}") from None
        if layer is None:
            env[node.name] = env[srcs[0].name]
            continue
        if isinstance(layer, L.ScaleChannels) and shapes.get(srcs[0].name, ())[2:] == (1, 1) \
                and shapes.get(srcs[1].name, (0, 0, 1, 1))[2:] != (1, 1):
            srcs = srcs[::-1]                      # s * x: the rescale is (x, s)
        k = used.get(base, 0)
        used[base] = k + 1
        lname = base if k == 0 else f"{base}_{k}"
        env[node.name] = net.add(layer, *[env[s.name] for s in srcs[:layer.n_inputs]], name=lname)
        for pn, v in p.items():
            params[f"{lname}.{pn}"] = v
    net.params = params
    return net
