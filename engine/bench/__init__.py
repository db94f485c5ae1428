"""Device benchmarks of the GPU engine (run on the GPU machine by engine/bench/device_run.sh)."""
