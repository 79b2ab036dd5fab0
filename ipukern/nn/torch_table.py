"""What :func:`~ipukern.nn.from_torch` imports: one table of supported (target, argument)
pairs and the values each argument is honoured with.

A traced node is imported only when its target is in the table and every argument it passes
(positional, keyword, and the defaults of those it leaves out) is listed for that target with
a value the importer honours; anything else raises :class:`UnsupportedTorchNode` naming the
node, the argument and the value. A module is read by its constructor arguments (its type's
``__constants__``): one with a constant the table does not list is refused the same way, so an
argument a later torch adds cannot be dropped silently. ``table_text()`` prints the table
(the docs include it). torch itself is only touched by :func:`targets`, called by the importer.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from . import layers as L

__all__ = ["Arg", "Built", "Call", "Entry", "Refused", "UnsupportedTorchNode", "module_entries",
           "table_text", "targets"]

#: an argument without a default
REQUIRED = object()


class UnsupportedTorchNode(ValueError):
    """A traced node, or one of its arguments, with no ipukern equivalent."""


class Refused(Exception):
    """An argument value the importer cannot honour (turned into UnsupportedTorchNode)."""

    def __init__(self, arg: str, value: Any, why: str):
        super().__init__(f"argument {arg}={_show(value)}: {why}")


def _show(v: Any) -> str:
    return f"<tensor {v.name}>" if type(v).__name__ == "Node" else repr(v)


@dataclass(frozen=True)
class Arg:
    """One argument of a target: its name, default, the values honoured (the docs' words) and
    the check of a value alone (None: every value; shape-dependent checks are the builder's)."""

    name: str
    default: Any = REQUIRED
    honoured: str = "any"
    ok: Callable[[Any], bool] | None = None


@dataclass
class Call:
    """A node's arguments bound to their names, with the traced shapes."""

    node: Any
    bound: dict[str, Any]
    shapes: dict[str, tuple]
    module: Any = None

    @property
    def out(self) -> tuple:
        return self.shapes.get(self.node.name, ())

    def shape(self, arg: str) -> tuple:
        """Traced shape of a tensor argument; Refused for anything else (a scalar, a size)."""
        v = self.bound[arg]
        s = self.shapes.get(getattr(v, "name", None)) if type(v).__name__ == "Node" else None
        if s is None:
            raise Refused(arg, v, "only tensor operands are imported (no ipukern layer takes a "
                                  "Python scalar or a shape query here)")
        return s


@dataclass(frozen=True)
class Built:
    """What a node becomes: ``layer`` over ``srcs`` (None: the input itself), its params, and
    how torch's result relates to the input's storage (for in-place aliasing): "new", "alias"
    (the same tensor), "view" (shares the storage, another shape or order), "contiguous"
    (alias of a contiguous input, else a copy)."""

    layer: L.Layer | None
    srcs: tuple = ()
    params: dict = field(default_factory=dict)
    storage: str = "new"


@dataclass(frozen=True)
class Entry:
    """A supported target: the argument table, the builder, whether the target mutates its
    first argument, whether the last Arg gathers the remaining positionals (``view(*shape)``)."""

    name: str
    args: tuple[Arg, ...]
    build: Callable[[Call], Built]
    inplace: bool = False
    varargs: bool = False


# --------------------------------------------------------------------------- value checks
def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is(*values: Any) -> Callable[[Any], bool]:
    return lambda v: any(v is x or (type(v) is type(x) and v == x) for x in values)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _dim(call: Call, arg: str, rank: int) -> int:
    v = call.bound[arg]
    if not isinstance(v, int) or isinstance(v, bool) or not -rank <= v < rank:
        raise Refused(arg, v, f"not an axis of a rank-{rank} tensor")
    return v % rank


# --------------------------------------------------------------------------- builders
def _elementwise(sign: float) -> Callable[[Call], Built]:
    def build(call: Call) -> Built:
        a, b = call.shape("input"), call.shape("other")
        if a != b:
            raise Refused("other", call.bound["other"], f"shape {b} against {a}: broadcasting "
                                                        "is not imported (equal shapes only)")
        alpha = call.bound.get("alpha", 1)
        return Built(L.Add(alpha=sign * float(alpha)), (call.bound["input"], call.bound["other"]))
    return build


def _mul(call: Call) -> Built:
    a, b = call.shape("input"), call.shape("other")
    x, s = call.bound["input"], call.bound["other"]
    if len(a) == 4 and len(b) == 4 and a[2:] == (1, 1) and b[2:] != (1, 1):
        a, b, x, s = b, a, s, x                 # s * x: the rescale is (x, s)
    if not (len(a) == 4 and b == (a[0], a[1], 1, 1)):
        raise Refused("other", call.bound["other"], f"shape {call.shape('other')} against "
                      f"{call.shape('input')}: only x (N, C, H, W) * s (N, C, 1, 1) is imported")
    return Built(L.ScaleChannels(), (x, s))


def _act(kind: str) -> Callable[[Call], Built]:
    def build(call: Call) -> Built:
        call.shape("input")
        return Built(L.Activation(kind), (call.bound["input"],))
    return build


def _identity(call: Call) -> Built:
    call.shape("input")
    return Built(None, (call.bound["input"],), storage="alias")


def _dropout(call: Call) -> Built:
    if call.bound["training"] and call.bound["p"] != 0:
        raise Refused("training", True, f"dropout with p={call.bound['p']!r} in training mode: the "
                      "simulator has no random stream matching torch's (import eval-mode dropout)")
    return _identity(call)


def _flatten(call: Call) -> Built:
    s = call.shape("input")
    r = max(len(s), 1)
    a, b = _dim(call, "start_dim", r), _dim(call, "end_dim", r)
    if a == b:
        return Built(None, (call.bound["input"],), storage="alias")   # torch returns self
    if a == 0:
        raise Refused("start_dim", call.bound["start_dim"], "merges the batch axis")
    lay = L.Flatten() if (a, b) == (1, r - 1) else L.Reshape((-1,) + call.out[1:])
    return Built(lay, (call.bound["input"],), storage="view")


def _reshape(call: Call) -> Built:
    s, out = call.shape("input"), call.out
    if not out or out[0] != s[0]:
        raise Refused("shape", call.bound["shape"], f"{s} -> {out} does not keep the batch axis")
    return Built(L.Reshape((-1,) + out[1:]), (call.bound["input"],), storage="view")


def _permute_of(call: Call, perm: tuple[int, ...], arg: str) -> Built:
    if perm[0] != 0:
        raise Refused(arg, call.bound[arg], "moves the batch axis")
    if perm == tuple(range(len(perm))):
        return Built(None, (call.bound["input"],), storage="view")
    return Built(L.Permute(perm), (call.bound["input"],), storage="view")


def _permute(call: Call) -> Built:
    r = len(call.shape("input"))
    dims = call.bound["dims"]
    if not isinstance(dims, (tuple, list)) or len(dims) != r:
        raise Refused("dims", dims, f"not a permutation of {r} axes")
    perm = tuple(_dim(Call(call.node, {"dims": d}, call.shapes), "dims", r) for d in dims)
    if sorted(perm) != list(range(r)):
        raise Refused("dims", dims, f"not a permutation of {r} axes")
    return _permute_of(call, perm, "dims")


def _transpose(call: Call) -> Built:
    r = len(call.shape("input"))
    a, b = _dim(call, "dim0", r), _dim(call, "dim1", r)
    perm = list(range(r))
    perm[a], perm[b] = perm[b], perm[a]
    return _permute_of(call, tuple(perm), "dim0" if a == 0 else "dim1")


def _contiguous(call: Call) -> Built:
    call.shape("input")
    return Built(None, (call.bound["input"],), storage="contiguous")


def _size(call: Call) -> Built:
    call.shape("input")
    return Built(None, (), storage="size")


def _softmax(call: Call) -> Built:
    r = len(call.shape("input"))
    if call.bound["dim"] is None or _dim(call, "dim", r) != r - 1:
        raise Refused("dim", call.bound["dim"], "softmax over an axis other than the last")
    return Built(L.Softmax(), (call.bound["input"],))


def _gelu(call: Call) -> Built:
    call.shape("input")
    return Built(L.GELU(), (call.bound["input"],))


def _pool_window(call: Call) -> tuple:
    """(kernel, stride, padding) as pairs, and ceil_mode refused where it adds a window."""
    b = call.bound
    k = _pair(b["kernel_size"])
    st = k if b["stride"] is None or b["stride"] == [] else _pair(b["stride"])
    p = _pair(b["padding"])
    s = call.shape("input")
    if len(s) != 4:
        raise Refused("input", b["input"], f"shape {s}: pools take (N, C, H, W)")
    floor = tuple((s[2 + i] + 2 * p[i] - k[i]) // st[i] + 1 for i in range(2))
    if b["ceil_mode"] and tuple(call.out[2:]) != floor:
        raise Refused("ceil_mode", True, f"adds a partial window ({call.out[2:]} outputs, not "
                      f"{floor}); ipukern pools by whole windows")
    return k, st, p


def _maxpool(call: Call) -> Built:
    k, st, p = _pool_window(call)
    return Built(L.MaxPool2d(k, st, p), (call.bound["input"],))


def _avgpool(call: Call) -> Built:
    k, st, p = _pool_window(call)
    b = call.bound
    d = b["divisor_override"]
    if d is not None and d != k[0] * k[1]:
        raise Refused("divisor_override", d, f"ipukern's average pool divides by the window "
                      f"size {k[0] * k[1]}")
    if d is None and not b["count_include_pad"] and p != (0, 0):
        raise Refused("count_include_pad", False, f"with padding {p}: ipukern's average pool "
                      "counts the padding (as torch's default)")
    return Built(L.AvgPool2d(k, st, p), (call.bound["input"],))


def _adaptive(kind: str) -> Callable[[Call], Built]:
    def build(call: Call) -> Built:
        s = call.shape("input")
        if len(s) != 4:
            raise Refused("input", call.bound["input"], f"shape {s}: pools take (N, C, H, W)")
        o = call.bound["output_size"]
        o = (o, o) if isinstance(o, int) or o is None else tuple(o)
        o = tuple(s[2 + i] if o[i] is None else o[i] for i in range(2))
        if any(not isinstance(v, int) or v < 1 or s[2 + i] % v for i, v in enumerate(o)):
            raise Refused("output_size", call.bound["output_size"], f"on a {s[2]}x{s[3]} input: "
                          "windows of unequal size (only sizes dividing the input)")
        if kind == "avg" and o == (1, 1):
            return Built(L.GlobalAvgPool(), (call.bound["input"],))
        k = (s[2] // o[0], s[3] // o[1])
        lay = L.AvgPool2d(k, k, 0) if kind == "avg" else L.MaxPool2d(k, k, 0)
        return Built(lay, (call.bound["input"],))
    return build


# --------------------------------------------------------------------------- modules
def _state(mod, names) -> dict[str, np.ndarray]:
    return {n: getattr(mod, n).detach().cpu().numpy().astype(np.float32) for n in names
            if getattr(mod, n, None) is not None}


def _conv(call: Call) -> Built:
    b, mod = call.bound, call.module
    k, d = _pair(b["kernel_size"]), _pair(b["dilation"])
    p = b["padding"]
    if p == "valid":
        p = (0, 0)
    elif p == "same":
        total = [d[i] * (k[i] - 1) for i in range(2)]
        if any(t % 2 for t in total):
            raise Refused("padding", p, "'same' with an even effective kernel pads one side more")
        p = (total[0] // 2, total[1] // 2)
    layer = L.Conv2d(b["in_channels"], b["out_channels"], k, b["stride"], p, d, b["groups"],
                     bias=mod.bias is not None)
    return Built(layer, (b["input"],), _state(mod, ("weight", "bias")))


def _batchnorm(call: Call) -> Built:
    mod, c = call.module, call.bound["num_features"]
    p = _state(mod, ("weight", "bias", "running_mean", "running_var"))
    p.setdefault("weight", np.ones(c, np.float32))   # affine=False: x-hat itself
    p.setdefault("bias", np.zeros(c, np.float32))
    return Built(L.BatchNorm2d(c, call.bound["eps"]), (call.bound["input"],), p)


def _linear(call: Call) -> Built:
    mod = call.module
    layer = L.Linear(call.bound["in_features"], call.bound["out_features"], mod.bias is not None)
    return Built(layer, (call.bound["input"],), _state(mod, ("weight", "bias")))


def _layernorm(call: Call) -> Built:
    shp = tuple(call.bound["normalized_shape"])
    if len(shp) != 1:
        raise Refused("normalized_shape", shp, "over more than the last axis")
    p = _state(call.module, ("weight", "bias"))
    p.setdefault("weight", np.ones(shp, np.float32))
    p.setdefault("bias", np.zeros(shp, np.float32))
    return Built(L.LayerNorm(shp[0], call.bound["eps"]), (call.bound["input"],), p)


_X = Arg("input")
_INPLACE = Arg("inplace", False, "True or False (the aliasing is imported)", _bool)
_POOL = (Arg("kernel_size"), Arg("stride", None), Arg("padding", 0),
         Arg("ceil_mode", False, "False, or True where it adds no window", _bool))
_MAXPOOL = (*_POOL, Arg("dilation", 1, "1", _is(1, (1, 1))), Arg("return_indices", False, "False",
                                                                   _is(False)))
_AVGPOOL = (*_POOL, Arg("count_include_pad", True, "True, or False without padding", _bool),
            Arg("divisor_override", None, "None or the window size"))
_ADAPT = (Arg("output_size", honoured="sizes dividing the input"),)
_ADAPT_MAX = (*_ADAPT, Arg("return_indices", False, "False", _is(False)))


@cache
def module_entries(tnn: Any) -> dict[type, Entry]:
    """Module type -> Entry; its args (after ``input``) are the type's ``__constants__``."""
    ign = "any (inference)"
    return {
        tnn.Conv2d: Entry("nn.Conv2d", (_X, Arg("in_channels"), Arg("out_channels"), Arg("kernel_size"),
                                       Arg("stride"), Arg("padding", honoured="ints, 'valid', 'same' (odd "
                                                                              "effective kernel)"),
                                       Arg("dilation"), Arg("groups"),
                                       Arg("padding_mode", "zeros", "'zeros'", _is("zeros")),
                                       Arg("output_padding", (0, 0), "0", _is(0, (0, 0)))), _conv),
        tnn.BatchNorm2d: Entry("nn.BatchNorm2d (eval: running statistics)",
                               (_X, Arg("num_features"), Arg("eps"), Arg("momentum", honoured=ign),
                                Arg("affine", True, "True or False (weight 1, bias 0)", _bool),
                                Arg("track_running_stats", True, "True", _is(True))), _batchnorm),
        tnn.Linear: Entry("nn.Linear", (_X, Arg("in_features"), Arg("out_features")), _linear),
        tnn.LayerNorm: Entry("nn.LayerNorm", (_X, Arg("normalized_shape", honoured="one axis"), Arg("eps"),
                                              Arg("elementwise_affine", True, "True or False", _bool)),
                             _layernorm),
        tnn.MaxPool2d: Entry("nn.MaxPool2d", (_X, *_MAXPOOL), _maxpool),
        tnn.AvgPool2d: Entry("nn.AvgPool2d", (_X, *_AVGPOOL), _avgpool),
        tnn.AdaptiveAvgPool2d: Entry("nn.AdaptiveAvgPool2d", (_X, *_ADAPT), _adaptive("avg")),
        tnn.AdaptiveMaxPool2d: Entry("nn.AdaptiveMaxPool2d", (_X, *_ADAPT_MAX), _adaptive("max")),
        tnn.Flatten: Entry("nn.Flatten", (_X, Arg("start_dim", honoured="not 0 (the batch axis)"),
                                          Arg("end_dim")), _flatten),
        tnn.Softmax: Entry("nn.Softmax", (_X, Arg("dim", honoured="the last axis")), _softmax),
        tnn.Dropout: Entry("nn.Dropout (eval: identity)", (_X, Arg("p"), _INPLACE), _identity),
        tnn.Identity: Entry("nn.Identity", (_X,), _identity),
        tnn.ReLU: Entry("nn.ReLU", (_X, _INPLACE), _act("relu")),
        tnn.ReLU6: Entry("nn.ReLU6", (_X, Arg("min_val", 0.0, "0", _is(0.0, 0)),
                                      Arg("max_val", 6.0, "6", _is(6.0, 6)), _INPLACE), _act("relu6")),
        tnn.SiLU: Entry("nn.SiLU", (_X, _INPLACE), _act("silu")),
        tnn.GELU: Entry("nn.GELU", (_X, Arg("approximate", "none", "'tanh' (popnn's form)",
                                            _is("tanh"))), _gelu),
        tnn.Sigmoid: Entry("nn.Sigmoid", (_X,), _act("sigmoid")),
        tnn.Tanh: Entry("nn.Tanh", (_X,), _act("tanh")),
    }


def _fn_entries(torch: Any, F: Any) -> list[tuple[tuple, Entry]]:
    """(targets, Entry) for call_function targets (callables) and call_method ones (names)."""
    import operator
    alpha = Arg("alpha", 1, "finite numbers", _number)
    add_args, sub_args = (_X, Arg("other"), alpha), (_X, Arg("other"), alpha)
    two = (_X, Arg("other"))
    one = (_X,)
    relu_f = (_X, _INPLACE)
    drop = (_X, Arg("p", 0.5, "any"), Arg("training", True, "False (or p=0)", _bool), _INPLACE)
    out = []
    out.append(((operator.add,), Entry("operator.add (a + b)", two, _elementwise(1.0))))
    out.append(((torch.add, "add"), Entry("torch.add / Tensor.add", add_args, _elementwise(1.0))))
    out.append(((operator.iadd, "add_"), Entry("Tensor.add_ (in place)", add_args, _elementwise(1.0),
                                               inplace=True)))
    out.append(((operator.sub,), Entry("operator.sub (a - b)", two, _elementwise(-1.0))))
    out.append(((torch.sub, "sub"), Entry("torch.sub / Tensor.sub", sub_args, _elementwise(-1.0))))
    out.append(((operator.isub, "sub_"), Entry("Tensor.sub_ (in place)", sub_args, _elementwise(-1.0),
                                               inplace=True)))
    out.append(((operator.mul, torch.mul, "mul"), Entry("a * b, torch.mul, Tensor.mul", two, _mul)))
    out.append(((operator.imul, "mul_"), Entry("Tensor.mul_ (in place)", two, _mul, inplace=True)))
    for kind, fns, meths in (("relu", (torch.relu,), ("relu",)), ("sigmoid", (torch.sigmoid, F.sigmoid),
                             ("sigmoid",)), ("tanh", (torch.tanh, F.tanh), ("tanh",))):
        out.append((fns + meths, Entry(f"torch.{kind} / Tensor.{kind}", one, _act(kind))))
        out.append(((getattr(torch, kind + "_"), kind + "_"),
                    Entry(f"torch.{kind}_ / Tensor.{kind}_ (in place)", one, _act(kind), inplace=True)))
    out.append(((F.relu,), Entry("F.relu", relu_f, _act("relu"))))
    out.append(((F.relu6,), Entry("F.relu6", relu_f, _act("relu6"))))
    out.append(((F.silu,), Entry("F.silu", relu_f, _act("silu"))))
    out.append(((F.gelu,), Entry("F.gelu", (_X, Arg("approximate", "none", "'tanh' (popnn's form)",
                                                    _is("tanh"))), _gelu)))
    out.append(((F.dropout,), Entry("F.dropout (identity)", drop, _dropout)))
    out.append(((torch.flatten, "flatten"), Entry("torch.flatten / Tensor.flatten",
                                                  (_X, Arg("start_dim", 0, "not 0 (the batch axis)"),
                                                   Arg("end_dim", -1)), _flatten)))
    shape = Arg("shape", REQUIRED, "keeping the batch axis")
    out.append((("view", "reshape"), Entry("Tensor.view / Tensor.reshape", (_X, shape), _reshape,
                                           varargs=True)))
    out.append(((torch.reshape,), Entry("torch.reshape", (_X, shape), _reshape)))
    dims = Arg("dims", REQUIRED, "keeping the batch axis first")
    out.append((("permute",), Entry("Tensor.permute", (_X, dims), _permute, varargs=True)))
    out.append(((torch.permute,), Entry("torch.permute", (_X, dims), _permute)))
    out.append(((torch.transpose, "transpose"), Entry("torch.transpose / Tensor.transpose",
                                                      (_X, Arg("dim0", honoured="not the batch axis"),
                                                       Arg("dim1", honoured="not the batch axis")),
                                                      _transpose)))
    out.append((("contiguous",), Entry("Tensor.contiguous", (_X, Arg(
        "memory_format", torch.contiguous_format, "torch.contiguous_format",
        _is(torch.contiguous_format))), _contiguous)))
    out.append((("size",), Entry("Tensor.size (for view/reshape shapes)", (_X, Arg("dim", None)), _size)))
    out.append(((F.softmax, "softmax"), Entry("F.softmax / Tensor.softmax",
                                              (_X, Arg("dim", None, "the last axis"),
                                               Arg("_stacklevel", 3, "any"),
                                               Arg("dtype", None, "None", _is(None))), _softmax)))
    out.append(((F.max_pool2d,), Entry("F.max_pool2d", (_X, *_MAXPOOL), _maxpool)))
    out.append(((F.avg_pool2d,), Entry("F.avg_pool2d", (_X, *_AVGPOOL), _avgpool)))
    out.append(((F.adaptive_avg_pool2d,), Entry("F.adaptive_avg_pool2d", (_X, *_ADAPT), _adaptive("avg"))))
    out.append(((F.adaptive_max_pool2d,), Entry("F.adaptive_max_pool2d", (_X, *_ADAPT_MAX),
                                                _adaptive("max"))))
    return out


@cache
def targets(torch: Any) -> tuple[dict[Any, Entry], dict[str, Entry]]:
    """(call_function target -> Entry, call_method name -> Entry)."""
    import torch.nn.functional as F
    fns: dict[Any, Entry] = {}
    meths: dict[str, Entry] = {}
    for tgts, e in _fn_entries(torch, F):
        for t in tgts:
            (meths if isinstance(t, str) else fns)[t] = e
    return fns, meths


def table_text() -> str:
    """The table as text: one line per supported target, each argument with the values
    honoured (``python docs/generate.py torch_table``)."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F
    rows = [e for _, e in _fn_entries(torch, F)] + list(module_entries(tnn).values())
    lines = []
    for e in rows:
        args = [f"{a.name}: {a.honoured}" for a in e.args[1:]]
        lines.append(f"{e.name}\n    " + ("; ".join(args) if args else "(no arguments)"))
    return "\n".join(lines) + "\n"
