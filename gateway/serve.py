"""How the SSP hub starts the gateway: the gunicorn command line for an SSP's configuration
(`GatewayConfig`: the fields of `ssp.config.SspConfig` it reads; the gateway does not import
the SSP).

`gunicorn -k asgi` is gunicorn's native ASGI worker (uvloop when installed); each worker
calls `gateway.ssp_app:create_app(<hub endpoint>)` after the fork, so ZeroMQ sockets are per
worker. The hub endpoint travels in the app spec (a literal argument); the bearer secret
never does (argv is visible to every user): the worker reads `SVC_AUTH_SECRET` itself.

- `--no-control-socket`: gunicorn >= 25 otherwise binds `$HOME/.gunicorn/gunicorn.ctl` (or
  `$XDG_RUNTIME_DIR/gunicorn.ctl`), one path shared by every gunicorn of the user, so two SSPs
  (or parallel tests) on a machine would fight over it.
- `--graceful-timeout 5` (`SVC_SSP_GATEWAY_GRACEFUL_SECS`, ours): on SIGTERM workers finish
  in-flight requests; open `GET /logs` streams never finish by themselves, so they are cut
  after 5 s rather than holding the SSP's shutdown for gunicorn's default 30 s. An idle
  keep-alive connection (a client's pooled one) is closed at once on SIGTERM
  (`gateway.gunicorn_hooks.close_idle`), so it does not hold the stop for that time.
- `--keep-alive`: idle connections stay open `ipc.http.SERVER_KEEPALIVE_SECS` (or the
  configured `SVC_HTTP_READ_TIMEOUT_SECS`), longer than our clients pool them (gunicorn's 2 s
  default raced the scheduler's reuse of a pooled connection). The hooks also hold a new
  connection's first request to that time (`gateway.gunicorn_hooks`).
- `-c python:gateway.gunicorn_hooks`: each worker dies with its master (a parent-death signal set
  after the fork), so no worker outlives a master that was killed and keeps the port bound. The
  hub starts the master itself through `ipc.lifeline`, so the master dies with the hub.
"""

from __future__ import annotations

import sys
from typing import Protocol

APP_SPEC = "gateway.ssp_app:create_app({endpoint!r})"
HOOKS = "python:gateway.gunicorn_hooks"


def bind_address(host: str, port: int) -> str:
    """gunicorn's `-b` value; IPv6 hosts in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GatewayConfig(Protocol):
    """What the gateway's command line is made of (`ssp.config.SspConfig` has it)."""

    # Read-only members: a frozen config dataclass provides them.
    @property
    def gateway_workers(self) -> int: ...

    @property
    def listen_host(self) -> str: ...

    @property
    def listen_port(self) -> int: ...

    @property
    def hub_endpoint(self) -> str: ...

    @property
    def http_read_timeout_secs(self) -> int: ...

    @property
    def gateway_graceful_secs(self) -> int: ...


def gunicorn_argv(
    cfg: GatewayConfig, *, python: str = sys.executable, access_log: bool = False
) -> list[str]:
    """The argv that runs the gateway for `cfg` (environment: the SSP's own, unchanged)."""
    argv = [
        python, "-m", "gunicorn",
        "-k", "asgi",
        "-w", str(cfg.gateway_workers),
        "-b", bind_address(cfg.listen_host, cfg.listen_port),
        "--no-control-socket",
        "--graceful-timeout", str(cfg.gateway_graceful_secs),
        "--keep-alive", str(cfg.http_read_timeout_secs),
        "-c", HOOKS,
    ]
    if access_log:
        argv += ["--access-logfile", "-"]
    argv.append(APP_SPEC.format(endpoint=cfg.hub_endpoint))
    return argv
