"""Hybrid GPU decode: fused Triton core in CUDA graphs, VRAM expert slots, CPU misses.

Import ``engine.gpu.backend`` for the backend; the kernel modules need Triton and are
imported lazily so that this package loads on machines without it.
"""
