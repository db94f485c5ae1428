"""The aiohttp application key under which the routes find their server.

Its own module so that routes never import ``server`` (which registers them): no import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .server import ApiServer

SERVER_KEY: web.AppKey[ApiServer] = web.AppKey("neural_api_server")
