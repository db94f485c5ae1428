"""``neural serve``: the local OpenAI-compatible API, headless."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import logging.handlers
import os
import signal
import sys
from pathlib import Path

from .common import add_engine_arguments, fail, load_engine

NAME = "serve"
HELP = "Serve the model over a local OpenAI-compatible HTTP API (chat completions, completions, responses)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    from app.api.config import DEFAULT_HOST, DEFAULT_MAX_BODY_MB, DEFAULT_PORT, DEFAULT_QUEUE

    add_engine_arguments(p)
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}; anything else exposes the API to the network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 = any free)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="require 'Authorization: Bearer KEY' on every /v1 request, KEY being this file's first line "
                        "(or set NEURAL_API_KEY)")
    p.add_argument("--api-key", default=None,
                   help="the key on the command line (visible to every local user in `ps`: prefer --api-key-file)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser calls from this origin (repeatable, e.g. http://localhost:3000); off by default")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="accept this Host header name besides localhost/127.0.0.1/[::1] (repeatable)")
    p.add_argument("--queue", type=int, default=DEFAULT_QUEUE,
                   help=f"requests that may wait behind the running one before 429 (default {DEFAULT_QUEUE})")
    p.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                   help=f"largest accepted request body in MiB (default {DEFAULT_MAX_BODY_MB:g})")
    p.add_argument("--model-id", default=None, help="model id to report in /v1/models (default: the folder name)")
    p.add_argument("--log-file", default=None, metavar="FILE",
                   help="access log file (default: api.log in the app's log folder; 'none' for the console only)")


def api_key(args: argparse.Namespace) -> str | None:
    """--api-key-file, else NEURAL_API_KEY, else --api-key; never printed."""
    if args.api_key_file:
        try:
            lines = Path(args.api_key_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --api-key-file {args.api_key_file}: {exc}") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise ValueError(f"--api-key-file {args.api_key_file} is empty")
        return key
    env = os.environ.get("NEURAL_API_KEY", "").strip()
    if env:
        return env
    if args.api_key:
        print("warning: --api-key is visible to other local users (ps); use --api-key-file or NEURAL_API_KEY",
              file=sys.stderr)
    return str(args.api_key) if args.api_key else None


def setup_logging(log_file: str | None) -> Path | None:
    """Access log and server messages on the console and in a file, whatever the root logger says
    (the CLI sets it to ERROR before this runs)."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    path: Path | None = None
    if log_file != "none":
        if log_file:
            path = Path(log_file)
        else:
            try:
                from app.core.paths import AppPaths  # type: ignore[import-not-found]
            except ImportError:
                from app.gui.paths import AppPaths  # type: ignore[import-not-found,no-redef]
            path = AppPaths.default().log_dir / "api.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.handlers.RotatingFileHandler(path, maxBytes=10 << 20, backupCount=3,
                                                                 encoding="utf-8"))
        except OSError as exc:
            print(f"warning: no access log file ({exc})", file=sys.stderr)
            path = None
    for h in handlers:
        h.setFormatter(fmt)
    for name in ("app.api", "engine"):
        lg = logging.getLogger(name)
        lg.setLevel(logging.INFO)
        lg.propagate = False
        for h in list(lg.handlers):
            lg.removeHandler(h)
        for h in handlers:
            lg.addHandler(h)
    return path


def run(args: argparse.Namespace) -> int:
    from app.api import ApiServer, ServerConfig, serve_forever

    try:
        config = ServerConfig(host=args.host, port=args.port, api_key=api_key(args),
                              cors_origins=tuple(args.cors_origin), allowed_hosts=tuple(args.allow_host),
                              max_waiting=args.queue, max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                              model_id=args.model_id)
    except ValueError as exc:
        return fail(str(exc))
    log_path = setup_logging(args.log_file)
    engine = load_engine(args)
    if engine.info.note:
        print(f"[{engine.info.name}: {engine.info.note}]", file=sys.stderr)
    from app.core.paths import AppPaths

    # conversations' K/V states wait here while another conversation uses the engine
    server = ApiServer(engine, config, states_dir=AppPaths.default().states_dir / "api")

    async def main() -> None:
        await server.start()
        print(f"Serving {server.model_id} at {server.url}/v1 (Ctrl+C stops)"
              + (f"; access log {log_path}" if log_path else "") + ("; API key required" if config.api_key else ""),
              file=sys.stderr, flush=True)
        if config.host not in ("127.0.0.1", "localhost", "::1") and config.api_key is None:
            print("warning: listening beyond loopback without an API key", file=sys.stderr)
        task = asyncio.current_task()
        # SIGTERM (service managers, `kill`) stops as cleanly as Ctrl+C: cancel, then stop().
        with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
            if task is not None:
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve_forever(server)

    try:
        asyncio.run(main())
    except OSError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0
