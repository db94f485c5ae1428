"""Expert store (repacked MXFP4 experts, memory-mapped) and the CPU experts that read it."""
