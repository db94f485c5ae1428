"""``neural serve``: the local OpenAI-compatible API, headless."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from .common import add_engine_arguments, fail, load_engine

NAME = "serve"
HELP = "Serve the model over a local OpenAI-compatible HTTP API (chat completions, completions, responses)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    from app.api.config import DEFAULT_HOST, DEFAULT_MAX_BODY_MB, DEFAULT_PORT, DEFAULT_QUEUE

    add_engine_arguments(p)
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}; anything else exposes the API to the network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 = any free)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every /v1 request")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser calls from this origin (repeatable, e.g. http://localhost:3000); off by default")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="accept this Host header name besides localhost/127.0.0.1/[::1] (repeatable)")
    p.add_argument("--queue", type=int, default=DEFAULT_QUEUE,
                   help=f"requests that may wait behind the running one before 429 (default {DEFAULT_QUEUE})")
    p.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                   help=f"largest accepted request body in MiB (default {DEFAULT_MAX_BODY_MB:g})")
    p.add_argument("--model-id", default=None, help="model id to report in /v1/models (default: the folder name)")


def run(args: argparse.Namespace) -> int:
    from app.api import ApiServer, ServerConfig, serve_forever

    try:
        config = ServerConfig(host=args.host, port=args.port, api_key=args.api_key,
                              cors_origins=tuple(args.cors_origin), allowed_hosts=tuple(args.allow_host),
                              max_waiting=args.queue, max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                              model_id=args.model_id)
    except ValueError as exc:
        return fail(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine = load_engine(args)
    if engine.info.note:
        print(f"[{engine.info.name}: {engine.info.note}]", file=sys.stderr)
    server = ApiServer(engine, config)

    async def main() -> None:
        await server.start()
        print(f"Serving {server.model_id} at {server.url}/v1 (Ctrl+C stops)", file=sys.stderr, flush=True)
        if config.host not in ("127.0.0.1", "localhost", "::1") and config.api_key is None:
            print("warning: listening beyond loopback without --api-key", file=sys.stderr)
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
