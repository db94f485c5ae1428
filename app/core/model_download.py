"""Downloading a gpt-oss checkpoint from the Hugging Face hub: resumable, verified, cancellable.

huggingface_hub speaks the hub's protocol: the repo listing with each file's size and hash, the
HEAD that resolves a file, ranged GETs with its own retries when a connection drops. Its
``hf_hub_download`` deletes a partial file when a download fails, so a cancelled or crashed
60 GiB download would start over; here each file is fetched with the hub's ``http_get`` into a
``.part`` file that survives, and the next run resumes it with a Range request. Every file is
checked against the hub's metadata (sha256 for LFS files, the git blob id for the small ones)
before it takes its final name; a file that fails the check is fetched again once. The listing
comes from app/core/model_hub.py, the progress reports from app/core/model_progress.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.core.model_hub import (
    GIB,
    MIB,
    DownloadCancelled,
    DownloadError,
    NotEnoughDiskSpace,
    RemoteFile,
    RepoListing,
    VerificationError,
)
from app.core.model_progress import DownloadProgress, Meter, Progress, Sink

PART_DIR = ".download"  # partial files, kept across runs so a download resumes
MANIFEST = ".neural-download.json"  # what was fetched from where, and which files passed the check
HEADROOM = 256 * MIB  # left free after the download and the store
CHUNK = 4 * MIB  # hashing reads
# Bytes per chunk huggingface_hub reads from the socket (its default is 10 MiB): progress moves in
# these steps, and an interruption loses at most one chunk.
HTTP_CHUNK = 1 * MIB


# ---- what is on disk --------------------------------------------------------------------------
def part_path(dest: Path, f: RemoteFile) -> Path:
    """Named by the content hash: a file changed on the hub never resumes from stale bytes."""
    tag = (f.sha256 or f.blob_id or "nohash")[:16]
    return dest / PART_DIR / f"{f.path}.{tag}.part"


def read_manifest(dest: Path) -> dict[str, Any]:
    try:
        data = json.loads((dest / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_manifest(dest: Path, data: dict[str, Any]) -> None:
    tmp = dest / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, dest / MANIFEST)


def present_bytes(listing: RepoListing, dest: Path) -> int:
    """Bytes already here: whole files of the right size and the partial ones."""
    n = 0
    for f in listing.files:
        final, part = dest / f.path, part_path(dest, f)
        if final.is_file() and final.stat().st_size == f.size:
            n += f.size
        elif part.is_file():
            n += min(part.stat().st_size, f.size)
    return n


def free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists() and probe.parent != probe:  # the folder may not exist yet
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_disk_space(listing: RepoListing, dest: Path, extra: int = 0,
                     free: Callable[[Path], int] = free_bytes) -> int:
    """Refuse before writing anything when the rest of the download plus ``extra`` (the expert store)
    would not fit; returns the bytes still needed."""
    need = listing.total_bytes - present_bytes(listing, dest) + extra
    have = free(dest)
    if need + HEADROOM > have:
        raise NotEnoughDiskSpace(
            f"Not enough disk space for {listing.repo_id} in {dest}: it needs {need / GIB:.2f} GiB more "
            f"({(need - extra) / GIB:.2f} GiB still to download + {extra / GIB:.2f} GiB for the expert store) "
            f"plus {HEADROOM / GIB:.2f} GiB to spare, and {have / GIB:.2f} GiB is free. Free some space or pick "
            f"another folder.")
    return need


# ---- hashing ----------------------------------------------------------------------------------
def file_digest(path: Path, f: RemoteFile, cancel: threading.Event | None = None,
                report: Callable[[int], None] | None = None) -> str:
    """sha256 for LFS files, else the git blob id (sha1 over "blob <size>\\0" + content)."""
    h = hashlib.sha256() if f.sha256 else hashlib.sha1()
    if not f.sha256:
        h.update(b"blob %d\0" % path.stat().st_size)
    done = 0
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled("Download cancelled")
            h.update(chunk)
            done += len(chunk)
            if report is not None:
                report(done)
    return h.hexdigest()


def expected_digest(f: RemoteFile) -> str | None:
    return f.sha256 or f.blob_id


# ---- the download -----------------------------------------------------------------------------
def download(listing: RepoListing, dest: str | Path, *, endpoint: str | None = None,
             token: str | bool | None = None, cancel: threading.Event | None = None,
             progress: Progress | None = None, only: Iterable[str] | None = None, extra_bytes: int = 0,
             free: Callable[[Path], int] = free_bytes) -> Path:
    """Fetch the listing's files (or ``only`` those) into ``dest``, resuming partial files and
    verifying each; returns ``dest``. Raises DownloadError (NotEnoughDiskSpace, DownloadCancelled,
    VerificationError) with a message for the user."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set(only) if only is not None else None
    files = [f for f in listing.files if wanted is None or f.path in wanted]
    sub = RepoListing(listing.repo_id, listing.revision, tuple(files))
    check_disk_space(sub, dest, extra_bytes, free)
    manifest = read_manifest(dest)
    if manifest.get("repo_id") != listing.repo_id or manifest.get("revision") != listing.revision:
        manifest = {"repo_id": listing.repo_id, "revision": listing.revision, "files": {}}
    manifest["complete"] = False
    manifest["total_bytes"] = listing.total_bytes
    _write_manifest(dest, manifest)
    meter = Meter(sub.total_bytes, present_bytes(sub, dest), progress)
    for f in files:
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled("Download cancelled")
        meter.file = f.path
        if _already_verified(dest, f, manifest, cancel, progress):
            continue
        meter.done = present_bytes(sub, dest)
        _fetch_verified(listing, f, dest, endpoint, token, cancel, meter, progress)
        st = (dest / f.path).stat()
        manifest["files"][f.path] = {"size": f.size, "digest": expected_digest(f), "mtime_ns": st.st_mtime_ns}
        _write_manifest(dest, manifest)
    meter.add(0, force=True)
    have = {f.path for f in listing.files if f.path in manifest["files"]}
    manifest["complete"] = have == {f.path for f in listing.files}
    _write_manifest(dest, manifest)
    if manifest["complete"]:
        remove_partial(dest)  # leftovers of a version the hub no longer has
    else:
        with contextlib.suppress(OSError):
            (dest / PART_DIR).rmdir()  # only when empty
    return dest


def _already_verified(dest: Path, f: RemoteFile, manifest: dict[str, Any], cancel: threading.Event | None,
                      progress: Progress | None) -> bool:
    """A file here passes when the manifest vouches for it unchanged, or when its hash matches.
    A file that fails is removed (it is fetched again)."""
    final = dest / f.path
    if not final.is_file():
        manifest["files"].pop(f.path, None)
        return False
    st = final.stat()
    rec = manifest["files"].get(f.path)
    if (rec and rec.get("digest") == expected_digest(f) and rec.get("size") == f.size == st.st_size
            and rec.get("mtime_ns") == st.st_mtime_ns):
        return True
    ok = st.st_size == f.size and file_digest(final, f, cancel, _verify_report(f, progress)) == expected_digest(f)
    if ok:
        manifest["files"][f.path] = {"size": f.size, "digest": expected_digest(f), "mtime_ns": st.st_mtime_ns}
        return True
    manifest["files"].pop(f.path, None)
    final.unlink()  # damaged or from another version: fetched again
    return False


def _verify_report(f: RemoteFile, progress: Progress | None) -> Callable[[int], None] | None:
    """Hash progress, at most ten reports a second (and the last)."""
    if progress is None:
        return None
    last = [0.0]

    def report(done: int) -> None:
        now = time.monotonic()
        if now - last[0] >= Meter.EVERY or done >= f.size:
            last[0] = now
            progress(DownloadProgress("verify", f.path, done, f.size, 0.0, None))

    return report


def _fetch_verified(listing: RepoListing, f: RemoteFile, dest: Path, endpoint: str | None,
                    token: str | bool | None, cancel: threading.Event | None, meter: Meter,
                    progress: Progress | None) -> None:
    part = part_path(dest, f)
    part.parent.mkdir(parents=True, exist_ok=True)
    want = expected_digest(f)
    for attempt in (1, 2):
        _fetch(listing, f, part, endpoint, token, cancel, meter)
        got = file_digest(part, f, cancel, _verify_report(f, progress))
        if got == want:
            final = dest / f.path
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, final)
            return
        part.unlink()
        meter.add(-f.size)
        if attempt == 2:
            kind = "sha256" if f.sha256 else "git blob id"
            raise VerificationError(f"{f.path} from {listing.repo_id} failed its check twice: {kind} {got} is not "
                                    f"the hub's {want}. The download was damaged; try again later.")


def _fetch(listing: RepoListing, f: RemoteFile, part: Path, endpoint: str | None, token: str | bool | None,
           cancel: threading.Event | None, meter: Meter) -> None:
    from huggingface_hub import constants
    from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url, http_get
    from huggingface_hub.utils import build_hf_headers
    from huggingface_hub.utils.tqdm import silent_tqdm

    resume = part.stat().st_size if part.is_file() else 0
    if resume > f.size:  # not ours to trust
        part.unlink()
        meter.add(-f.size)
        resume = 0
    if resume == f.size:
        return
    where = endpoint or constants.ENDPOINT
    constants.DOWNLOAD_CHUNK_SIZE = HTTP_CHUNK
    url = hf_hub_url(listing.repo_id, f.path, revision=listing.revision, endpoint=endpoint)
    headers = build_hf_headers(token=token)
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint, retry_on_errors=True)
        if meta.size is not None and meta.size != f.size:
            raise DownloadError(f"{f.path}: the hub now says {meta.size} bytes, its listing said {f.size}; "
                                f"start the download again")
        location = meta.location or url
        if urlsplit(location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a signed CDN URL: the hub token is not for that host
        with part.open("r+b" if resume else "wb") as raw:
            raw.seek(resume)
            http_get(location, Sink(raw, meter, cancel), resume_size=resume,  # type: ignore[arg-type]
                     headers=headers, expected_size=f.size, displayed_filename=f.path,
                     tqdm_class=silent_tqdm)  # type: ignore[arg-type]
    except DownloadError:
        raise
    except Exception as exc:
        kept = part.stat().st_size if part.is_file() else 0
        raise DownloadError(f"Downloading {f.path} from {where} failed ({type(exc).__name__}: {exc}). "
                            f"{kept / MIB:.1f} MiB of it is kept: downloading again resumes from there.") from exc


def remove_partial(dest: str | Path) -> None:
    shutil.rmtree(Path(dest) / PART_DIR, ignore_errors=True)
