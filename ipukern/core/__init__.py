"""The simulated BSP machine: tile memory, tensors, programs, the engine, cost and profiles.

Nothing here knows about convolutions; the conv pipeline and user graphs build on it.
"""
