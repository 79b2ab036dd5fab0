"""ConvParams: one grouped 2-D convolution described once, validated once.

PyTorch semantics: input (N, C, H, W), weight (C_out, C/groups, kh, kw), symmetric
``padding``, ``stride`` and ``dilation`` as ints or (h, w) pairs. Everything downstream
(GPU model, planner, cost model, kernels) reads the derived sizes from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .._checks import MAX_DIM, as_int, as_shape
from ..dtypes import DTYPES, canonical_dtype, partials_dtype

__all__ = ["ConvParams", "pair", "MAX_KERNEL_PARAM", "EXPAND_CANDIDATES", "expand_candidates",
           "expanded_params"]

#: largest kernel size, stride and dilation the compute kernels take (IPK_CONV_MAX_K)
MAX_KERNEL_PARAM = 64


def pair(value: Any, name: str, *, minimum: int) -> tuple[int, int]:
    """Turn an int or a length-2 sequence of ints into an (h, w) pair, checking the minimum."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, int) or (hasattr(value, "__index__") and not isinstance(value, (str, bytes))
                                   and not hasattr(value, "__len__")):
        v = (int(value), int(value))
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 2:
        if any(isinstance(x, bool) or not hasattr(x, "__index__") for x in value):
            raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
        v = (int(value[0]), int(value[1]))
    else:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if v[0] < minimum or v[1] < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if max(v) > MAX_DIM:
        raise ValueError(f"{name} must be at most {MAX_DIM}, got {value!r}")
    return v


@dataclass(frozen=True)
class ConvParams:
    """A grouped conv2d: sizes, hyper-parameters and dtypes (all validated)."""

    batch: int
    in_channels: int
    out_channels: int
    in_h: int
    in_w: int
    kernel_h: int
    kernel_w: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    dtype: str = "float32"
    #: accumulation dtype of the AMP (and of inter-tile partial sums)
    partials: str = "float32"

    def __post_init__(self) -> None:
        for name in ("batch", "in_channels", "out_channels", "in_h", "in_w", "kernel_h",
                     "kernel_w", "groups"):
            object.__setattr__(self, name, as_int(getattr(self, name), name, minimum=1, maximum=MAX_DIM))
        object.__setattr__(self, "stride", pair(self.stride, "stride", minimum=1))
        object.__setattr__(self, "padding", pair(self.padding, "padding", minimum=0))
        object.__setattr__(self, "dilation", pair(self.dilation, "dilation", minimum=1))
        for name, v in (("kernel_h", self.kernel_h), ("kernel_w", self.kernel_w),
                        ("stride", max(self.stride)), ("dilation", max(self.dilation))):
            if v > MAX_KERNEL_PARAM:
                raise ValueError(f"{name} {v} is above {MAX_KERNEL_PARAM}, the largest kernel size, "
                                 "stride or dilation the compute kernels support")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "partials", partials_dtype(self.partials, self.dtype))
        if self.in_channels % self.groups:
            raise ValueError(f"in_channels ({self.in_channels}) is not divisible by groups "
                             f"({self.groups})")
        if self.out_channels % self.groups:
            raise ValueError(f"out_channels ({self.out_channels}) is not divisible by groups "
                             f"({self.groups})")
        for axis, size, k, p, d in (("height", self.in_h, self.kernel_h, self.padding[0], self.dilation[0]),
                                    ("width", self.in_w, self.kernel_w, self.padding[1], self.dilation[1])):
            span = d * (k - 1) + 1
            if span > size + 2 * p:
                raise ValueError(f"kernel {axis} {k} (dilated span {span}) is larger than the padded "
                                 f"input {axis} {size} + 2*{p} = {size + 2 * p}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_shapes(cls, input_shape: Sequence[int], weight_shape: Sequence[int], *,
                    stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                    dtype: Any = "float32", partials: Any = "float") -> "ConvParams":
        """Build from PyTorch-style shapes: input (N, C, H, W), weight (C_out, C/groups, kh, kw).

        ``padding`` may also be ``"valid"`` (0) or ``"same"`` (stride 1 only, like PyTorch).
        """
        input_shape = as_shape(input_shape, "input shape")
        weight_shape = as_shape(weight_shape, "weight shape")
        if len(input_shape) != 4:
            raise ValueError(f"input must have rank 4 (N, C, H, W), got shape {input_shape}")
        if len(weight_shape) != 4:
            raise ValueError(f"weight must have rank 4 (C_out, C/groups, kh, kw), got shape {weight_shape}")
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ValueError(f"groups must be a positive int, got {groups!r}")
        n, c, h, w = input_shape
        co, cig, kh, kw = weight_shape
        if c % groups:
            raise ValueError(f"input channels ({c}) are not divisible by groups ({groups})")
        if cig != c // groups:
            raise ValueError(f"weight expects {cig} input channels per group, but input has "
                             f"{c} channels / {groups} groups = {c // groups} "
                             f"(input {input_shape}, weight {weight_shape})")
        if isinstance(padding, str):
            mode = padding.lower()
            if mode == "valid":
                padding = 0
            elif mode == "same":
                if pair(stride, "stride", minimum=1) != (1, 1):
                    raise ValueError("padding='same' is only supported with stride 1 (as in PyTorch)")
                dil = pair(dilation, "dilation", minimum=1)
                tot = (dil[0] * (kh - 1), dil[1] * (kw - 1))
                if tot[0] % 2 or tot[1] % 2:
                    raise ValueError("padding='same' needs an odd dilated kernel span (symmetric padding)")
                padding = (tot[0] // 2, tot[1] // 2)
            else:
                raise ValueError(f"padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
        return cls(batch=n, in_channels=c, out_channels=co, in_h=h, in_w=w, kernel_h=kh,
                   kernel_w=kw, stride=stride, padding=padding, dilation=dilation,
                   groups=groups, dtype=dtype, partials=partials)

    # ------------------------------------------------------------------ derived sizes
    @property
    def out_h(self) -> int:
        span = self.dilation[0] * (self.kernel_h - 1) + 1
        return (self.in_h + 2 * self.padding[0] - span) // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        span = self.dilation[1] * (self.kernel_w - 1) + 1
        return (self.in_w + 2 * self.padding[1] - span) // self.stride[1] + 1

    @property
    def in_per_group(self) -> int:
        """Input channels per group (1 = depthwise)."""
        return self.in_channels // self.groups

    @property
    def out_per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.in_channels, self.in_h, self.in_w)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_per_group, self.kernel_h, self.kernel_w)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, self.out_h, self.out_w)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the conventional (dense-window) count:
        N * C_out * H_out * W_out * (C/groups) * kh * kw. Taps that land on padding are
        counted, as frameworks and GPU papers count them."""
        return (self.batch * self.out_channels * self.out_h * self.out_w
                * self.in_per_group * self.kernel_h * self.kernel_w)

    @property
    def flops(self) -> int:
        return 2 * self.macs

    def nbytes(self) -> dict[str, int]:
        """Bytes of input, weight and output tensors in this conv's dtype."""
        n_in = self.batch * self.in_channels * self.in_h * self.in_w
        n_w = self.out_channels * self.in_per_group * self.kernel_h * self.kernel_w
        n_out = self.batch * self.out_channels * self.out_h * self.out_w
        return {"input": n_in * self.itemsize, "weight": n_w * self.itemsize,
                "output": n_out * self.itemsize}

    def describe(self) -> str:
        """Compact one-line description, e.g. ``N8 C128->128 56x56 k3x3 s1 p1 g32 float16``."""
        s = _pair_tag("s", self.stride, (1, 1))
        p = _pair_tag("p", self.padding, (0, 0))
        d = _pair_tag("d", self.dilation, (1, 1))
        return (f"N{self.batch} C{self.in_channels}->{self.out_channels} {self.in_h}x{self.in_w} "
                f"k{self.kernel_h}x{self.kernel_w}{s}{p}{d} g{self.groups} {self.dtype}")


def _pair_tag(letter: str, pair: tuple[int, int], default: tuple[int, int]) -> str:
    """`` s2`` for (2, 2), `` s(1, 2)`` for unequal pairs, nothing for the default."""
    if pair == default:
        return ""
    return f" {letter}{pair[0]}" if pair[0] == pair[1] else f" {letter}{pair}"


# ------------------------------------------------------------------ expandDims
#: expandDims subsets the planner tries ("w" alone would need transposed weights); a study
#: can set it to () to plan without the transform (bench/zoo_transforms.py does)
EXPAND_CANDIDATES = ("h", "hw")


def expand_candidates(p: ConvParams) -> list[str]:
    """The expandDims subsets that change ``p``: "h" when the kernel has more than one row
    or is one row with a row stride, "hw" when the same holds for columns (PopLibs
    ``getExpandDimsCandidates``: the dims whose expansion changes the params). Expanding a
    1-wide strided dim *subsamples* the input (``expandSpatialDim``: ``slice.subSample(
    stride)``, ConvTransforms.cpp), so the expanded conv's windows hold only the rows and
    columns it reads."""
    out = []
    if p.kernel_h > 1 or p.stride[0] > 1:
        out.append("h")
    if p.kernel_w > 1 or p.stride[1] > 1:
        out.append("hw")
    return [d for d in out if d in EXPAND_CANDIDATES]


def expanded_params(p: ConvParams, dims: str) -> ConvParams:
    """The conv after expandDims over ``dims`` ("h" or "hw"): those kernel dims folded into
    the input channels (``C_in *= k_d``; along d: kernel 1, input = output size, stride 1,
    no padding or dilation). Same output shape, MACs and weights (reshaped)."""
    if dims not in EXPAND_CANDIDATES:
        raise ValueError(f"expand_dims must be one of {EXPAND_CANDIDATES}, got {dims!r}")
    kh, kw, (sh, sw), (ph, pw), (dh, dw) = p.kernel_h, p.kernel_w, p.stride, p.padding, p.dilation
    ci, in_h, in_w = p.in_per_group * kh, p.out_h, p.in_w
    kh, sh, ph, dh = 1, 1, 0, 1
    if "w" in dims:
        ci, kw, in_w, sw, pw, dw = ci * kw, 1, p.out_w, 1, 0, 1
    return ConvParams(p.batch, ci * p.groups, p.out_channels, in_h, in_w, kh, kw, stride=(sh, sw),
                      padding=(ph, pw), dilation=(dh, dw), groups=p.groups, dtype=p.dtype,
                      partials=p.partials)
