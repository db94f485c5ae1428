"""RAM-residency benchmarks (bench/device/residency.sh runs the suite on the GPU machine) and the trace replay."""
