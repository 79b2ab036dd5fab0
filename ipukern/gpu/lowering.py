"""An ipukern Network as the GPU kernels a software stack launches for it.

:func:`lower_network` walks the layers and emits, per layer and phase (``forward``,
``backward``), the :class:`~ipukern.gpu.kernels.KernelCall` list the stack launches:
GEMMs for convs (:func:`~ipukern.gpu.kernels.conv_kernels`), linears and batched matmuls
(each backward a data-gradient and a weight-gradient GEMM of their own shapes), and
memory-bound passes counted in tensors read and written. The pass counts per layer are those
of PyTorch's kernels (written beside each op); fusions of the stack remove passes:

* training batch norm: statistics pass + normalise pass forward (x read twice, y written);
  backward reads x and dy twice and writes dx (cuDNN's batch-norm kernels); at inference one
  pass, folded into the conv with ``conv_epilogue``;
* activation: 1 read + 1 write; backward dy, x -> dx. Fused into a conv/BN/add epilogue with
  ``conv_epilogue`` and into a linear's with ``bias_act``;
* layer norm: x -> y (+ row statistics); backward dy, x -> dx plus the weight/bias gradient
  reduction: 4 tensor passes; ``norm_residual`` fuses the residual add before it;
* training a token model (one with an embedding): each residual add into a layer norm carries
  the sub-layer's hidden dropout (the networks are inference graphs): dropout and add as two
  passes, one with ``dropout_add``, none with ``norm_residual``; backward a mask pass;
* the attention block (matmul -> softmax -> matmul) with ``attention``: one fused kernel
  whose FLOPs are both products and whose DRAM traffic is Q, K, V and the context;
  backward 2.5x the forward FLOPs (FlashAttention, Dao et al. 2022, section 3.1), else
  eager: scale pass, softmax, both matmuls with the score matrix in DRAM;
* permutes feeding a matmul are strided batched GEMM operands (no copy); other permutes copy.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels import KernelCall, conv_kernels
from .specs import GPUSpec
from .stacks import SoftwareStack

__all__ = ["LayerKernels", "lower_network"]


@dataclass(frozen=True)
class LayerKernels:
    name: str
    op: str
    forward: tuple[KernelCall, ...]
    backward: tuple[KernelCall, ...]


def _size(shape) -> int:
    return int(np.prod(shape)) if len(shape) else 1


def _mem(kind: str, label: str, elems: float, elem: int) -> KernelCall:
    return KernelCall(kind, label, nbytes=int(elems * elem))


class _Ctx:
    """What the lowering of one layer needs to know about its neighbours."""

    def __init__(self, net: Any, shapes: dict, stack: SoftwareStack, gpu: GPUSpec, dtype: str,
                 training: bool, tf32: bool, direct_curve: Any = None):
        self.net, self.shapes, self.stack, self.gpu = net, shapes, stack, gpu
        self.direct_curve = direct_curve
        self.dtype, self.training, self.tf32 = dtype, training, tf32
        self.elem = 2 if dtype == "float16" else 4
        self.consumers = net.consumers()
        self.inputs = set(getattr(net, "inputs", ()) or ())
        self.token_model = any(layer.op == "embedding" for _, layer in net.layers)

    def producer_op(self, name: str) -> str:
        node = self.net.nodes.get(name)
        return getattr(getattr(node, "layer", None), "op", "input") if node is not None else "input"

    def consumer_ops(self, name: str) -> list[str]:
        return [self.producer_op(c) for c in self.consumers.get(name, [])]

    def feeds_matmul(self, name: str) -> bool:
        """Whether a tensor reaches a (batched) matmul through views only."""
        for c in self.consumers.get(name, []):
            op = self.producer_op(c)
            if op in ("matmul", "linear") or (op in ("reshape", "flatten") and self.feeds_matmul(c)):
                return True
        return False

    def in_attention(self, name: str) -> bool:
        """A softmax between two batched matmuls (scores -> probabilities -> context)."""
        node = self.net.nodes[name]
        return (self.stack.fuses("attention") and self.producer_op(node.inputs[0]) == "matmul"
                and "matmul" in self.consumer_ops(name))

    def attention_matmul(self, name: str) -> bool:
        """A batched matmul of an attention pattern under ``attention`` fusion: the scores
        product (it feeds a softmax) or the context product (it reads one). Any other matmul
        of two activations (an HMC step's ``X theta``) is a plain batched GEMM."""
        node = self.net.nodes[name]
        return (self.stack.fuses("attention")
                and ("softmax" in self.consumer_ops(name) or self.producer_op(node.inputs[0]) == "softmax"))

    def residual_dropout(self, name: str) -> bool:
        """A residual add into a layer norm of a token model in training: it carries the
        sub-layer's hidden dropout (Vaswani et al. 2017, section 5.4 "Residual Dropout";
        BERT's hidden_dropout_prob 0.1), which ipukern's networks leave out as inference."""
        return (self.training and self.token_model and self.producer_op(name) == "add"
                and "layernorm" in self.consumer_ops(name))

    def is_input(self, name: str) -> bool:
        return self.producer_op(name) == "input"


def _conv(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    p = dataclasses.replace(layer.conv_params(tuple(ins[0])), dtype=ctx.dtype)
    fwd = list(conv_kernels(p, "forward", ctx.gpu, ctx.dtype, tf32=ctx.tf32, direct_curve=ctx.direct_curve))
    tensor_core = ctx.dtype == "float16" or ctx.tf32
    if ctx.stack.layout == "NCHW" and tensor_core and p.groups == 1:
        # cuDNN's tensor-core kernels are NHWC: NCHW tensors are transposed in and out
        fwd += [_mem("copy", "NCHW->NHWC", 2 * _size(ins[0]), ctx.elem),
                _mem("copy", "NHWC->NCHW", 2 * _size(out), ctx.elem)]
    if layer.bias and not ctx.stack.fuses("conv_epilogue"):
        fwd.append(_mem("elementwise", "bias add", 2 * _size(out), ctx.elem))
    bwd = list(conv_kernels(p, "wgrad", ctx.gpu, ctx.dtype, tf32=ctx.tf32, direct_curve=ctx.direct_curve))
    if not ctx.is_input(ctx.net.nodes[name].inputs[0]):
        bwd += conv_kernels(p, "dgrad", ctx.gpu, ctx.dtype, tf32=ctx.tf32, direct_curve=ctx.direct_curve)
    if layer.bias:
        bwd.append(_mem("reduce", "bias grad", _size(out), ctx.elem))
    return fwd, bwd


def _linear(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    rows = _size(ins[0][:-1])
    i, o = layer.in_features, layer.out_features
    fwd = [KernelCall("gemm", "linear", m=rows, n=o, k=i)]
    bwd = [KernelCall("gemm", "linear wgrad", m=o, n=i, k=rows)]
    if not ctx.is_input(ctx.net.nodes[name].inputs[0]):
        bwd.append(KernelCall("gemm", "linear dgrad", m=rows, n=i, k=o))
    if layer.bias:
        bwd.append(_mem("reduce", "bias grad", rows * o, ctx.elem))
    return fwd, bwd


def _matmul(ctx: _Ctx, name: str, ins: list) -> tuple[list, list]:
    (g, m, k), (_, _, n) = ins
    fwd = [KernelCall("gemm", "batched matmul", m=m, n=n, k=k, batch=g)]
    bwd = [KernelCall("gemm", "bmm grad A", m=m, n=k, k=n, batch=g),
           KernelCall("gemm", "bmm grad B", m=k, n=n, k=m, batch=g)]
    return fwd, bwd


def _attention_matmul(ctx: _Ctx, name: str, ins: list) -> tuple[list, list]:
    """Under ``attention`` fusion the scores matmul carries the whole fused kernel; the
    softmax and the context matmul launch nothing."""
    node = ctx.net.nodes[name]
    if ctx.producer_op(node.inputs[0]) == "softmax":          # the context product: inside FMHA
        return [], []
    (g, m, dh), (_, _, n) = ins
    # as one GEMM: (m x 2n) P-panel times (2n x dh) [K; V] -> (m x dh) context. The FLOPs
    # are QK^T's plus PV's; the panel lives in registers/shared memory, so A's DRAM bytes
    # are Q's, B's are K's and V's and C is the context: the score matrix never reaches DRAM
    q_bytes = g * m * dh * ctx.elem
    fwd = [KernelCall("gemm", "fused attention", m=m, n=dh, k=2 * n, batch=g, a_bytes=q_bytes)]
    # backward recomputes the scores: 2.5x the forward FLOPs (Dao et al. 2022)
    bwd = [KernelCall("gemm", "fused attention backward", m=m, n=dh, k=5 * n, batch=g,
                      a_bytes=2 * q_bytes)]
    return fwd, bwd


# Memory-bound layers: one function per op, each (ctx, name, layer, in shapes, out shape) ->
# (forward launches, backward launches); _memory_layer dispatches on the op.
def _prod(ctx: _Ctx, name: str) -> str:
    return ctx.producer_op(ctx.net.nodes[name].inputs[0])


def _batchnorm(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size, st = ctx.elem, _size(out), ctx.stack
    if not ctx.training:
        folded = st.fuses("conv_epilogue") and _prod(ctx, name) == "conv2d"
        return ([] if folded else [_mem("norm", "batch norm", 2 * size, e)]), []
    if st.fuses("conv_epilogue"):       # stats in the conv epilogue, apply fused with the next op
        return ([_mem("norm", "batch norm apply", 2 * size, e)],
                [_mem("norm", "batch norm backward", 3 * size, e)])
    return ([_mem("reduce", "batch norm stats", size, e), _mem("norm", "batch norm apply", 2 * size, e)],
            [_mem("reduce", "batch norm backward stats", 2 * size, e),
             _mem("norm", "batch norm backward", 3 * size, e)])


def _activation(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size, st, prod = ctx.elem, _size(out), ctx.stack, _prod(ctx, name)
    fused = ((st.fuses("conv_epilogue") and prod in ("conv2d", "batchnorm", "add"))
             or (st.fuses("bias_act") and prod == "linear"))
    if fused:
        return [], []
    return ([_mem("elementwise", layer.kind, 2 * size, e)],
            [_mem("elementwise", f"{layer.kind} backward", 3 * size, e)])


def _add(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size, st = ctx.elem, _size(out), ctx.stack
    if ctx.residual_dropout(name):
        return _dropout_add(ctx, size)
    if (st.fuses("conv_epilogue") and _prod(ctx, name) in ("conv2d", "batchnorm")
            or st.fuses("norm_residual") and "layernorm" in ctx.consumer_ops(name)):
        return [], []
    bwd = [_mem("elementwise", f"{layer.act} backward", 3 * size, e)] if layer.act else []
    return [_mem("elementwise", "add", 3 * size, e)], bwd


def _dropout_add(ctx: _Ctx, size: int) -> tuple[list, list]:
    """A transformer sub-layer's hidden dropout and residual add in training; the mask is one
    byte per element (PyTorch's fused dropout); backward: dy and the mask -> the branch's dx."""
    e, st = ctx.elem, ctx.stack
    bwd = [_mem("elementwise", "dropout backward", (2 * e + 1) * size, 1)]
    if st.fuses("norm_residual"):               # inside the layer norm's pass
        return [], bwd
    if st.fuses("dropout_add"):
        return [_mem("elementwise", "dropout + add", (3 * e + 1) * size, 1)], bwd
    return [_mem("elementwise", "dropout", (2 * e + 1) * size, 1),
            _mem("elementwise", "add", 3 * size, e)], bwd


def _layernorm(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size = ctx.elem, _size(out)
    return [_mem("norm", "layer norm", 2 * size, e)], [_mem("norm", "layer norm backward", 4 * size, e)]


def _softmax(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    if ctx.in_attention(name):
        return [], []
    e, size = ctx.elem, _size(out)
    fwd = [_mem("softmax", "softmax", 2 * size, e)]
    if getattr(layer, "scale", 1.0) != 1.0:
        fwd.insert(0, _mem("elementwise", "scale", 2 * size, e))
    return fwd, [_mem("softmax", "softmax backward", 3 * size, e)]


def _pool(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size, isz = ctx.elem, _size(out), _size(ins[0])
    return [_mem("pool", layer.op, isz + size, e)], [_mem("pool", f"{layer.op} backward", 2 * isz + size, e)]


def _scale_channels(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size = ctx.elem, _size(out)
    return ([_mem("elementwise", "scale channels", 2 * size, e)],
            [_mem("elementwise", "scale channels dx", 3 * size, e),
             _mem("reduce", "scale channels ds", 2 * size, e)])


def _embedding(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size = ctx.elem, _size(out)
    table = layer.num_embeddings * layer.dim
    return ([_mem("embedding", "embedding gather", 2 * size, e)],
            [_mem("copy", "embedding grad zero", table, 4),
             _mem("embedding", "embedding grad scatter", 2 * size, e)])


def _add_param(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, size = ctx.elem, _size(out)
    return ([] if ctx.stack.fuses("norm_residual") else [_mem("elementwise", "add param", 3 * size, e)],
            [_mem("reduce", "param grad", size, e)])


def _loss(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    e, isz = ctx.elem, _size(ins[0])
    return [_mem("softmax", "log softmax + nll", 2 * isz, e)], [_mem("softmax", "loss backward", 3 * isz, e)]


def _permute(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    if ctx.feeds_matmul(name):
        return [], []
    e, size = ctx.elem, _size(out)
    return [_mem("copy", "permute copy", 2 * size, e)], [_mem("copy", "permute copy backward", 2 * size, e)]


def _view(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    return [], []


def _unknown(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    """An op this lowering does not know: one read of its inputs, one write."""
    e, size = ctx.elem, _size(out)
    isz = sum(_size(s) for s in ins)
    return ([_mem("elementwise", layer.op, isz + size, e)],
            [_mem("elementwise", f"{layer.op} backward", 2 * (isz + size), e)])


_MEMORY_OPS = {
    "batchnorm": _batchnorm, "activation": _activation, "add": _add, "layernorm": _layernorm,
    "softmax": _softmax, "maxpool": _pool, "avgpool": _pool, "global_avgpool": _pool,
    "scale_channels": _scale_channels, "embedding": _embedding, "add_param": _add_param,
    "softmax_cross_entropy": _loss, "permute": _permute, "flatten": _view, "reshape": _view,
}


def _memory_layer(ctx: _Ctx, name: str, layer: Any, ins: list, out: tuple) -> tuple[list, list]:
    return _MEMORY_OPS.get(layer.op, _unknown)(ctx, name, layer, ins, out)


def lower_network(net: Any, batch: int, gpu: GPUSpec, stack: SoftwareStack, dtype: str, *,
                  training: bool, tf32: bool = False, direct_curve: Any = None) -> list[LayerKernels]:
    """Per layer, the forward and (when ``training``) backward launches."""
    shapes = net.shapes(batch)
    # padding tokens exist only in token (sequence) models: those with an embedding layer
    if stack.fuses("unpadded") and any(layer.op == "embedding" for _, layer in net.layers):
        shapes = _unpadded(net, shapes, stack.token_fraction)
    ctx = _Ctx(net, shapes, stack, gpu, dtype, training, tf32, direct_curve)
    out = []
    for name, layer in net.layers:
        ins = [shapes[i] for i in net.nodes[name].inputs]
        op = layer.op
        if op == "conv2d":
            fwd, bwd = _conv(ctx, name, layer, ins, shapes[name])
        elif op == "linear":
            fwd, bwd = _linear(ctx, name, layer, ins, shapes[name])
        elif op == "matmul":
            fwd, bwd = (_attention_matmul(ctx, name, ins) if ctx.attention_matmul(name)
                        else _matmul(ctx, name, ins))
        else:
            fwd, bwd = _memory_layer(ctx, name, layer, ins, shapes[name])
        out.append(LayerKernels(name, op, tuple(fwd), tuple(bwd) if training else ()))
    return out


def _unpadded(net: Any, shapes: dict, fraction: float) -> dict:
    """Token-major tensors scaled to the real tokens: the leading (batch x sequence) extent
    shrinks by ``fraction`` (rows of every token-wise tensor; attention keeps its square)."""
    out = {}
    for name, s in shapes.items():
        if len(s) >= 2 and s[0] > 0:
            out[name] = (max(1, math.ceil(s[0] * fraction)),) + tuple(s[1:])
        else:
            out[name] = s
    return out
