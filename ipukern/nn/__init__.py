"""Whole networks on one simulated IPU: layers, tile-resident tensors, liveness, profiles.

Pipeline::

    Network (named layers, shapes inferred)
      -> compile_network(net, batch, PlanContext(machine, dtype, partials))   [compile.py]
           one Step per layer: rearrangements into the layouts its OpPlan wants + the plan
      -> estimate: NetworkProfile (cycles per layer, liveness memory)          [api.py]
      -> execute:  Step.plan.run on Resident tensors (bytes per tile)          [ops.py, convops.py]

Extension point for the training passes (``ipukern.nn.training``)
----------------------------------------------------------------
Each pass of each layer is an :class:`~ipukern.nn.ops.OpPlan`: ``op``, ``pass_``
("fwd" / "bwd" / "wu"), ``method``, wanted ``inputs`` layouts, ``output`` layout, cost
``records`` (SuperstepRecords: exchange, compute, reduction ...), ``flops``,
``total_bytes`` / ``weight_bytes`` per tile and ``run(srcs, rearrangements, params)``.

- :meth:`Layer.backward(ctx, fwd_plan, layouts, shapes) <ipukern.nn.layers.Layer.backward>`
  returns the layer's backward-data and weight-update OpPlans (pass_ "bwd" / "wu"); the
  forward-only build raises NotImplementedError. Conv and matmul backward passes are
  planned as their own convs with :func:`ipukern.nn.convops.conv_program` (cached by
  ConvParams) and wrapped like :func:`~ipukern.nn.convops.conv_plan` does.
- :class:`~ipukern.nn.program.NetworkProgram` exposes ``steps`` (forward Steps in program
  order, each with ``plan``, ``srcs``, ``rearrs``, ``in_shapes``, ``out_shape``),
  ``layouts`` (every tensor's Layout) and ``liveness()``; a training program appends the
  backward steps and extends the liveness with stashed activations and optimizer state.
- ``estimate_network(..., training=True, recompute=..., optimizer=...)`` calls
  ``ipukern.nn.training.estimate_training(net, batch, ctx, recompute=, optimizer=,
  allow_overflow=, **kw)`` which returns a :class:`~ipukern.nn.profile.NetworkProfile`
  (build it with ``pass`` "bwd"/"wu" rows; the constructor takes the per-step rows, the
  records, the per-step live bytes and the weights).
- Rearrangements between any two layouts: :class:`~ipukern.nn.layout.Rearrangement`.
"""
from . import layers, models
from .api import NetworkRun, estimate_network, run_network
from .compile import clear_network_caches, compile_network
from .layers import (Activation, Add, AddParam, AvgPool2d, BatchNorm2d, Conv2d, Embedding, Exp,
                     Flatten, GlobalAvgPool, GELU, Layer, LayerNorm, Linear, MatMul, MaxPool2d, Mul,
                     Permute, PlanContext, ReLU, ReLU6, Reshape, ScaleChannels, Select, SELU, Sigmoid,
                     SiLU, Softmax, SoftmaxCrossEntropy, Softplus, Tanh)
from .layers import plan_context
from .layout import Layout, Rearrangement, Resident
from .network import Network
from .ops import OpPlan
from .profile import NetworkProfile
from .recurrent import GRU, LSTM
from .views import diff_networks, format_network_diff, network_trace
from .program import NetworkProgram
from .torch_import import UnsupportedTorchNode, from_torch
from .train_exec import TrainStepRun, train_step

__all__ = [  # noqa: RUF022 - grouped: framework, then the layer set
    "Network", "NetworkProfile", "NetworkRun", "NetworkProgram", "estimate_network", "run_network",
    "compile_network", "clear_network_caches",
    "diff_networks", "format_network_diff", "network_trace", "OpPlan", "Layout", "Rearrangement", "Resident",
    "UnsupportedTorchNode", "from_torch", "models", "layers", "TrainStepRun", "train_step",
    "plan_context", "Layer", "PlanContext", "Conv2d", "BatchNorm2d", "Activation", "ReLU", "ReLU6",
    "SiLU", "GELU",
    "Sigmoid", "Tanh", "Add", "AddParam", "MaxPool2d", "AvgPool2d", "GlobalAvgPool", "Reshape",
    "Flatten", "Permute", "Linear", "MatMul", "LayerNorm", "Softmax", "ScaleChannels", "Embedding",
    "SoftmaxCrossEntropy", "Mul", "Exp", "Softplus", "Select", "SELU", "LSTM", "GRU",
]
