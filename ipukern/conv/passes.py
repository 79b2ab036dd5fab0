"""The training passes of a convolution, each expressed as its own plain convolution.

PopLibs plans every conv three times (reference/poplibs-planner.md §1.5): the forward pass,
the backward-data pass (``getGradientParams``: in/out channels swapped, kernel flipped,
stride turned into input dilation) and the weight-update pass (``getWeightUpdateParams``:
the output gradient becomes the kernel, the input channels become the batch, the batch
becomes the reduction). This module derives those convs for a :class:`ConvParams` and the
host-side *views* of the operands they read, so that the planner, the program builder and
the kernels are reused unchanged.

ipukern's :class:`ConvParams` has symmetric padding and no input dilation (zero insertion),
so the parts of a pass that need either are materialised in the operand the pass reads:

- backward data, stride s > 1: the output gradient is zero-inserted (s-1 zeros between
  elements) and, where the transposed conv needs more padding on the high side than on the
  low side, padded there with zeros. The conv then runs densely over the inserted zeros: they
  are exchanged and multiplied like data, so the pass costs what a conv over the dilated
  tensor costs (PopLibs' vertices also run over an input-dilated tensor; its MAC *count*
  excludes those zeros, and so does ``flops`` in our profile);
- backward data of a 1x1 kernel: PopLibs' *dilatePostConv* transform (§2.2): the 1x1 conv
  runs on the un-dilated gradient and its result is scattered into the strided positions,
  so no zero is multiplied;
- weight update: PopLibs' WU conv has the output gradient as its kernel (H_out x W_out,
  often far larger than any vertex's kernel) and the planner's *expandDims* transform folds
  those kernel dims into the input channels. ipukern always applies that transform: the WU
  pass is a grouped matmul over the im2col of the input, with the batch and output field as
  the reduction. The im2col operand (kh*kw copies of each input element, padding as zeros)
  is materialised when the operand is placed; PopLibs builds it with on-chip copies, whose
  cycles are not modelled here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .params import ConvParams

__all__ = ["PassOperand", "backward_data_pass", "weight_update_pass"]


@dataclass(frozen=True)
class PassOperand:
    """How a pass's conv input is made from a tensor of the forward conv.

    Per spatial axis (h, w): insert ``dilation - 1`` zeros between elements, then pad with
    ``lo`` / ``hi`` zeros (a negative value cuts that many elements instead); the pass conv
    itself adds its own symmetric ``padding`` on top.
    """

    dilation: tuple[int, int]
    lo: tuple[int, int]
    hi: tuple[int, int]

    def apply(self, a: np.ndarray) -> np.ndarray:
        """The operand ``a`` (N, C, H, W) zero-inserted and padded/cut as described."""
        if self.dilation == (1, 1) and self.lo == (0, 0) and self.hi == (0, 0):
            return a
        n, c, h, w = a.shape
        dh, dw = self.dilation
        hd, wd = (h - 1) * dh + 1, (w - 1) * dw + 1
        full_h = max(self.lo[0], 0) + hd + max(self.hi[0], 0)
        full_w = max(self.lo[1], 0) + wd + max(self.hi[1], 0)
        out = np.zeros((n, c, full_h, full_w), dtype=a.dtype)
        r0, c0 = max(self.lo[0], 0), max(self.lo[1], 0)
        out[:, :, r0:r0 + hd:dh, c0:c0 + wd:dw] = a
        cut_h0, cut_w0 = max(-self.lo[0], 0), max(-self.lo[1], 0)
        cut_h1, cut_w1 = max(-self.hi[0], 0), max(-self.hi[1], 0)
        return np.ascontiguousarray(out[:, :, cut_h0:full_h - cut_h1, cut_w0:full_w - cut_w1])

    def shape(self, shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        n, c, h, w = shape
        return (n, c, (h - 1) * self.dilation[0] + 1 + self.lo[0] + self.hi[0],
                (w - 1) * self.dilation[1] + 1 + self.lo[1] + self.hi[1])


@dataclass(frozen=True)
class BackwardDataPass:
    """grad_input = conv(operand(grad_output), flipped transposed weights), or, for a 1x1
    kernel, the 1x1 conv of grad_output scattered into grad_input (``post_stride``)."""

    params: ConvParams
    operand: PassOperand
    #: dilatePostConv: the pass output lands at input positions o*s - p (else None)
    post_stride: tuple[int, int] | None
    post_offset: tuple[int, int]
    input_hw: tuple[int, int]

    def weights(self, w: np.ndarray, groups: int) -> np.ndarray:
        """(C_out, C_in/g, kh, kw) -> (C_in, C_out/g, kh, kw), flipped in both axes."""
        co, cig, kh, kw = w.shape
        cog = co // groups
        wt = w.reshape(groups, cog, cig, kh, kw).transpose(0, 2, 1, 3, 4)
        return np.ascontiguousarray(wt[..., ::-1, ::-1].reshape(groups * cig, cog, kh, kw))

    def finish(self, y: np.ndarray) -> np.ndarray:
        """The pass output as grad_input (only the dilatePostConv case moves data)."""
        if self.post_stride is None:
            return y
        n, c = y.shape[:2]
        gx = np.zeros((n, c) + self.input_hw, dtype=y.dtype)
        (sh, sw), (ph, pw) = self.post_stride, self.post_offset
        # output o lands on input o*s - p; positions outside the input are dropped
        oh = np.arange(y.shape[2]) * sh - ph
        ow = np.arange(y.shape[3]) * sw - pw
        kh, kw = (oh >= 0) & (oh < self.input_hw[0]), (ow >= 0) & (ow < self.input_hw[1])
        gx[:, :, oh[kh][:, None], ow[kw][None, :]] = y[:, :, kh][:, :, :, kw]
        return gx


def backward_data_pass(p: ConvParams) -> BackwardDataPass:
    """The conv computing dL/dx from dL/dy for the forward conv ``p`` (getGradientParams)."""
    common = {"batch": p.batch, "in_channels": p.out_channels, "out_channels": p.in_channels,
                  "kernel_h": p.kernel_h, "kernel_w": p.kernel_w, "groups": p.groups, "dtype": p.dtype,
                  "partials": p.partials}
    if (p.kernel_h, p.kernel_w) == (1, 1):
        bp = ConvParams(in_h=p.out_h, in_w=p.out_w, **common)
        return BackwardDataPass(bp, PassOperand((1, 1), (0, 0), (0, 0)),
                                None if p.stride == (1, 1) and p.padding == (0, 0) else p.stride,
                                p.padding, (p.in_h, p.in_w))
    lo, hi, pad = [], [], []
    for size, out, k, s, pd, d in ((p.in_h, p.out_h, p.kernel_h, p.stride[0], p.padding[0], p.dilation[0]),
                                   (p.in_w, p.out_w, p.kernel_w, p.stride[1], p.padding[1], p.dilation[1])):
        span = d * (k - 1) + 1
        q = span - 1 - pd                        # full-correlation padding, low side
        extra = size + 2 * pd - span - (out - 1) * s  # input rows after the last window
        sym = max(0, q)                          # the part the pass conv pads itself
        pad.append(sym)
        lo.append(q - sym)
        hi.append(q + extra - sym)
    op = PassOperand(p.stride, tuple(lo), tuple(hi))
    _, _, h, w = op.shape(p.output_shape)
    bp = ConvParams(in_h=h, in_w=w, padding=tuple(pad), dilation=p.dilation, **common)
    assert (bp.out_h, bp.out_w) == (p.in_h, p.in_w), (bp, p)
    return BackwardDataPass(bp, op, None, (0, 0), (p.in_h, p.in_w))


@dataclass(frozen=True)
class WeightUpdatePass:
    """grad_weight as PopLibs' WU conv after its *expandDims* transform on both kernel dims:
    per group a matmul ``dW[C_out/g, (C/g, kh, kw)] = dY[C_out/g, (N, H_out, W_out)] @
    X_col[(N, H_out, W_out), (C/g, kh, kw)]``, i.e. a 1x1 grouped conv whose input channels
    are the batch and output field (the reduction) and whose columns are the weights' taps."""

    params: ConvParams
    fwd: ConvParams

    def inputs(self, x: np.ndarray) -> np.ndarray:
        """x (N, C, H, W) -> X_col (1, G*N*H_out*W_out, 1, C/g*kh*kw)."""
        p = self.fwd
        (sh, sw), (ph, pw), (dh, dw) = p.stride, p.padding, p.dilation
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        taps = [xp[:, :, i * dh:i * dh + sh * (p.out_h - 1) + 1:sh,
                   j * dw:j * dw + sw * (p.out_w - 1) + 1:sw]
                for i in range(p.kernel_h) for j in range(p.kernel_w)]
        col = np.stack(taps, axis=-1)                     # (N, C, Ho, Wo, kh*kw)
        col = col.reshape(p.batch, p.groups, p.in_per_group, p.out_h, p.out_w, -1)
        col = col.transpose(1, 0, 3, 4, 2, 5)             # (G, N, Ho, Wo, C/g, kh*kw)
        return np.ascontiguousarray(col).reshape(self.params.input_shape)

    def kernel(self, gy: np.ndarray) -> np.ndarray:
        """dY (N, C_out, H_out, W_out) -> (C_out, N*H_out*W_out, 1, 1)."""
        return np.ascontiguousarray(gy.transpose(1, 0, 2, 3)).reshape(self.params.weight_shape)

    def finish(self, y: np.ndarray) -> np.ndarray:
        """(1, C_out, 1, C/g*kh*kw) -> (C_out, C/g, kh, kw)."""
        return y.reshape(self.fwd.weight_shape)


def weight_update_pass(p: ConvParams) -> WeightUpdatePass:
    """The conv computing dL/dw from x and dL/dy for the forward conv ``p``
    (getWeightUpdateParams, then expandDims over the kernel dims)."""
    red = p.batch * p.out_h * p.out_w
    wp = ConvParams(batch=1, in_channels=p.groups * red, out_channels=p.out_channels, in_h=1,
                    in_w=p.in_per_group * p.kernel_h * p.kernel_w, kernel_h=1, kernel_w=1,
                    groups=p.groups, dtype=p.dtype, partials=p.partials)
    return WeightUpdatePass(wp, p)
