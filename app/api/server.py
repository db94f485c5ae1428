"""The embeddable API server: ``await ApiServer(engine, config).start()`` ... ``await stop()``.

It runs on whatever asyncio loop is current, so the same class serves ``neural serve``
(a plain ``asyncio.run``) and the desktop app (the qasync loop behind the API switch).
The engine may be swapped or be ``None`` while a model loads; requests then get a 503.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from engine.grammar import CompiledConstraint, Constraint, GrammarError, compile_constraint, prepare_vocabulary
from engine.types import Conversation

from . import prompt_size
from .app_key import SERVER_KEY
from .config import ServerConfig
from .engine_bridge import EngineBridge, Job, Work
from .errors import ApiError
from .fields import BODY_HASH_KEY
from .observe import REPLY_KEY, Metrics, add_warning_header, make_access_middleware, warn
from .security import CONFIG_KEY, MIDDLEWARES, add_cors_headers

if TYPE_CHECKING:
    from app.core.engine_worker import EngineWorker
    from engine.session import Engine

    from .reply import Reply

log = logging.getLogger(__name__)


class ApiServer:
    def __init__(self, engine: Engine | None, config: ServerConfig | None = None,
                 worker: EngineWorker | None = None, states_dir: Path | None = None) -> None:
        """``worker``: the desktop app's engine worker (one line for the GUI and the API); None runs
        this server's own. ``states_dir``: where conversations' K/V states wait while another runs."""
        self.config = config or ServerConfig()
        self._engine: Engine | None = None
        self.engine = engine
        self._worker = worker
        self.states_dir = states_dir
        self.bridge = EngineBridge(self.config.max_waiting, worker)
        self.started_at = time.time()
        self.requests_served = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port: int | None = None
        self.metrics = Metrics(self)
        self._grammars: collections.OrderedDict[tuple[int, str], CompiledConstraint] = collections.OrderedDict()

    @property
    def engine(self) -> Engine | None:
        return self._engine

    @engine.setter
    def engine(self, engine: Engine | None) -> None:
        """A new engine: its vocabulary is indexed for constrained output in the background, so a
        client's first ``response_format`` or tool call does not wait the ~1 s it takes at 201k tokens."""
        if engine is not None and engine is not self._engine:
            threading.Thread(target=_index_vocabulary, args=(engine,), name="neural-grammar-index",
                             daemon=True).start()
        self._engine = engine

    # ---- lifecycle -------------------------------------------------------------------------
    def build_app(self) -> web.Application:
        from . import routes_chat, routes_completions, routes_models, routes_responses

        app = web.Application(middlewares=[make_access_middleware(self), *MIDDLEWARES],
                              client_max_size=self.config.max_body_bytes)
        app[CONFIG_KEY] = self.config
        app[SERVER_KEY] = self
        app.on_response_prepare.append(add_cors_headers)
        app.on_response_prepare.append(add_warning_header)
        for module in (routes_models, routes_chat, routes_completions, routes_responses):
            app.add_routes(module.routes)
        return app

    async def start(self) -> None:
        """Bind and start serving on the running loop; ``self.port`` is the bound port."""
        if self._runner is not None:
            return
        self.bridge.start(self.engine, self.states_dir)
        # handler_cancellation: a vanished client cancels its handler, which cancels the
        # generation instead of letting it run to max_tokens.
        # keepalive_timeout also closes a connection whose request head never completes (slow headers)
        runner = web.AppRunner(self.build_app(), handler_cancellation=True, access_log=None,
                               keepalive_timeout=self.config.header_timeout_s)
        await runner.setup()
        # asyncio's default SO_REUSEADDR choice: on Windows it would let another process share the port.
        site = web.TCPSite(runner, self.config.host, self.config.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            await self.bridge.stop()
            raise OSError(exc.errno, f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}. "
                          f"Is another server using the port? Pick another with --port.") from exc
        self._runner, self._site = runner, site
        addresses = runner.addresses
        self.port = int(addresses[0][1]) if addresses else self.config.port
        self.started_at = time.time()
        log.info("API server listening on %s", self.url)

    async def stop(self) -> None:
        runner, self._runner, self._site = self._runner, None, None
        await self.bridge.stop()
        if runner is not None:
            await runner.cleanup()
        self.bridge = EngineBridge(self.config.max_waiting, self._worker)  # a later start() starts afresh

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        host = self.config.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    # ---- helpers for the routes ----------------------------------------------------------
    def require_engine(self) -> Engine:
        if self.engine is None:
            raise ApiError(503, "No model is loaded yet. Load one in the app, or start the server with "
                           "'neural serve MODEL_DIR'.", code="model_not_loaded")
        return self.engine

    @property
    def model_id(self) -> str:
        if self.config.model_id:
            return self.config.model_id
        return self.engine.info.name if self.engine is not None else "none"

    def context_limit(self, engine: Engine) -> int:
        return int(engine.settings.context)

    async def prompt_tokens(self, count: Callable[[], int]) -> int:
        """Token count of a prompt, computed off the event loop (long prompts take a while)."""
        return await asyncio.get_running_loop().run_in_executor(None, count)

    async def check_fits(self, engine: Engine, n_prompt: int, param: str = "messages", about: bool = False) -> None:
        limit = self.context_limit(engine)
        if n_prompt >= limit:
            raise ApiError(400, f"This model's context is {limit} tokens, but the prompt is {'about ' if about else ''}"
                           f"{n_prompt} tokens. Shorten the {param} (or start the engine with a larger context).",
                           param=param, code="context_length_exceeded")

    async def check_conversation_fits(self, engine: Engine, conv: Conversation, param: str) -> None:
        """A bound from the character count first (no tokenizing), then a count that leaves the loop free."""
        texts = prompt_size.conversation_texts(conv)
        low = prompt_size.lower_bound(texts, engine.tokenizer)
        if low >= self.context_limit(engine):
            await self.check_fits(engine, low, param, about=True)
        n = await self.prompt_tokens(
            lambda: prompt_size.estimate_conversation(conv, engine.tokenizer, lambda: len(engine.render(conv))))
        await self.check_fits(engine, n, param)

    async def check_text_fits(self, engine: Engine, text: str, param: str) -> None:
        low = prompt_size.lower_bound([text], engine.tokenizer)
        if low >= self.context_limit(engine):
            await self.check_fits(engine, low, param, about=True)
        if len(text) < prompt_size.EXACT_CHARS:
            n = await self.prompt_tokens(lambda: engine.count_tokens(text))
        else:
            n = await self.prompt_tokens(lambda: prompt_size.batch_count(engine.tokenizer, [text]))
        await self.check_fits(engine, n, param)

    async def compile(self, engine: Engine, constraint: Constraint | None, param: str,
                      max_tokens: int) -> CompiledConstraint | None:
        """Check and bind a constraint (cached; off the loop: the first one indexes the vocabulary).
        The free reasoning gets at most half of ``max_tokens`` (then ``<|end|>`` is forced), so the
        constrained answer always has room."""
        if constraint is None:
            return None
        constraint = dataclasses.replace(constraint, analysis_budget=max_tokens // 2)
        key = (id(engine), json.dumps([constraint.kind, constraint.schema, constraint.strict, max_tokens // 2,
                                       [(t.name, t.schema) for t in constraint.tools]], sort_keys=True))
        hit = self._grammars.get(key)
        if hit is not None:
            self._grammars.move_to_end(key)
            return hit

        def work() -> CompiledConstraint:
            return compile_constraint(constraint, engine.tokenizer, engine.special, int(engine.config.vocab_size))

        try:
            compiled = await asyncio.get_running_loop().run_in_executor(None, work)
        except GrammarError as exc:
            where = constraint.schema_text or param
            raise ApiError(400, f"'{where}' cannot be enforced: {exc}.", param=where,
                           code="invalid_schema") from None
        self._grammars[key] = compiled
        while len(self._grammars) > 64:
            self._grammars.popitem(last=False)
        return compiled

    def submit(self, work: Work, request: web.Request | None = None, conversation: Conversation | None = None) -> Job:
        """Queue a generation. ``conversation`` keys its K/V state by its first messages, so it is
        restored after another conversation (an API client's or the GUI's) ran in between."""
        retry_key = request.get(BODY_HASH_KEY) if request is not None else None
        try:
            job = self.bridge.submit(work, retry_key, conversation_key(conversation) if conversation else None)
        except ApiError as exc:
            if exc.status == 429:
                self.metrics.rejected.inc()
            raise
        self.requests_served += 1
        return job

    def track(self, request: web.Request, reply: Reply, warnings: Sequence[str] = ()) -> None:
        """Register a generation for the access log and metrics; send the request's warnings."""
        request[REPLY_KEY] = reply
        for w in warnings:
            warn(request, w)

    def health(self) -> dict[str, Any]:
        eng = self.engine
        return {
            "status": "ok" if eng is not None else "loading",
            "model": self.model_id,
            "busy": self.bridge.busy,
            "waiting": self.bridge.waiting,
            "queue_limit": self.bridge.max_waiting,
            "requests": self.requests_served,
            "uptime_s": round(time.time() - self.started_at, 1),
        }




def _index_vocabulary(engine: Engine) -> None:
    try:
        prepare_vocabulary(engine.tokenizer, engine.special, int(engine.config.vocab_size))
    except Exception:  # an optimisation: the first constrained request builds it instead
        log.warning("vocabulary index for constrained output not prebuilt", exc_info=True)


def conversation_key(conv: Conversation) -> str:
    """A conversation's identity across its turns: its tools and first two messages (the system or
    developer instructions and the first user message), hashed."""
    head = [(m.role, m.content) for m in conv.messages[:2]]
    tools = [(t.name, t.description, t.parameters) for t in conv.tools]
    digest = hashlib.sha256(json.dumps([head, tools], sort_keys=True, default=str).encode()).hexdigest()
    return f"api-{digest[:24]}"


async def serve_forever(server: ApiServer) -> None:
    """Headless use: start, then wait until cancelled (Ctrl+C), then stop cleanly."""
    await server.start()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()
