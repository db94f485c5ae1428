"""Downloading a gpt-oss checkpoint from the Hugging Face hub: resumable, verified, cancellable.

huggingface_hub speaks the hub's protocol: the repo listing with each file's size and hash, the
HEAD that resolves a file, ranged GETs with its own retries when a connection drops. Its
``hf_hub_download`` deletes a partial file when a download fails, so a cancelled or crashed
60 GiB download would start over; here each file is fetched with the hub's ``http_get`` into a
``.part`` file that survives, and the next run resumes it with a Range request. Every file is
checked against the hub's metadata (sha256 for LFS files, the git blob id for the small ones)
before it takes its final name; a file that fails the check is fetched again once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

GIB = 1 << 30
MIB = 1 << 20
PART_DIR = ".download"  # partial files, kept across runs so a download resumes
MANIFEST = ".neural-download.json"  # what was fetched from where, and which files passed the check
HEADROOM = 256 * MIB  # left free after the download and the store
ENGINE_SUFFIXES = (".json", ".safetensors", ".jinja")  # the top-level files the engine reads
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
CHUNK = 4 * MIB  # hashing reads
# Bytes per chunk huggingface_hub reads from the socket (its default is 10 MiB): progress moves in
# these steps, and an interruption loses at most one chunk.
HTTP_CHUNK = 1 * MIB


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


@dataclass(frozen=True)
class DownloadProgress:
    phase: str  # "download" or "verify"
    file: str
    done: int  # bytes of the whole model present (download) or of this file hashed (verify)
    total: int
    rate: float  # bytes/s over the last seconds (0 until measured)
    eta_s: float | None


Progress = Callable[[DownloadProgress], None]


def progress_text(p: DownloadProgress) -> str:
    """One line for the page: what, how far, how fast, how long still."""
    from engine.plan import fmt

    if p.phase == "verify":
        return f"Checking {p.file} against the hub's hash: {fmt(p.done)} of {fmt(p.total)}"
    pct = f" ({100 * p.done / p.total:.0f} %)" if p.total else ""
    text = f"Downloading {p.file}: {fmt(p.done)} of {fmt(p.total)}{pct}"
    if p.rate > 0:
        text += f" · {p.rate / MIB:.1f} MiB/s"
    if p.eta_s is not None and p.done < p.total:
        eta = p.eta_s
        text += (f" · about {eta:.0f} s left" if eta < 90 else f" · about {eta / 60:.0f} min left" if eta < 5400
                 else f" · about {eta / 3600:.1f} h left")
    return text


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


# ---- progress ---------------------------------------------------------------------------------
class _Meter:
    """Bytes of the whole model present, the rate over a sliding window, throttled reports."""

    WINDOW = 5.0
    EVERY = 0.1

    def __init__(self, total: int, done: int, report: Progress | None) -> None:
        self.total, self.done, self.report = total, done, report
        self.file = ""
        self._samples: list[tuple[float, int]] = [(time.monotonic(), done)]
        self._last = 0.0

    def add(self, n: int, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if self.report is None or (not force and now - self._last < self.EVERY):
            return
        self._last = now
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.WINDOW:
            self._samples.pop(0)
        t0, d0 = self._samples[0]
        rate = (self.done - d0) / (now - t0) if now > t0 and self.done > d0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else None
        self.report(DownloadProgress("download", self.file, self.done, self.total, rate, eta))


class _Sink:
    """The file http_get writes to: counts bytes for the meter and stops on cancel."""

    def __init__(self, raw: Any, meter: _Meter, cancel: threading.Event | None) -> None:
        self.raw, self.meter, self.cancel = raw, meter, cancel

    def write(self, data: bytes) -> int:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled("Download cancelled")
        n: int = self.raw.write(data)
        self.meter.add(len(data))
        return n

    def tell(self) -> int:
        return int(self.raw.tell())

    def seek(self, pos: int, whence: int = 0) -> int:
        return int(self.raw.seek(pos, whence))

    def truncate(self, size: int | None = None) -> int:
        # http_get truncates when a server ignored the Range header and sent the whole file again
        before = os.fstat(self.raw.fileno()).st_size
        n = int(self.raw.truncate(size))
        self.meter.add(n - before)
        return n


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
    meter = _Meter(sub.total_bytes, present_bytes(sub, dest), progress)
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
    if progress is None:
        return None
    return lambda done: progress(DownloadProgress("verify", f.path, done, f.size, 0.0, None))


def _fetch_verified(listing: RepoListing, f: RemoteFile, dest: Path, endpoint: str | None,
                    token: str | bool | None, cancel: threading.Event | None, meter: _Meter,
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
           cancel: threading.Event | None, meter: _Meter) -> None:
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
            http_get(location, _Sink(raw, meter, cancel), resume_size=resume,  # type: ignore[arg-type]
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
