"""The PopLibs-style convolution pipeline, one stage per module.

params (ConvParams) -> estimators (vertex cycles) -> planner (ConvPlan) -> layout (tile
geometry) -> build (ConvProgram) -> codelet (the compiled per-tile conv vertex).
"""
