"""Compiled kernels (Cython). Inputs are validated by the Python layer before any call."""
