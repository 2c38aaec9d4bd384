"""The gunicorn command line the hub runs for the gateway."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from falcon import testing

from gateway.serve import APP_SPEC, bind_address, gunicorn_argv
from gateway.ssp_app import create_app
from gateway.testing import FakeHub
from ipc.http import CLIENT_KEEPALIVE_SECS, SERVER_KEEPALIVE_SECS
from ssp.config import SspConfig

ENV = {"SVC_DB_URL": "ws://127.0.0.1:9", "SVC_SSP_RUN_DIR": "/tmp/x"}


def test_argv_runs_the_asgi_worker_with_the_configured_workers_and_address() -> None:
    cfg = SspConfig.from_env({**ENV, "SVC_SSP_LISTEN_ADDR": "127.0.0.1:9000", "SVC_SSP_GATEWAY_WORKERS": "3"})
    argv = gunicorn_argv(cfg, python="/py")
    assert argv[:3] == ["/py", "-m", "gunicorn"]
    assert argv[argv.index("-k") + 1] == "asgi"
    assert argv[argv.index("-w") + 1] == "3"
    assert argv[argv.index("-b") + 1] == "127.0.0.1:9000"
    assert "--no-control-socket" in argv  # gunicorn 27 would share $HOME/.gunicorn/gunicorn.ctl
    assert argv[-1] == APP_SPEC.format(endpoint=cfg.hub_endpoint)
    assert argv[-1] == f"gateway.ssp_app:create_app('{cfg.hub_endpoint}')"
    assert "--access-logfile" not in argv
    assert argv[argv.index("--keep-alive") + 1] == str(SERVER_KEEPALIVE_SECS)
    # Workers die with their master (tests/integration/test_ssp_gateway_dies_with_its_parent).
    assert argv[argv.index("-c") + 1] == "python:gateway.gunicorn_hooks"


def test_our_clients_drop_pooled_connections_before_our_servers_close_them() -> None:
    # The server must never close a connection a client may still take from its pool.
    assert CLIENT_KEEPALIVE_SECS * 2 <= SERVER_KEEPALIVE_SECS


def test_graceful_timeout_is_5s_unless_configured() -> None:
    def graceful(env: dict[str, str]) -> str:
        argv = gunicorn_argv(SspConfig.from_env({**ENV, **env}))
        return argv[argv.index("--graceful-timeout") + 1]

    assert graceful({}) == "5"
    assert graceful({"SVC_SSP_GATEWAY_GRACEFUL_SECS": "1"}) == "1"


def test_default_listen_address_is_all_interfaces_on_8667() -> None:
    argv = gunicorn_argv(SspConfig.from_env(ENV))
    assert argv[argv.index("-b") + 1] == "0.0.0.0:8667"


def test_ipv6_hosts_are_bracketed() -> None:
    assert bind_address("::1", 8667) == "[::1]:8667"
    assert bind_address("127.0.0.1", 1) == "127.0.0.1:1"


async def test_create_app_reads_the_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="gw-env-"))
    monkeypatch.setenv("SVC_AUTH_SECRET", "from-env")
    hub = FakeHub(f"ipc://{run_dir}/hub.sock")
    hub.start()
    app = create_app(f"ipc://{run_dir}/hub.sock")
    try:
        async with testing.ASGIConductor(app) as client:
            denied = await client.simulate_get("/debug/deps", headers={"Authorization": "Bearer other"})
            assert denied.status_code == 401
            ok = await client.simulate_get("/debug/deps", headers={"Authorization": "Bearer from-env"})
            assert ok.status_code == 200
            hub.last("GET /debug/deps")
    finally:
        app.hub.close()
        await hub.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


async def test_a_run_dir_too_deep_for_a_unix_socket_puts_the_sockets_in_a_private_dir(
        tmp_path: Path) -> None:
    import zmq
    import zmq.asyncio

    from ssp.rundir import secure_dir

    short = SspConfig.from_env({**ENV, "SVC_SSP_RUN_DIR": "/tmp/x"})
    assert short.hub_endpoint == "ipc:///tmp/x/hub.sock"
    deep_dir = tmp_path / ("d" * 60) / ("e" * 60)
    deep = SspConfig.from_env({**ENV, "SVC_SSP_RUN_DIR": str(deep_dir)})
    other = SspConfig.from_env({**ENV, "SVC_SSP_RUN_DIR": str(deep_dir) + "2"})
    # never the abstract namespace (no file permissions: any local user could connect)
    assert not deep.hub_endpoint.startswith("ipc://@") and deep.ipc_dir is not None
    assert deep.hub_endpoint.startswith(f"ipc://{deep.ipc_dir}/")
    assert deep.socket_dirs == {deep_dir, deep.ipc_dir}
    assert deep.hub_endpoint != other.hub_endpoint  # two SSPs never share a socket
    assert len({deep.hub_endpoint, deep.shard_endpoint(0), deep.shard_endpoint(1)}) == 3
    secure_dir(deep.ipc_dir)
    assert deep.ipc_dir.stat().st_mode & 0o777 == 0o700
    ctx = zmq.asyncio.Context()
    server, client = ctx.socket(zmq.REP), ctx.socket(zmq.REQ)
    try:
        server.bind(deep.shard_endpoint(0))
        client.connect(deep.shard_endpoint(0))
        await client.send(b"ping")
        assert await server.recv() == b"ping"
    finally:
        server.close(0)
        client.close(0)
        ctx.term()
        shutil.rmtree(deep.ipc_dir, ignore_errors=True)
