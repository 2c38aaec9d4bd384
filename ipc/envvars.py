"""One environment variable read into a typed value, for the configuration readers of every
process (`ssp.config`, `scheduler.config`, `scheduler.pools.config`, `cloud.config`). Unset
or blank: the default. A value that cannot be used raises the caller's error type (``error``,
each process has its own ConfigError) with a message naming the variable."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def env_bool(env: Mapping[str, str], name: str, default: bool, *,
             error: type[Exception] = ValueError) -> bool:
    """true/false, 1/0, yes/no, on/off (any case)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    text = raw.lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise error(f"{name} must be true or false (also 1/0, yes/no, on/off), got {raw[:40]!r}")


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0,
            maximum: int | None = None, error: type[Exception] = ValueError) -> int:
    """An integer between ``minimum`` and ``maximum`` (None: no upper bound)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise error(f"{name} must be an integer, got {raw[:40]!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise error(f"{name} must be {bound}, got {value}")
    return value


def host_port(text: str, name: str, *, default_port: int | None = None,
              default_host: str | None = None,
              error: type[Exception] = ValueError) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:PORT``) split into its parts, for a listen address or a
    peer, from an option or a variable called ``name``. Without a port: ``default_port``, or
    an error when there is none; an empty host: ``default_host``, or an error."""
    raw = text.strip()
    host, sep, port = raw.rpartition(":")
    if not sep or "]" in port:  # no port given (or a bare bracketed IPv6 literal)
        if default_port is None:
            raise error(f"{name} must be host:port, got {text[:60]!r}")
        host, port = raw, str(default_port)
    host = host.strip("[]") or (default_host or "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise error(f"{name} must be host:port with a port from 1 to 65535, got {text[:60]!r}")
    return host, int(port)


def env_json(env: Mapping[str, str], name: str, default: Any, *,
             error: type[Exception] = ValueError) -> Any:
    """A JSON document. The error names where the text breaks, never the text (a variable
    such as SVC_BACKENDS holds credentials)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise error(f"{name} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") \
            from None
