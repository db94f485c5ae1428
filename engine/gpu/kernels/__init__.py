"""Triton kernels of the GPU decode path (imported only where Triton is available)."""
