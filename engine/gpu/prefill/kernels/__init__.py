"""Triton kernels of the GPU prompt path (imported only where Triton is available)."""
