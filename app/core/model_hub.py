"""The Hugging Face hub's side of a model download: which files, how big, with which hashes.

``list_repo`` asks the hub (through huggingface_hub's ``HfApi.model_info`` with the files'
metadata) for a repo's files at one commit and keeps the ones the engine reads; the errors a
download can end with live here too, each with a message for the user.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
ENGINE_SUFFIXES = (".json", ".safetensors", ".jinja")  # the top-level files the engine reads
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class DownloadError(RuntimeError):
    """A download that cannot go on; the message says why and what to do."""


class DownloadCancelled(DownloadError):
    pass


class NotEnoughDiskSpace(DownloadError):
    pass


class VerificationError(DownloadError):
    pass


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str | None  # git object id (the only hash the hub gives for small files)


@dataclass(frozen=True)
class RepoListing:
    repo_id: str
    revision: str  # the commit every file is fetched at, so a push mid-download cannot mix versions
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def folder_name(repo_id: str) -> str:
    return repo_id.replace("/", "--")


def check_repo_id(repo_id: str) -> str:
    repo_id = repo_id.strip()
    if not REPO_ID.match(repo_id):
        raise DownloadError(f"{repo_id!r} is not a Hugging Face repo id: expected owner/name, e.g. openai/gpt-oss-20b")
    return repo_id


# ---- the listing ------------------------------------------------------------------------------
def engine_files(siblings: Iterable[Any]) -> tuple[RemoteFile, ...]:
    """The files the engine reads: top-level configs, tokenizer, template and safetensors weights
    (gpt-oss repos also carry original/ and metal/ copies of the weights, as large again)."""
    out = []
    for s in siblings:
        name = s.rfilename
        if "/" in name or not name.endswith(ENGINE_SUFFIXES):
            continue
        lfs = s.lfs
        size = lfs.size if lfs is not None else s.size
        if size is None:
            raise DownloadError(f"the hub listing gives no size for {name}")
        out.append(RemoteFile(name, int(size), lfs.sha256 if lfs is not None else None, s.blob_id))
    return tuple(sorted(out, key=lambda f: (f.sha256 is not None, f.path)))  # small files first


def list_repo(repo_id: str, revision: str = "main", endpoint: str | None = None,
              token: str | bool | None = None) -> RepoListing:
    """The repo's engine files with sizes and hashes, pinned to the revision's commit."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    repo_id = check_repo_id(repo_id)
    where = endpoint or constants.ENDPOINT
    if constants.is_offline_mode():
        raise DownloadError("Downloads are switched off: HF_HUB_OFFLINE is set in the environment. Unset it to "
                            "download a model.")
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(repo_id, revision=revision, files_metadata=True)
    except GatedRepoError as exc:
        raise DownloadError(f"{repo_id} is gated: accept its terms on the hub and log in (hf auth login)") from exc
    except RepositoryNotFoundError as exc:
        raise DownloadError(f"No model {repo_id!r} on {where}: check the repo id (owner/name)") from exc
    except RevisionNotFoundError as exc:
        raise DownloadError(f"{repo_id} has no revision {revision!r}") from exc
    except Exception as exc:
        raise DownloadError(f"Could not reach {where}: {type(exc).__name__}: {exc}") from exc
    files = engine_files(info.siblings or [])
    names = {f.path for f in files}
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        raise DownloadError(f"{repo_id} has no config.json and safetensors weights at its top level: not a "
                            f"gpt-oss checkpoint this app can run")
    if not info.sha:
        raise DownloadError(f"{where} gave no commit for {repo_id}@{revision}")
    return RepoListing(repo_id, info.sha, files)
