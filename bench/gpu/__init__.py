"""Device benchmarks of the GPU engine (run on the GPU machine by bench/device/run.sh)."""
