"""A local HTTP server that speaks the Hugging Face hub's file protocol, for download tests.

What huggingface_hub asks of the hub, served from a folder (a synthetic checkpoint):
- ``GET /api/models/{repo}/revision/{rev}?blobs=true``: the commit and every file with its size,
  git blob id and, for LFS files (the safetensors), the sha256;
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag``; small files are served
  there, LFS files answer 302 to a CDN-style URL with ``X-Linked-Etag`` (the sha256) and
  ``X-Linked-Size``, as huggingface.co does;
- ``GET /cdn/{sha256}``: the bytes, with ``Range: bytes=N-`` answered 206 + ``Content-Range``.
Faults for the tests: cut a connection once mid-file, kill the whole server mid-file, corrupt a
file's first delivery, and a rate limit (so a cancel or a kill lands mid-file). Every request is
logged with its Range header.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors",)
CHUNK = 16 << 10


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubFile:
    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:
        if self.lfs:  # the git object of an LFS file is its pointer
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {len(self.data)}\n"
            return git_blob_id(pointer.encode())
        return git_blob_id(self.data)


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile]
    commit: str = "0123456789abcdef0123456789abcdef01234567"

    @classmethod
    def from_folder(cls, repo_id: str, folder: Path, extra: dict[str, bytes] | None = None) -> HubRepo:
        files = {p.name: HubFile(p.read_bytes(), p.name.endswith(LFS_SUFFIXES))
                 for p in sorted(folder.iterdir()) if p.is_file()}
        for name, data in (extra or {}).items():
            files[name] = HubFile(data, name.endswith(LFS_SUFFIXES))
        return cls(repo_id, files)

    def listing(self) -> dict[str, object]:
        sib = []
        for name, f in self.files.items():
            s: dict[str, object] = {"rfilename": name, "size": len(f.data), "blobId": f.blob_id}
            if f.lfs:
                s["lfs"] = {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}
            sib.append(s)
        return {"id": self.repo_id, "modelId": self.repo_id, "sha": self.commit, "private": False,
                "siblings": sib}


@dataclass
class Faults:
    rate: float = 0.0  # bytes/s per transfer; 0 = unlimited
    cut_once: dict[str, int] = field(default_factory=dict)  # file -> bytes sent before the connection drops
    kill_at: dict[str, int] = field(default_factory=dict)  # file -> bytes sent before the server dies
    corrupt: dict[str, int] = field(default_factory=dict)  # file -> how many deliveries get a flipped byte


class HubServer:
    def __init__(self, repos: list[HubRepo], faults: Faults | None = None) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.faults = faults or Faults()
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.auth: list[tuple[str, str | None]] = []  # (path, Authorization header)
        self.cdn_host = "127.0.0.1"  # "localhost": the CDN is another host, as huggingface.co's is
        self.killed = threading.Event()
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int | None = None) -> HubServer:
        hub = self

        class Handler(_Handler):
            server_hub = hub

        httpd = ThreadingHTTPServer(("127.0.0.1", self.port if port is None else port), Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self.killed.clear()
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def ranges(self, name: str) -> list[str | None]:
        """Range headers of the GETs that delivered ``name`` (None = the whole file)."""
        sha = next((f.sha256 for r in self.repos.values() for n, f in r.files.items() if n == name), "?")
        return [rng for m, p, rng in self.log if m == "GET" and (p.endswith("/" + name) or p.endswith(sha))]

    def find(self, sha: str) -> tuple[str, HubFile] | None:
        for r in self.repos.values():
            for name, f in r.files.items():
                if f.sha256 == sha:
                    return name, f
        return None


class _Handler(BaseHTTPRequestHandler):
    server_hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _error(self, code: int, error_code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(code)
        self.send_header("X-Error-Code", error_code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self, head: bool) -> None:
        hub = self.server_hub
        path = unquote(urlsplit(self.path).path)
        hub.log.append((self.command, path, self.headers.get("Range")))
        hub.auth.append((path, self.headers.get("Authorization")))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            return self._api(parts[2:])
        if parts[0] == "cdn" and len(parts) == 2:
            found = hub.find(parts[1])
            if found is None:
                return self._error(404, "EntryNotFound", "no such object")
            return self._send_bytes(found[0], found[1].data, head)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = hub.repos.get("/".join(parts[:2]))
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            if parts[3] not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            name = "/".join(parts[4:])
            f = repo.files.get(name)
            if f is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            if f.lfs:  # the hub sends LFS files to its CDN
                self.send_response(302)
                self.send_header("Location", f"http://{hub.cdn_host}:{hub.port}/cdn/{f.sha256}")
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                self.send_header("X-Linked-Size", str(len(f.data)))
                self.send_header("ETag", f'"{f.blob_id}"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            return self._send_bytes(name, f.data, head, {"X-Repo-Commit": repo.commit, "ETag": f'"{f.blob_id}"'})
        return self._error(404, "EntryNotFound", f"unknown path {path}")

    def _api(self, rest: list[str]) -> None:
        hub = self.server_hub
        if len(rest) >= 4 and rest[2] == "revision":
            repo_id, rev = "/".join(rest[:2]), rest[3]
        else:
            repo_id, rev = "/".join(rest[:2]), "main"
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if rev not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        body = json.dumps(repo.listing()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None

    def _send_bytes(self, name: str, data: bytes, head: bool, extra: dict[str, str] | None = None) -> None:
        hub, faults = self.server_hub, self.server_hub.faults
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
        if start > len(data):
            return self._error(416, "RangeNotSatisfiable", "range past the end")
        self.send_response(206 if start else 200)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if head:
            return None
        if faults.corrupt.get(name, 0) > 0 and not start:
            faults.corrupt[name] -= 1
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
        stop_at, kill = len(data), False
        if name in faults.cut_once and faults.cut_once[name] > start:
            stop_at = faults.cut_once.pop(name)
        elif name in faults.kill_at and faults.kill_at[name] > start:
            stop_at, kill = faults.kill_at.pop(name), True
        pos = start
        while pos < stop_at:
            end = min(pos + CHUNK, stop_at)
            try:
                self.wfile.write(data[pos:end])
                self.wfile.flush()
            except OSError:
                return None
            if faults.rate:
                time.sleep((end - pos) / faults.rate)
            pos = end
        if stop_at < len(data):  # the fault: the connection (or the whole server) goes away mid-file
            if kill:
                hub.stop()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            if kill:
                hub.killed.set()
        return None
