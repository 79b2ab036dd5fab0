"""User BSP programs: the Graph facade, grid geometry and tile functions (Poplar's "Graph")."""
from .graph import Graph, GraphTensor, choose_grid, grid_mapping, split_bounds

__all__ = ["Graph", "GraphTensor", "choose_grid", "grid_mapping", "split_bounds"]
