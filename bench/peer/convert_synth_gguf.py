"""A synthetic gpt-oss checkpoint (``neural synth``) -> GGUF with llama.cpp's own converter.

Runs the convert_hf_to_gguf.py bundled with the llama.cpp source that build_llama_cpp.sh
unpacked (its gguf-py alongside), so the MXFP4 expert blocks are repacked by llama.cpp's code,
not ours. One patch: a synthetic tokenizer has no registered pre-tokenizer hash, so the converter
is told it is gpt-oss's (o200k, "gpt-4o"); the bench feeds token ids, so text splitting never runs.

Usage: python bench/peer/convert_synth_gguf.py LLAMA_CPP_DIR CHECKPOINT_DIR OUT.gguf
(LLAMA_CPP_DIR: WORKDIR/src/vendor/llama.cpp from build_llama_cpp.sh; needs torch and
transformers, both in the project's test extra.)
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    llama_dir, ckpt, out = (Path(a).resolve() for a in argv)
    if not (llama_dir / "convert_hf_to_gguf.py").is_file():
        print(f"no convert_hf_to_gguf.py in {llama_dir}", file=sys.stderr)
        return 2
    sys.path[:0] = [str(llama_dir / "gguf-py"), str(llama_dir)]
    import convert_hf_to_gguf  # llama.cpp's converter: importable only after the path edit
    from conversion import base

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-4o"  # type: ignore[method-assign]
    sys.argv = ["convert_hf_to_gguf.py", str(ckpt), "--outfile", str(out), "--outtype", "bf16"]
    convert_hf_to_gguf.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
