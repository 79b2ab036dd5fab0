"""The PopLibs-style convolution pipeline, one stage per module (each imports only the
ones above it):

- ``params``: ConvParams, and the expandDims transform's params;
- ``estimators``: the vertex cycle estimates, per vertex family;
- ``reduce``, ``layout``, ``mapping``, ``homes``: staged reductions, tile geometry, tensor
  mappings and homes;
- ``sizing`` and ``search``: the planner's candidate splits, their busiest tile's bytes
  and cycles, and the branch-and-bound search over them;
- ``expand``: the expandDims transform's cost model;
- ``planner``: ConvPlan, the direct plan and the plan under one expandDims transform;
- ``buffers``, ``build``, ``expand_build``: the program of a plan (ConvProgram), and the
  transform built on chip;
- ``compile``: the conv entry, :func:`plan_conv` and :func:`build_conv_program` (direct
  or expandDims);
- ``codelet`` (the compiled per-tile conv vertex), ``passes`` (a conv's gradient passes).

Host-speed machinery (the forked planning worker) is in :mod:`.host`, apart from the
model. This face names what the layers above (ops, nn, systems, the CLI) use.
"""
from .build import ConvProgram, bias_codelets
from .compile import build_conv_program, plan_conv
from .layout import MAX_INPUT_OWNERS, Split
from .mapping import channel_tile_pairs, periodic_starts, runs_per_tile
from .params import EXPAND_CANDIDATES, MAX_KERNEL_PARAM, ConvParams, expand_candidates, expanded_params, pair
from .passes import PassOperand, backward_data_pass, weight_update_pass
from .planner import (AVAILABLE_MEMORY_PROPORTION, ConvPlan, PlanCandidate, normalize_amp,
                      rank_candidates, temp_bytes_bound)
from .search import clear_planner_caches

__all__ = ["ConvParams", "pair", "MAX_KERNEL_PARAM", "EXPAND_CANDIDATES", "expand_candidates",
           "expanded_params", "ConvPlan", "PlanCandidate", "plan_conv", "rank_candidates",
           "normalize_amp", "temp_bytes_bound", "AVAILABLE_MEMORY_PROPORTION", "clear_planner_caches",
           "ConvProgram", "build_conv_program", "bias_codelets", "Split", "MAX_INPUT_OWNERS",
           "PassOperand", "backward_data_pass", "weight_update_pass", "channel_tile_pairs",
           "periodic_starts", "runs_per_tile"]
