"""Database connection settings, read once from the environment into a frozen object.

`SVC_DB_URL` is documented as an "http engine URL; ws:// accepted and normalized". The four
schemes are accepted, `http://` being the primary form, each with or without a trailing `/` or
`/rpc`, plus a bare `host:port`; both forms are derived from any of them:

| given | `http_url` | `ws_url` (what the client connects to) |
|---|---|---|
| `http://h:p`, `h:p` | `http://h:p` | `ws://h:p/rpc` |
| `https://h:p` | `https://h:p` | `wss://h:p/rpc` (TLS, never downgraded) |
| `ws://h:p[/rpc]` | `http://h:p` | `ws://h:p/rpc` |
| `wss://h:p[/rpc]` | `https://h:p` | `wss://h:p/rpc` |
 The client always connects over the WebSocket form (`ws_url`): only the
WebSocket RPC keeps a session (signin/use once, not per request), multiplexes concurrent
requests on one socket, and carries LIVE notifications (the `_00_version` doorbell). The http
form (`http_url`) is kept for health probes and for anything that must speak plain HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_TIMEOUT_SECS = 10.0
DEFAULT_NAMESPACE = "main"
DEFAULT_DATABASE = "main"
DEFAULT_USER = "root"

_WS_FOR = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
_HTTP_FOR = {"http": "http", "https": "https", "ws": "http", "wss": "https"}


@dataclass(frozen=True)
class DbUrl:
    """One database address in both of its forms (no path, no trailing slash)."""

    http_base: str  # e.g. http://127.0.0.1:8000
    ws_url: str  # e.g. ws://127.0.0.1:8000/rpc


def normalise_db_url(raw: str) -> DbUrl:
    """Parse a database URL into its http base and its ws RPC URL.

    Accepts `http://` (the primary form), `https://`, `ws://`, `wss://` or a bare `host:port`
    (plain, as `http://`),
    with an optional trailing `/` or `/rpc`. Raises ValueError naming the problem for any
    other scheme, a missing host, credentials in the URL, a query string or another path.
    """
    text = raw.strip()
    if not text:
        raise ValueError("database URL is empty (set SVC_DB_URL, e.g. http://127.0.0.1:8000)")
    if "://" not in text:
        text = "ws://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"database URL {_redacted(raw)!r} is not a valid URL: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in _WS_FOR:
        raise ValueError(
            f"database URL scheme {scheme!r} is not supported; use ws://, wss://, http:// or "
            "https:// (or host:port)"
        )
    if parts.username is not None or parts.password is not None:
        # Credentials belong in SVC_DB_USER / SVC_DB_PASS, where they are never echoed.
        raise ValueError("database URL must not contain credentials; use SVC_DB_USER/SVC_DB_PASS")
    if not parts.hostname:
        raise ValueError(f"database URL {_redacted(raw)!r} has no host")
    if parts.query or parts.fragment:
        raise ValueError(f"database URL {_redacted(raw)!r} must not have a query or fragment")
    path = parts.path.rstrip("/")
    if path not in ("", "/rpc"):
        raise ValueError(
            f"database URL {_redacted(raw)!r} has path {parts.path!r}; only '' or '/rpc' is allowed"
        )
    host = parts.hostname
    if ":" in host:  # IPv6 literal: urlsplit strips the brackets
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return DbUrl(
        http_base=f"{_HTTP_FOR[scheme]}://{netloc}",
        ws_url=f"{_WS_FOR[scheme]}://{netloc}/rpc",
    )


def _redacted(raw: str) -> str:
    """The URL with any `user:pass@` part replaced, safe to put in an error message."""
    if "@" in raw:
        scheme, sep, rest = raw.partition("://")
        rest = rest.split("@", 1)[1]
        return f"{scheme}{sep}***@{rest}" if sep else f"***@{rest}"
    return raw


# The session variable a connection of the view service sets when it opens (`DbConfig.lane`):
# the database host lets the service's requests into its engine ahead of the application's
# (`dbhost.admission`). Any other server keeps it as an unused variable.
LANE_VARIABLE = "_00_lane"
SERVICE_LANE = "service"


@dataclass(frozen=True)
class DbConfig:
    """How to reach and sign in to the database. Built once per process by the entry point."""

    url: DbUrl
    user: str = DEFAULT_USER
    password: str = field(default="", repr=False)  # never shown by repr()
    namespace: str = DEFAULT_NAMESPACE
    database: str = DEFAULT_DATABASE
    timeout_secs: float = DEFAULT_TIMEOUT_SECS
    # `SERVICE_LANE` for the scheduler's and the SSPs' connections (set by their config
    # loaders); None for everyone else.
    lane: str | None = None

    @property
    def ws_url(self) -> str:
        """The WebSocket RPC URL the client connects to."""
        return self.url.ws_url

    @property
    def http_url(self) -> str:
        """The http base URL of the same server (no trailing slash)."""
        return self.url.http_base

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DbConfig:
        """Read `SVC_DB_URL` (legacy `SVC_DB_WS`), `SVC_DB_USER`, `SVC_DB_PASS`, `SVC_DB_NS`,
        `SVC_DB_NAME` and `SVC_SSP_DB_TIMEOUT_SECS`. Raises ValueError on bad values."""
        raw_url = env.get("SVC_DB_URL") or env.get("SVC_DB_WS") or ""
        if not raw_url.strip():
            raise ValueError("SVC_DB_URL is not set (e.g. http://127.0.0.1:8000)")
        url = normalise_db_url(raw_url)
        timeout_text = env.get("SVC_SSP_DB_TIMEOUT_SECS", "").strip()
        timeout = DEFAULT_TIMEOUT_SECS
        if timeout_text:
            try:
                timeout = float(timeout_text)
            except ValueError:
                raise ValueError(
                    f"SVC_SSP_DB_TIMEOUT_SECS must be a number of seconds, got {timeout_text!r}"
                ) from None
            if not (timeout > 0) or timeout == float("inf"):
                raise ValueError(f"SVC_SSP_DB_TIMEOUT_SECS must be > 0, got {timeout_text!r}")
        namespace = env.get("SVC_DB_NS", "").strip() or DEFAULT_NAMESPACE
        database = env.get("SVC_DB_NAME", "").strip() or DEFAULT_DATABASE
        return cls(
            url=url,
            user=env.get("SVC_DB_USER", "").strip() or DEFAULT_USER,
            password=env.get("SVC_DB_PASS", ""),
            namespace=namespace,
            database=database,
            timeout_secs=timeout,
        )
