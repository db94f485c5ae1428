"""The native expert kernel's benchmarks: neural bench kernel (kernel_bench.py) and the C harnesses."""
