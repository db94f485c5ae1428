"""The GPU prompt path: layer-major, expert-grouped prompt processing (issue 5).

``engine.gpu.prefill.runner.PrefillRunner`` turns a block of prompt tokens into K/V in the
GPU cache/ring (exactly where decode reads it) and the logits of the last token. Kernel
modules need Triton and are imported only by the runner; the planning helpers
(``grouping``, ``tiles``) import without it. Integration steps: README.md in this folder.
"""
