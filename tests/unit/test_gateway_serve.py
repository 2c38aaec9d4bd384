"""The gunicorn command line the hub runs for the gateway."""

from __future__ import annotations

from gateway.serve import APP_SPEC, bind_address, gunicorn_argv
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
    assert argv[-1] == APP_SPEC == "gateway.ssp_app:create_app()"
    assert "--access-logfile" not in argv


def test_default_listen_address_is_all_interfaces_on_8667() -> None:
    argv = gunicorn_argv(SspConfig.from_env(ENV))
    assert argv[argv.index("-b") + 1] == "0.0.0.0:8667"


def test_ipv6_hosts_are_bracketed() -> None:
    assert bind_address("::1", 8667) == "[::1]:8667"
    assert bind_address("127.0.0.1", 1) == "127.0.0.1:1"
