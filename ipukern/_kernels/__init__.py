"""Compiled kernels (Cython). Inputs are validated by the Python layer before any call.

Callers import these modules inside the functions that run a kernel, not at module level:
the package then imports (and estimate mode, the planners and the docs work) in a checkout
whose extensions are not built; only executing a program needs them.
"""
