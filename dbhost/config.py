"""Typed configuration of the database host, built once from argv and the environment."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dbhost.scratch import engine_url as scratch_url
from ipc.envvars import host_port

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
DEFAULT_POLL_INTERVAL_MS = 100
# Ordinary requests inside the engine at once (`dbhost.admission`): enough to keep the
# engine's worker threads busy, few enough that the service's requests are not stuck behind
# an application's hundred in-flight writes.
DEFAULT_MAX_INFLIGHT = 8
ENGINES = ("embedded", "node")


class ConfigError(ValueError):
    """The command line or the environment does not describe a host we can start."""


@dataclass(frozen=True)
class HostConfig:
    """Everything the host needs to know, read once by the entry point."""

    host: str
    port: int
    path: Path | None  # None means memory only (scratch storage, `dbhost.scratch`)
    user: str
    password: str
    insecure_default_root: bool  # True when root/root was taken because nothing was set
    max_frame_bytes: int
    live_poll_interval_ms: int
    log_level: str
    engine: str = "embedded"  # or "node": SurrealDB's Node build (`dbhost.nodeengine`)
    allow_net: tuple[str, ...] = ()  # network targets the node engine's http::* may reach
    max_inflight: int = DEFAULT_MAX_INFLIGHT  # 0: no limit (`dbhost.admission`)

    def engine_url(self, scratch: Path | None = None) -> str:
        """The embedded engine's storage URL: `--path` DIR, else the scratch directory
        `scratch` that keeps a memory-only host's data until it stops (`dbhost.scratch`)."""
        if self.path is not None:
            return f"surrealkv://{self.path}"
        if scratch is None:
            raise ValueError("a memory-only host needs its scratch directory")
        return scratch_url(scratch)

    def __repr__(self) -> str:  # never show the password
        return (f"HostConfig(host={self.host!r}, port={self.port}, path={self.path!r}, "
                f"user={self.user!r}, max_frame_bytes={self.max_frame_bytes}, engine={self.engine!r})")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="svc-db",
        description="Database host: the SurrealDB 3.x engine in-process, served over SurrealDB's "
                    "own RPC protocol (WebSocket /rpc with CBOR frames, HTTP POST /rpc).",
        epilog="Environment: SVC_DB_USER and SVC_DB_PASS (root user created on first start; "
               "required unless --insecure-default-root), SVC_DB_MAX_FRAME_BYTES, "
               "SVC_DB_LIVE_POLL_MS, SVC_DB_LOG_LEVEL, SVC_DB_ENGINE, SVC_DB_ALLOW_NET, "
               "SVC_DB_MAX_INFLIGHT.",
    )
    p.add_argument("--bind", default="127.0.0.1:8000", help="HOST:PORT to listen on")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--memory", action="store_true",
                       help="keep no data after the host stops (default): the engine's "
                            "storage lives in a scratch directory removed at exit")
    where.add_argument("--path", type=Path, help="surrealkv data directory (durable)")
    p.add_argument("--max-frame-bytes", type=int, default=None,
                   help=f"largest accepted RPC frame (default {DEFAULT_MAX_FRAME_BYTES})")
    p.add_argument("--live-poll-ms", type=int, default=None,
                   help="changefeed poll interval for LIVE queries, a fallback for writes that "
                        f"do not pass through this host (default {DEFAULT_POLL_INTERVAL_MS})")
    p.add_argument("--max-inflight", type=int, default=None,
                   help="ordinary requests inside the engine at once; the view service's "
                        "connections go first (0: no limit; default "
                        f"{DEFAULT_MAX_INFLIGHT})")
    p.add_argument("--insecure-default-root", action="store_true",
                   help="development only: without SVC_DB_USER/SVC_DB_PASS use root/root")
    p.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR")
    p.add_argument("--engine", choices=ENGINES, default=None,
                   help="embedded: the Python build in this process (default); node: "
                        "SurrealDB's Node.js build in a child process, the one with http::* "
                        "functions (needs node and `npm ci` in dbhost/node)")
    p.add_argument("--allow-net", default=None, metavar="TARGETS",
                   help="node engine only: comma-separated network targets (host or "
                        "host:port) the http::* functions may reach, e.g. the scheduler's "
                        "ingest listener; default none")
    return p


def _positive_int(name: str, raw: str | int) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def parse_bind(bind: str) -> tuple[str, int]:
    """Split HOST:PORT (IPv6 as [::1]:PORT) into its parts."""
    return host_port(bind, "--bind", error=ConfigError)


def load_config(argv: Sequence[str], env: Mapping[str, str]) -> HostConfig:
    """Build the configuration from the command line and the environment."""
    args = _parser().parse_args(list(argv))
    host, port = parse_bind(args.bind)
    user = env.get("SVC_DB_USER", "")
    password = env.get("SVC_DB_PASS", "")
    insecure = False
    if not user and not password:
        if not args.insecure_default_root:
            raise ConfigError(
                "SVC_DB_USER and SVC_DB_PASS must be set (the root user is created from them); "
                "for local development only, pass --insecure-default-root to use root/root")
        user, password, insecure = "root", "root", True
    elif not user or not password:
        raise ConfigError("set both SVC_DB_USER and SVC_DB_PASS, not only one")
    max_frame = (args.max_frame_bytes if args.max_frame_bytes is not None
                 else env.get("SVC_DB_MAX_FRAME_BYTES", DEFAULT_MAX_FRAME_BYTES))
    poll = (args.live_poll_ms if args.live_poll_ms is not None
            else env.get("SVC_DB_LIVE_POLL_MS", DEFAULT_POLL_INTERVAL_MS))
    inflight_raw = (args.max_inflight if args.max_inflight is not None
                    else env.get("SVC_DB_MAX_INFLIGHT", DEFAULT_MAX_INFLIGHT))
    try:
        max_inflight = int(inflight_raw)
    except (TypeError, ValueError):
        raise ConfigError(f"SVC_DB_MAX_INFLIGHT (--max-inflight) must be an integer, "
                          f"got {inflight_raw!r}") from None
    if max_inflight < 0:
        raise ConfigError(f"SVC_DB_MAX_INFLIGHT (--max-inflight) must be 0 (no limit) or "
                          f"more, got {max_inflight}")
    path = args.path.resolve() if args.path is not None else None
    engine = args.engine or env.get("SVC_DB_ENGINE", "") or "embedded"
    if engine not in ENGINES:
        raise ConfigError(f"SVC_DB_ENGINE must be one of {', '.join(ENGINES)}, got {engine!r}")
    raw_net = args.allow_net if args.allow_net is not None else env.get("SVC_DB_ALLOW_NET", "")
    allow_net = tuple(t.strip() for t in raw_net.split(",") if t.strip())
    if allow_net and engine != "node":
        raise ConfigError("--allow-net (SVC_DB_ALLOW_NET) needs --engine node: the embedded "
                          "build has no http::* functions")
    return HostConfig(
        host=host,
        port=port,
        path=path,
        user=user,
        password=password,
        insecure_default_root=insecure,
        max_frame_bytes=_positive_int("max frame bytes", max_frame),
        live_poll_interval_ms=_positive_int("live poll interval", poll),
        log_level=(args.log_level or env.get("SVC_DB_LOG_LEVEL", "INFO")).upper(),
        engine=engine,
        allow_net=allow_net,
        max_inflight=max_inflight,
    )
