"""The public operations on the simulated IPU: validate -> plan -> build -> run.

- ``conv``, ``conv_grad``: grouped conv2d and its backward passes;
- ``matmul``, ``matmul_grad``: (batched) matmul as a 1x1 grouped conv, and its passes;
- ``optim``: optimizer steps, their state and traffic;
- ``_cache``: the conv-program cache behind them (registered with :mod:`ipukern._memo`).

This face names what the layers above (nn, systems, the CLI) use.
"""
from .conv import ConvRun, clear_plan_cache, conv2d, estimate_conv2d, plan_cache_info, plan_conv2d, \
    set_plan_cache_limit
from .conv_grad import (conv2d_backward_data, conv2d_backward_weight, estimate_conv2d_backward_data,
                        estimate_conv2d_backward_weight)
from .matmul import MatmulRun, estimate_matmul, matmul, matmul_conv_params
from .matmul_grad import (estimate_matmul_backward_data, estimate_matmul_backward_weight,
                          matmul_backward_data, matmul_backward_weight)
from .optim import (OPTIMIZER_STATE_WORDS, OPTIMIZER_WORDS, OPTIMIZERS, Optimizer, OptimizerRun,
                    estimate_optimizer_step, get_optimizer, optimizer_step, state_dtypes)

__all__ = ["ConvRun", "conv2d", "estimate_conv2d", "plan_conv2d", "clear_plan_cache",
           "set_plan_cache_limit", "plan_cache_info", "conv2d_backward_data", "conv2d_backward_weight",
           "estimate_conv2d_backward_data", "estimate_conv2d_backward_weight", "MatmulRun", "matmul",
           "estimate_matmul", "matmul_conv_params", "estimate_matmul_backward_data",
           "estimate_matmul_backward_weight", "matmul_backward_data", "matmul_backward_weight",
           "OPTIMIZERS", "OPTIMIZER_WORDS", "OPTIMIZER_STATE_WORDS", "Optimizer", "OptimizerRun",
           "optimizer_step", "estimate_optimizer_step", "get_optimizer", "state_dtypes"]
