"""Recipe for the bundled demo model: a small gpt-oss trained on Python standard-library code.

corpus.py builds harmony chat samples from the stdlib's functions, tokenizer_train.py trains a
byte-level BPE, train.py trains ``GptOssForCausalLM`` (transformers) at a small size and
export.py writes the result in the exact HF gpt-oss layout with MXFP4 experts.
"""
