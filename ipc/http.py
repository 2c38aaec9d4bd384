"""HTTP between our own processes (scheduler <-> SSP, SSP -> backends): keep-alive limits.

A pooled keep-alive connection that the server closes at the moment the client sends on it
fails with `ServerDisconnectedError`, and aiohttp does not retry it. gunicorn's default
keep-alive is 2 s and aiohttp pools idle connections for 15 s, so a request after an idle gap
of about 2 s failed now and then (measured: 2 of 40 requests spaced 1.98-2.02 s apart). The
rule here: a server holds an idle connection for `SERVER_KEEPALIVE_SECS`, a client reuses one
for at most `CLIENT_KEEPALIVE_SECS`, well below it, so the server never closes a connection a
client may still pick from its pool. The server's limit is also above the pooling defaults of
common clients (aiohttp 15 s, httpx 5 s), so callers with default settings are safe too.
Backends we do not run get the same short client limit, which is below the 5 s that common
servers (uvicorn, Node.js) use.
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp

#: How long our HTTP servers (the SSP gateway, the scheduler listener) keep an idle
#: connection open.
SERVER_KEEPALIVE_SECS: Final = 30

#: How long our HTTP clients keep an idle pooled connection for reuse.
CLIENT_KEEPALIVE_SECS: Final = 1.5


def client_session(**kwargs: Any) -> aiohttp.ClientSession:
    """An aiohttp session whose pooled connections expire before any of our servers' do."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(keepalive_timeout=CLIENT_KEEPALIVE_SECS), **kwargs)


__all__ = ["CLIENT_KEEPALIVE_SECS", "SERVER_KEEPALIVE_SECS", "client_session"]
