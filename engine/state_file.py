"""Conversation K/V state on disk, bound to the model fingerprint (resume after a restart)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

log = logging.getLogger(__name__)
FORMAT = "neural-kv-1"


def save_state(path: Path, fingerprint: str, ids: list[int], tensors: dict[str, torch.Tensor]) -> None:
    meta = {"format": FORMAT, "fingerprint": fingerprint, "ids": json.dumps(ids)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)
    os.replace(tmp, path)  # never leave a half-written state where a good one was


def load_state(path: Path, fingerprint: str) -> tuple[list[int], dict[str, torch.Tensor]] | None:
    if not path.is_file():
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            log.warning("%s: not a conversation state file", path)
            return None
        if meta.get("fingerprint") != fingerprint:
            log.info("%s: saved for another model or checkpoint; it will be reprocessed", path)
            return None
        ids = [int(i) for i in json.loads(meta["ids"])]
        return ids, load_file(str(path))
    except Exception as exc:  # a corrupt state file only costs a reprocess
        log.warning("%s: unreadable conversation state (%s)", path, exc)
        return None
