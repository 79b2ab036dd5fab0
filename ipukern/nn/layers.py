"""The layers a :class:`~ipukern.nn.Network` is built from.

A layer is a small description (hyper-parameters) with:

- ``out_shape(in_shapes)`` - shape inference on full shapes (batch first);
- ``param_shapes(in_shapes)`` and ``init_params(in_shapes, rng)`` - its parameters, named
  and shaped as in PyTorch;
- ``forward(ctx, layouts, in_shapes)`` - the planned forward pass, an
  :class:`~ipukern.nn.ops.OpPlan`;
- ``backward(ctx, ...)`` - the training passes (backward-data, weight-update): the
  extension point ``ipukern.nn.training`` fills (see :mod:`ipukern.nn`).

``key()`` is the hashable signature used to share plans between layers of equal shape.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..conv import ConvParams, normalize_amp, pair
from ..dtypes import canonical_dtype, partials_dtype
from ..machine import get_machine
from .convops import conv_plan, matmul_plan
from .elementwise import exp_plan, mul_plan, select_plan, softplus_plan
from .ops import (
    OpPlan,
    activation_plan,
    add_plan,
    affine_plan,
    channel_scale_plan,
    gather_plan,
    layernorm_plan,
    loss_plan,
    permute_plan,
    pool_plan,
    reshape_plan,
    softmax_plan,
)

__all__ = [
    "plan_context",
    "GELU",
    "Activation",
    "Add",
    "AvgPool2d",
    "BatchNorm2d",
    "Conv2d",
    "Embedding",
    "Exp",
    "Flatten",
    "GlobalAvgPool",
    "Layer",
    "LayerNorm",
    "Linear",
    "MatMul",
    "MaxPool2d",
    "Mul",
    "Permute",
    "PlanContext",
    "ReLU",
    "ReLU6",
    "Reshape",
    "SELU",
    "ScaleChannels",
    "Select",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "SoftmaxCrossEntropy",
    "Softplus",
    "Tanh",
]


@dataclass(frozen=True)
class PlanContext:
    """What a plan depends on besides shapes: machine, dtype, partials, and the conv
    planner's ``available_memory_proportion`` (None: PopLibs' default)."""

    machine: Any
    dtype: str
    partials: str
    amp: float | None = None

    @property
    def n_tiles(self) -> int:
        return self.machine.n_tiles


def plan_context(dtype: Any, partials: Any, machine: Any, amp: float | None = None) -> PlanContext:
    """The :class:`PlanContext` of the public entry points' arguments: ``dtype`` and
    ``partials`` by any accepted spelling (float32 networks accumulate in float),
    ``machine`` a MachineSpec or preset name, ``amp`` the planner's
    ``available_memory_proportion`` (validated; None: PopLibs' default)."""
    dt = canonical_dtype(dtype)
    if partials in ("half", "float16", "fp16") and dt == "float32":
        partials = "float"
    m = get_machine(machine)
    amp = normalize_amp(amp)          # a clear error for a bad proportion; one key per value
    return PlanContext(m, dt, partials_dtype(partials, dt), amp)


class Layer:
    """Base class. Subclasses set ``op`` and implement the methods below."""

    op = "layer"
    n_inputs = 1
    #: True when the plan depends on the producer's layout (ops working in place on it)
    layout_sensitive = False
    #: inputs that are host data (token ids, labels), not tile tensors
    host_inputs: tuple[int, ...] = ()

    def key(self) -> tuple:
        return (type(self).__name__,) + tuple(sorted((k, _hashable(v)) for k, v in vars(self).items()))

    def out_shape(self, shapes: Sequence[tuple]) -> tuple:
        return tuple(shapes[0])

    def param_shapes(self, shapes: Sequence[tuple]) -> dict[str, tuple]:
        return {}

    def init_params(self, shapes: Sequence[tuple], rng: np.random.Generator) -> dict[str, np.ndarray]:
        """PyTorch-like default initialisation (uniform in +-1/sqrt(fan_in))."""
        out = {}
        for name, shp in self.param_shapes(shapes).items():
            fan_in = int(np.prod(shp[1:])) if len(shp) > 1 else int(shp[0])
            b = 1.0 / np.sqrt(max(fan_in, 1))
            out[name] = rng.uniform(-b, b, size=shp).astype(np.float32)
        return out

    def forward(self, ctx: PlanContext, layouts: list, shapes: Sequence[tuple]) -> OpPlan:
        raise NotImplementedError

    def op_params(self, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The parameters as the forward plan's ``run`` takes them (default: unchanged)."""
        return params

    def backward(self, ctx: PlanContext, fwd: OpPlan, layouts: list, shapes: Sequence[tuple]) -> list[OpPlan]:
        """The backward-data and weight-update passes (``pass_`` "bwd" / "wu"). Provided by
        :mod:`ipukern.nn.training`; the forward-only layer set raises."""
        raise NotImplementedError(f"{type(self).__name__}: backward passes are provided by "
                                  "ipukern.nn.training")

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"

    def __repr__(self) -> str:
        return self.describe()


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


def _check_rank(layer: Layer, shape: tuple, rank: int, what: str) -> None:
    if len(shape) != rank:
        raise ValueError(f"{layer.describe()} expects a rank-{rank} input ({what}), got shape {shape}")


# --------------------------------------------------------------------------- conv / norm
class Conv2d(Layer):
    """2-D convolution (any groups), PyTorch semantics; params ``weight`` (and ``bias``)."""

    op = "conv2d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = False):
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = pair(kernel_size, "kernel_size", minimum=1)
        self.stride = pair(stride, "stride", minimum=1)
        self.padding = pair(padding, "padding", minimum=0)
        self.dilation = pair(dilation, "dilation", minimum=1)
        self.groups = int(groups)
        self.bias = bool(bias)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"Conv2d: channels {self.in_channels}->{self.out_channels} are not "
                             f"divisible by groups={self.groups}")

    def weight_shape(self) -> tuple:
        return (self.out_channels, self.in_channels // self.groups) + self.kernel_size

    def conv_params(self, shape, ctx=None) -> ConvParams:
        """The :class:`~ipukern.conv.ConvParams` of this layer on an input of ``shape`` (N, C, H, W)."""
        _check_rank(self, shape, 4, "N, C, H, W")
        if shape[1] != self.in_channels:
            raise ValueError(f"{self.describe()} expects {self.in_channels} input channels, got "
                             f"shape {shape}")
        return ConvParams.from_shapes(shape, self.weight_shape(), stride=self.stride,
                                      padding=self.padding, dilation=self.dilation,
                                      groups=self.groups)

    def out_shape(self, shapes):
        return self.conv_params(tuple(shapes[0])).output_shape

    def param_shapes(self, shapes):
        ps = {"weight": self.weight_shape()}
        if self.bias:
            ps["bias"] = (self.out_channels,)
        return ps

    def init_params(self, shapes, rng):
        p = super().init_params(shapes, rng)
        if self.bias:
            fan_in = int(np.prod(self.weight_shape()[1:]))
            p["bias"] = (rng.uniform(-1, 1, self.out_channels) / np.sqrt(fan_in)).astype(np.float32)
        return p

    def forward(self, ctx, layouts, shapes, *, bias: bool | None = None):
        return conv_plan(ctx.machine, shapes[0], self.weight_shape(), stride=self.stride,
                         padding=self.padding, dilation=self.dilation, groups=self.groups,
                         dtype=ctx.dtype, partials=ctx.partials,
                         bias=self.bias if bias is None else bias, amp=ctx.amp)


class BatchNorm2d(Layer):
    """Batch norm, inference: ``(x - running_mean) / sqrt(running_var + eps) * weight + bias``.

    Applied as a per-channel multiply-add in the producer's layout, or folded into the
    preceding conv (its weights scaled, a bias added) when the network is compiled with
    ``fold_bn=True`` (the default) and the conv feeds only this layer.
    """

    op = "batchnorm"
    layout_sensitive = True
    #: training statistics by PopLibs' stable algorithm (mean first, then the centred sum
    #: of squares; :mod:`ipukern.nn.bn_stable`); inference is unaffected
    stable = False

    def __init__(self, num_features: int, eps: float = 1e-5, stable: bool = False):
        self.num_features = int(num_features)
        self.eps = float(eps)
        if not isinstance(stable, bool):
            raise TypeError(f"stable must be a bool, got {stable!r}")
        if stable:                  # set only when on: descriptions of default layers unchanged
            self.stable = True

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        if len(s) < 2 or s[1] != self.num_features:
            raise ValueError(f"{self.describe()} expects {self.num_features} channels on axis 1, got {s}")
        return s

    def param_shapes(self, shapes):
        c = (self.num_features,)
        return {"weight": c, "bias": c, "running_mean": c, "running_var": c}

    def init_params(self, shapes, rng):
        c = self.num_features
        return {"weight": rng.uniform(0.5, 1.5, c).astype(np.float32),
                "bias": rng.uniform(-0.2, 0.2, c).astype(np.float32),
                "running_mean": rng.uniform(-0.2, 0.2, c).astype(np.float32),
                "running_var": rng.uniform(0.5, 1.5, c).astype(np.float32)}

    def scale_shift(self, p: dict) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (scale, shift) of the inference transform, in float64."""
        s = np.asarray(p["weight"], np.float64) / np.sqrt(np.asarray(p["running_var"], np.float64) + self.eps)
        return s, np.asarray(p["bias"], np.float64) - np.asarray(p["running_mean"], np.float64) * s

    def op_params(self, params):
        s, shift = self.scale_shift(params)
        return {"scale": s.astype(np.float32), "shift": shift.astype(np.float32)}

    def forward(self, ctx, layouts, shapes):
        s = tuple(shapes[0])
        inner = int(np.prod(s[2:], dtype=np.int64)) if len(s) > 2 else 1
        return affine_plan(ctx.machine, layouts[0], self.num_features, inner, scale=True,
                           shift=True, name="batchnorm")


class Activation(Layer):
    """Element-wise non-linearity: relu, relu6, silu (swish), gelu (tanh form), sigmoid, tanh,
    selu."""

    op = "activation"
    layout_sensitive = True

    def __init__(self, kind: str):
        from .cycles import ACTIVATIONS
        if kind not in ACTIVATIONS:
            raise ValueError(f"unknown activation {kind!r}; choose from {ACTIVATIONS}")
        self.kind = kind

    def forward(self, ctx, layouts, shapes):
        return activation_plan(ctx.machine, layouts[0], self.kind)


def ReLU() -> Activation:
    return Activation("relu")


def ReLU6() -> Activation:
    return Activation("relu6")


def SiLU() -> Activation:
    return Activation("silu")


def GELU() -> Activation:
    return Activation("gelu")


def Sigmoid() -> Activation:
    return Activation("sigmoid")


def Tanh() -> Activation:
    return Activation("tanh")


def SELU() -> Activation:
    return Activation("selu")


class Add(Layer):
    """Residual add of two tensors of the same shape, ``a + alpha * b`` (optionally followed
    by an activation). ``alpha`` is torch.add's: -1 is a subtraction (popops scaledAdd)."""

    op = "add"
    n_inputs = 2
    layout_sensitive = True
    #: the second operand's scale (set on the instance only when not 1, so descriptions and
    #: plan keys of plain residual adds are unchanged)
    alpha = 1.0

    def __init__(self, act: str | None = None, alpha: float = 1.0):
        self.act = act
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not np.isfinite(alpha):
            raise ValueError(f"Add: alpha must be a finite number, got {alpha!r}")
        if float(alpha) != 1.0:
            self.alpha = float(alpha)

    def out_shape(self, shapes):
        if tuple(shapes[0]) != tuple(shapes[1]):
            raise ValueError(f"Add: operand shapes differ: {tuple(shapes[0])} and {tuple(shapes[1])}")
        return tuple(shapes[0])

    def forward(self, ctx, layouts, shapes):
        return add_plan(ctx.machine, layouts[0], shapes[1], self.act, self.alpha)


class Mul(Layer):
    """Element-wise product of two tensors of the same shape."""

    op = "mul"
    n_inputs = 2
    layout_sensitive = True

    def out_shape(self, shapes):
        if tuple(shapes[0]) != tuple(shapes[1]):
            raise ValueError(f"Mul: operand shapes differ: {tuple(shapes[0])} and {tuple(shapes[1])}")
        return tuple(shapes[0])

    def forward(self, ctx, layouts, shapes):
        return mul_plan(ctx.machine, layouts[0], shapes[1])


class Exp(Layer):
    """``exp(scale * x)`` element-wise (a VAE's ``std = exp(0.5 * logvar)``)."""

    op = "exp"
    layout_sensitive = True

    def __init__(self, scale: float = 1.0):
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not np.isfinite(scale):
            raise ValueError(f"Exp: scale must be a finite number, got {scale!r}")
        self.scale = float(scale)

    def forward(self, ctx, layouts, shapes):
        return exp_plan(ctx.machine, layouts[0], self.scale)


class Softplus(Layer):
    """``log(1 + exp(x))`` element-wise, as TensorFlow computes it (``torch.nn.Softplus()``
    to float32 rounding): an HMC step's Bernoulli log-likelihood ``y z - softplus(z)``."""

    op = "softplus"
    layout_sensitive = True

    def forward(self, ctx, layouts, shapes):
        return softplus_plan(ctx.machine, layouts[0])


class Select(Layer):
    """``where(a < b, x, y)`` of four tensors of one shape (``torch.where(a < b, x, y)``): a
    Metropolis accept, ``log u < log accept ratio`` choosing the proposal or the current
    state. Forward only (no gradient flows through a compare)."""

    op = "select"
    n_inputs = 4
    layout_sensitive = True

    def out_shape(self, shapes):
        if len({tuple(s) for s in shapes}) != 1:
            raise ValueError(f"Select: operand shapes differ: {[tuple(s) for s in shapes]}")
        return tuple(shapes[0])

    def forward(self, ctx, layouts, shapes):
        return select_plan(ctx.machine, layouts[0], shapes)


# --------------------------------------------------------------------------- pooling
class _Pool(Layer):
    kind = "max"
    #: a window covering the whole field is reduced where the producer left the data
    layout_sensitive = True

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        self.kernel_size = pair(kernel_size, "kernel_size", minimum=1)
        self.stride = pair(stride if stride is not None else kernel_size, "stride", minimum=1)
        self.padding = pair(padding, "padding", minimum=0)

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        _check_rank(self, s, 4, "N, C, H, W")
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        ho, wo = (s[2] + 2 * ph - kh) // sh + 1, (s[3] + 2 * pw - kw) // sw + 1
        if ho < 1 or wo < 1:
            raise ValueError(f"{self.describe()}: window larger than the padded input {s}")
        return (s[0], s[1], ho, wo)

    def forward(self, ctx, layouts, shapes):
        return pool_plan(ctx.machine, shapes[0], ctx.dtype, self.kind, self.kernel_size, self.stride,
                         self.padding, src=layouts[0])


class MaxPool2d(_Pool):
    """Max pooling (PyTorch semantics, padding counts as -inf)."""

    op = "maxpool"
    kind = "max"


class AvgPool2d(_Pool):
    """Average pooling (PyTorch semantics with count_include_pad=True)."""

    op = "avgpool"
    kind = "avg"


class GlobalAvgPool(Layer):
    """Mean over H and W: (N, C, H, W) -> (N, C, 1, 1)."""

    op = "global_avgpool"
    #: popops::reduce on the tiles holding the producer's layout
    layout_sensitive = True

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        _check_rank(self, s, 4, "N, C, H, W")
        return (s[0], s[1], 1, 1)

    def forward(self, ctx, layouts, shapes):
        return pool_plan(ctx.machine, shapes[0], ctx.dtype, "avg", None, None, None, src=layouts[0])


# --------------------------------------------------------------------------- views
class Reshape(Layer):
    """Reinterpret the elements with a new shape (one -1 allowed); no data moves."""

    op = "reshape"
    layout_sensitive = True

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(s) for s in shape)
        if sum(s == -1 for s in self.shape) > 1:
            raise ValueError(f"Reshape: at most one -1 in {self.shape}")

    def out_shape(self, shapes):
        n = int(np.prod(shapes[0]))
        known = int(np.prod([s for s in self.shape if s != -1]))
        if -1 in self.shape:
            if known == 0 or n % known:
                raise ValueError(f"Reshape: cannot view {tuple(shapes[0])} as {self.shape}")
            return tuple(n // known if s == -1 else s for s in self.shape)
        if known != n:
            raise ValueError(f"Reshape: cannot view {tuple(shapes[0])} ({n} elements) as {self.shape}")
        return self.shape

    def forward(self, ctx, layouts, shapes):
        return reshape_plan(ctx.machine, layouts[0], self.out_shape(shapes))


def Flatten() -> Flatten_:
    """(N, ...) -> (N, prod(...))."""
    return Flatten_()


class Flatten_(Layer):
    op = "flatten"
    layout_sensitive = True

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        return (s[0], int(np.prod(s[1:])))

    def forward(self, ctx, layouts, shapes):
        return reshape_plan(ctx.machine, layouts[0], self.out_shape(shapes))


class Permute(Layer):
    """Transpose the axes (a real rearrangement exchange)."""

    op = "permute"

    def __init__(self, perm: Sequence[int]):
        self.perm = tuple(int(p) for p in perm)

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        if sorted(self.perm) != list(range(len(s))):
            raise ValueError(f"Permute{self.perm} does not fit an input of shape {s}")
        return tuple(s[p] for p in self.perm)

    def forward(self, ctx, layouts, shapes):
        return permute_plan(ctx.machine, shapes[0], ctx.dtype, self.perm)


# --------------------------------------------------------------------------- dense
class Linear(Layer):
    """``y = x @ weight.T + bias`` on the last axis; params as PyTorch (weight (out, in))."""

    op = "linear"

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        self.in_features, self.out_features, self.bias = int(in_features), int(out_features), bool(bias)

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        if s[-1] != self.in_features:
            raise ValueError(f"{self.describe()} expects {self.in_features} features on the last "
                             f"axis, got shape {s}")
        return s[:-1] + (self.out_features,)

    def param_shapes(self, shapes):
        ps = {"weight": (self.out_features, self.in_features)}
        if self.bias:
            ps["bias"] = (self.out_features,)
        return ps

    def init_params(self, shapes, rng):
        b = 1.0 / np.sqrt(self.in_features)
        p = {"weight": rng.uniform(-b, b, (self.out_features, self.in_features)).astype(np.float32)}
        if self.bias:
            p["bias"] = rng.uniform(-b, b, self.out_features).astype(np.float32)
        return p

    def forward(self, ctx, layouts, shapes):
        s = tuple(shapes[0])
        rows = int(np.prod(s[:-1]))
        return matmul_plan(ctx.machine, (rows, self.in_features), (self.in_features, self.out_features),
                           dtype=ctx.dtype, partials=ctx.partials, b_param=True, bias=self.bias, amp=ctx.amp,
                           out_shape=self.out_shape(shapes))


class MatMul(Layer):
    """Batched ``a @ b`` of two activations, a (G, M, K) and b (G, K, N)."""

    op = "matmul"
    n_inputs = 2

    def out_shape(self, shapes):
        a, b = tuple(shapes[0]), tuple(shapes[1])
        if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
            raise ValueError(f"MatMul expects (G, M, K) @ (G, K, N), got {a} @ {b}")
        return (a[0], a[1], b[2])

    def forward(self, ctx, layouts, shapes):
        return matmul_plan(ctx.machine, shapes[0], shapes[1], dtype=ctx.dtype, partials=ctx.partials,
                           amp=ctx.amp)


class LayerNorm(Layer):
    """Layer norm over the last axis with ``weight`` and ``bias``."""

    op = "layernorm"

    def __init__(self, dim: int, eps: float = 1e-5):
        self.dim, self.eps = int(dim), float(eps)

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        if s[-1] != self.dim:
            raise ValueError(f"{self.describe()} expects last axis {self.dim}, got {s}")
        return s

    def param_shapes(self, shapes):
        return {"weight": (self.dim,), "bias": (self.dim,)}

    def init_params(self, shapes, rng):
        return {"weight": rng.uniform(0.5, 1.5, self.dim).astype(np.float32),
                "bias": rng.uniform(-0.1, 0.1, self.dim).astype(np.float32)}

    def forward(self, ctx, layouts, shapes):
        return layernorm_plan(ctx.machine, shapes[0], ctx.dtype, self.eps)


class Softmax(Layer):
    """Softmax over the last axis of ``scale * x``."""

    op = "softmax"

    def __init__(self, scale: float = 1.0):
        self.scale = float(scale)

    def forward(self, ctx, layouts, shapes):
        return softmax_plan(ctx.machine, shapes[0], ctx.dtype, self.scale)


class ScaleChannels(Layer):
    """``x * s`` for x (N, C, H, W) and s (N, C, 1, 1): squeeze-excitation's rescale."""

    op = "scale_channels"
    n_inputs = 2

    def out_shape(self, shapes):
        x, s = tuple(shapes[0]), tuple(shapes[1])
        if len(x) != 4 or s != (x[0], x[1], 1, 1):
            raise ValueError(f"ScaleChannels expects x (N, C, H, W) and s (N, C, 1, 1), got {x}, {s}")
        return x

    def forward(self, ctx, layouts, shapes):
        return channel_scale_plan(ctx.machine, shapes[0], ctx.dtype)


class Embedding(Layer):
    """Table lookup: integer ids (host input) -> rows of ``weight`` (num, dim)."""

    op = "embedding"
    host_inputs = (0,)

    def __init__(self, num_embeddings: int, dim: int):
        self.num_embeddings, self.dim = int(num_embeddings), int(dim)

    def out_shape(self, shapes):
        return tuple(shapes[0]) + (self.dim,)

    def param_shapes(self, shapes):
        return {"weight": (self.num_embeddings, self.dim)}

    def init_params(self, shapes, rng):
        return {"weight": rng.standard_normal((self.num_embeddings, self.dim)).astype(np.float32)}

    def forward(self, ctx, layouts, shapes):
        return gather_plan(ctx.machine, shapes[0], self.num_embeddings, self.dim, ctx.dtype)


class SoftmaxCrossEntropy(Layer):
    """Mean softmax cross-entropy of logits (N, classes) and integer labels (host input)."""

    op = "softmax_cross_entropy"
    n_inputs = 2
    host_inputs = (1,)

    def out_shape(self, shapes):
        lg, lb = tuple(shapes[0]), tuple(shapes[1])
        if len(lg) != 2 or lb != (lg[0],):
            raise ValueError(f"SoftmaxCrossEntropy expects logits (N, classes) and labels (N,), "
                             f"got {lg}, {lb}")
        return ()

    def forward(self, ctx, layouts, shapes):
        return loss_plan(ctx.machine, shapes[0], ctx.dtype)


class AddParam(Layer):
    """``x + weight`` with ``weight`` of the per-sample shape (broadcast over the batch):
    BERT's position embeddings for a fixed sequence length."""

    op = "add_param"
    layout_sensitive = True

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(s) for s in shape)

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        if s[1:] != self.shape:
            raise ValueError(f"{self.describe()} expects per-sample shape {self.shape}, got {s}")
        return s

    def param_shapes(self, shapes):
        return {"weight": self.shape}

    def init_params(self, shapes, rng):
        return {"weight": (0.02 * rng.standard_normal(self.shape)).astype(np.float32)}

    def op_params(self, params):
        return {"shift": params["weight"]}

    def forward(self, ctx, layouts, shapes):
        return affine_plan(ctx.machine, layouts[0], int(np.prod(self.shape)), 1, scale=False,
                           shift=True, name="add_param")
