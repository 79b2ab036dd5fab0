"""The PopLibs-style convolution pipeline, one stage per module.

params (ConvParams, the expandDims params) -> estimators (vertex cycles) -> search
(candidate splits, scored) -> planner (ConvPlan: the direct plan, and a plan under
expandDims) -> expand (the transform's model) -> layout (tile geometry) -> buffers -> build
(ConvProgram) / expand_build (the transform on chip) -> compile (the conv entry:
:func:`plan_conv` and :func:`build_conv_program`, direct or expandDims) -> codelet (the
compiled per-tile conv vertex). Host-speed machinery (the forked planning worker) is in
:mod:`.host`, apart from the model.

This face names what the layers above (ops, nn, systems, the CLI) use.
"""
from .build import ConvProgram, bias_codelets
from .compile import build_conv_program, plan_conv
from .layout import MAX_INPUT_OWNERS, Split
from .mapping import channel_tile_pairs, periodic_starts, runs_per_tile
from .params import EXPAND_CANDIDATES, MAX_KERNEL_PARAM, ConvParams, expand_candidates, expanded_params, pair
from .passes import PassOperand, backward_data_pass, weight_update_pass
from .planner import AVAILABLE_MEMORY_PROPORTION, ConvPlan, PlanCandidate, rank_candidates, temp_bytes_bound
from .search import clear_planner_caches

__all__ = ["ConvParams", "pair", "MAX_KERNEL_PARAM", "EXPAND_CANDIDATES", "expand_candidates",
           "expanded_params", "ConvPlan", "PlanCandidate", "plan_conv", "rank_candidates",
           "temp_bytes_bound", "AVAILABLE_MEMORY_PROPORTION", "clear_planner_caches",
           "ConvProgram", "build_conv_program", "bias_codelets", "Split", "MAX_INPUT_OWNERS",
           "PassOperand", "backward_data_pass", "weight_update_pass", "channel_tile_pairs",
           "periodic_starts", "runs_per_tile"]
