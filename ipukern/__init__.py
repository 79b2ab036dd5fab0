"""ipukern: a Graphcore-IPU-class tile machine simulated on a CPU.

Runs grouped convolutions and matmuls tile by tile in Bulk-Synchronous-Parallel supersteps,
returns exact results and a cycle profile of what the real chip would take.
"""
from .dtypes import canonical_dtype
from .core import Device, get_num_threads, run_program, set_num_threads
from .graph import Graph, GraphTensor, choose_grid, grid_mapping
from .machine import BOW, GC2, GC200, PRESETS, MachineSpec, get_machine
from .core import MemoryReport, TileMemory, TileMemoryError
from .ops.conv import (ConvRun, clear_plan_cache, conv2d, estimate_conv2d, plan_cache_info, plan_conv2d,
                       set_plan_cache_limit)
from .ops import MatmulRun, estimate_matmul, matmul
from .ops.conv_grad import (conv2d_backward_data, conv2d_backward_weight,
                            estimate_conv2d_backward_data, estimate_conv2d_backward_weight)
from .ops.optim import (Optimizer, OptimizerRun, estimate_optimizer_step, get_optimizer,
                        optimizer_step)
from .ops.matmul_grad import (estimate_matmul_backward_data, estimate_matmul_backward_weight,
                              matmul_backward_data, matmul_backward_weight)
from .conv import ConvParams
from .core import Profile, SuperstepRecord
from .core import ComputeSet, Exchange, ExchangeError, Program, Superstep, VertexBatch
from .core import TileMapping, TileTensor
from .systems import (BOW_2000, BOW_POD16, BOW_POD64, IPU_M2000, IPU_POD16, IPU_POD64, CollectiveCost,
                      Link, LinkExchange, System, SystemConfigError, SystemDevice, SystemProgram,
                      SystemSuperstep, SystemTensor, all_gather, all_reduce, broadcast,
                      collective_seconds, get_system, reduce_scatter,
                      LayerCost, StageMemoryError, TrainingEstimate, TrainingRun, estimate_training,
                      run_training_step, TuneCandidate, TuneResult, tune,
                      compare_chips, ChipComparison, on_chip)
from .graph.tilefn import TileFunction, TileFunctionCompileError, TileFunctionError, TileShape, tile_function

# submodules users reach as ipukern.gpu / ipukern.scaling / ipukern.plots / ipukern.market
# (matplotlib is imported only when a plot is drawn)
from . import gpu, market, plots, scaling
from .sweeps import network_sweep, training_sweep
from . import design_space
from .design_space import ExploreResult, explore
from ._version import __version__
from . import nn
from .nn import Network, NetworkProfile, NetworkRun, estimate_network, from_torch, models, run_network

__all__ = [
    "__version__", "gpu", "market", "plots", "scaling", "nn", "design_space", "explore", "ExploreResult",
    "Network", "NetworkProfile", "NetworkRun", "estimate_network", "run_network", "models", "from_torch",
    "MachineSpec", "GC2", "GC200", "BOW", "PRESETS", "get_machine", "canonical_dtype",
    "Device", "run_program", "set_num_threads", "get_num_threads",
    "TileMemory", "TileMemoryError", "MemoryReport",
    "ConvParams", "Profile", "SuperstepRecord",
    "conv2d", "estimate_conv2d", "plan_conv2d", "ConvRun", "clear_plan_cache",
    "set_plan_cache_limit", "plan_cache_info",
    "matmul", "estimate_matmul", "MatmulRun",
    "conv2d_backward_data", "conv2d_backward_weight", "estimate_conv2d_backward_data",
    "estimate_conv2d_backward_weight", "matmul_backward_data", "matmul_backward_weight",
    "estimate_matmul_backward_data", "estimate_matmul_backward_weight",
    "Optimizer", "OptimizerRun", "optimizer_step", "estimate_optimizer_step", "get_optimizer",
    "Exchange", "ExchangeError", "ComputeSet", "VertexBatch", "Superstep", "Program",
    "TileMapping", "TileTensor",
    "Graph", "GraphTensor", "grid_mapping", "choose_grid",
    "System", "Link", "SystemConfigError", "get_system", "IPU_M2000", "IPU_POD16", "IPU_POD64",
    "BOW_2000", "BOW_POD16", "BOW_POD64", "SystemDevice", "SystemProgram", "SystemSuperstep",
    "SystemTensor", "LinkExchange", "all_reduce", "reduce_scatter", "all_gather", "broadcast",
    "collective_seconds", "CollectiveCost", "LayerCost", "StageMemoryError", "TrainingEstimate",
    "estimate_training", "TrainingRun", "run_training_step", "tune", "TuneResult", "TuneCandidate",
    "compare_chips", "ChipComparison", "on_chip",
    "network_sweep", "training_sweep",
    "tile_function", "TileFunction", "TileFunctionError", "TileFunctionCompileError", "TileShape",
]
