"""Replay saved chat-completions requests against running OpenAI-compatible servers.

Each endpoint runs a *session*: every request of the file in order (a conversation and its
follow-ups), one at a time. Sessions run serially in mirrored order (A B B A ...; see
``ordering``). Bodies are sent as saved except that the temperature is set (1 by default: the
app's and the API's, so the sampler is timed as users run it; 0 for greedy answers), a seed is
set (same seed, same tokens on a server that honours it) and streaming with a final usage chunk
is switched on, so answers are comparable and decode can be timed.
Every request body and raw response stream is archived with its sha256.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from .ordering import mirrored_order
from .stream_meter import StreamMeter


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str  # the chat-completions URL

    @classmethod
    def parse(cls, spec: str) -> Endpoint:
        """``NAME=URL``; URL may be the server root, its ``/v1`` or the full chat-completions URL."""
        name, sep, url = spec.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or not name or not url:
            raise ValueError(f"endpoint {spec!r}: expected NAME=URL, e.g. neural=http://127.0.0.1:8080")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint {spec!r}: the URL must start with http:// or https://")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"endpoint {spec!r}: use letters, digits, '-', '_' or '.' in the name")
        return cls(name, chat_url(url))


def chat_url(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


def load_requests(path: Path) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                body = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from exc
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise ValueError(f"{path}:{n}: not a chat-completions body (no 'messages' list)")
            bodies.append(body)
    if not bodies:
        raise ValueError(f"{path}: no requests")
    return bodies


def prepare_body(body: dict[str, Any], model: str | None = None, nonce: str | None = None,
                 temperature: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """The body as sent: ``temperature`` and ``seed`` set, streamed with usage; optionally another
    model name and a session nonce in the first message (defeats a server's prompt cache across
    sessions)."""
    out = copy.deepcopy(body)
    out["temperature"] = temperature
    out["seed"] = seed
    out["stream"] = True
    opts = out.get("stream_options")
    out["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    if model is not None:
        out["model"] = model
    if nonce is not None and out["messages"]:
        first = out["messages"][0]
        if isinstance(first.get("content"), str):
            first["content"] = f"[{nonce}]\n{first['content']}"
    return out


@dataclass
class RequestRecord:
    session: int  # index in the mirrored order; warm-up sessions are negative
    endpoint: str
    request_index: int
    http_status: int | None
    ok: bool
    error: str | None
    ttft_s: float | None
    wall_s: float | None
    timed_tokens: int
    timed_s: float
    decode_tps: float | None
    token_source: str  # "usage" or "deltas"
    completion_tokens: int | None
    prompt_tokens: int | None
    cached_tokens: int | None
    deltas: int
    finish_reason: str | None
    answer_sha256: str | None
    request_sha256: str
    response_sha256: str
    request_file: str
    response_file: str
    warmup: bool = False  # a warm-up session's request: archived, left out of the summaries

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def send_one(http: aiohttp.ClientSession, url: str, payload: bytes, headers: dict[str, str]
                   ) -> tuple[int | None, bytes, StreamMeter]:
    """POST one body and meter its stream; returns (status, raw response bytes, meter)."""
    raw = bytearray()
    meter = StreamMeter(started=time.perf_counter())
    try:
        async with http.post(url, data=payload, headers=headers) as resp:
            status = resp.status
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                raw += chunk
                if status == 200:
                    meter.feed(chunk, now)
            meter.close(time.perf_counter())
            if status != 200:
                meter.error = f"HTTP {status}: {bytes(raw[:500]).decode('utf-8', errors='replace')}"
            return status, bytes(raw), meter
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        meter.close(time.perf_counter())
        meter.error = f"{type(exc).__name__}: {exc}"
        return None, bytes(raw), meter


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def run_replay(endpoints: list[Endpoint], bodies: list[dict[str, Any]], out_dir: Path, *, rounds: int = 2,
                     model: str | None = None, api_key: str | None = None, timeout_s: float = 3600.0,
                     session_nonce: bool = False, warmup_sessions: int = 0, temperature: float = 1.0,
                     seed: int = 0, log=print) -> list[RequestRecord]:
    """Warm-up sessions (each endpoint in forward order, ``warmup_sessions`` times) come first;
    their records are kept and archived but flagged, and summaries leave them out."""
    order = mirrored_order([e.name for e in endpoints], rounds)
    warm = [e.name for e in endpoints] * warmup_sessions
    plan = [(True, n) for n in warm] + [(False, n) for n in order]
    by_name = {e.name: e for e in endpoints}
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    records: list[RequestRecord] = []
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_read=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for k, (warmup, name) in enumerate(plan):
            session = k - len(warm)  # warm-ups get negative indices
            ep = by_name[name]
            tag = f"w{k:02d}" if warmup else f"s{session:02d}"
            run_dir = out_dir / "runs" / f"{tag}-{name}"
            run_dir.mkdir(parents=True, exist_ok=True)
            what = f"warm-up {k + 1}/{len(warm)}" if warmup else f"session {session + 1}/{len(order)}"
            log(f"{what}: {name} ({ep.url})")
            nonce = f"bench {tag} {time.time_ns()}" if session_nonce else None
            for i, body in enumerate(bodies):
                payload = json.dumps(prepare_body(body, model, nonce, temperature, seed),
                                     ensure_ascii=False).encode()
                status, raw, meter = await send_one(http, ep.url, payload, headers)
                req_file, resp_file = run_dir / f"q{i:02d}.request.json", run_dir / f"q{i:02d}.response.sse"
                req_file.write_bytes(payload)
                resp_file.write_bytes(raw)
                ok = status == 200 and meter.error is None and meter.first is not None
                rec = RequestRecord(
                    session=session, endpoint=name, request_index=i, http_status=status, ok=ok,
                    error=meter.error or (None if ok else "no output deltas in the stream"),
                    ttft_s=meter.ttft, wall_s=meter.wall, timed_tokens=meter.timed_tokens,
                    timed_s=meter.timed_seconds, decode_tps=meter.decode_tps, token_source=meter.token_source,
                    completion_tokens=meter.completion_tokens, prompt_tokens=meter.usage_field("prompt_tokens"),
                    cached_tokens=meter.usage_field("prompt_tokens_details", "cached_tokens"),
                    deltas=meter.deltas, finish_reason=meter.finish_reason,
                    answer_sha256=meter.answer_sha256() if ok else None,
                    request_sha256=_sha(payload), response_sha256=_sha(raw),
                    request_file=str(req_file.relative_to(out_dir)), response_file=str(resp_file.relative_to(out_dir)),
                    warmup=warmup)
                records.append(rec)
                rate = f"{rec.decode_tps:.2f} tok/s" if rec.decode_tps else "-"
                ttft = f"{rec.ttft_s:.2f} s" if rec.ttft_s is not None else "-"
                log(f"  q{i}: {'ok' if ok else 'FAILED'}  TTFT {ttft}  decode {rate} "
                    f"({rec.timed_tokens} tok / {rec.timed_s:.2f} s, from {rec.token_source})"
                    + (f"  error: {rec.error}" if rec.error else ""))
    return records


def write_manifest(out_dir: Path) -> Path:
    """SHA256SUMS over every archived file (``sha256sum -c SHA256SUMS`` verifies the archive)."""
    lines = []
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        lines.append(f"{_sha(path.read_bytes())}  {path.relative_to(out_dir).as_posix()}\n")
    manifest = out_dir / "SHA256SUMS"
    manifest.write_text("".join(lines))
    return manifest
