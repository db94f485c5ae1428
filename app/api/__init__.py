"""Local OpenAI-compatible HTTP API (aiohttp): chat completions, completions, responses, models.

Embedding::

    server = ApiServer(engine, ServerConfig(port=8080, api_key=None))
    await server.start()   # on the running asyncio loop (qasync in the desktop app)
    ...
    await server.stop()
"""

from .config import ServerConfig
from .server import ApiServer, serve_forever

__all__ = ["ApiServer", "ServerConfig", "serve_forever"]
