"""`ops/run --transport http`: the database host on the Node build, allowed to reach only the
ingest listener, and the services told where events post."""

from __future__ import annotations

from pathlib import Path

import pytest

from stack.__main__ import build_children
from stack.config import parse


def _by_name(children: list, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in children if c.name == name)


def test_cluster_mode_posts_to_the_scheduler(tmp_path: Path) -> None:
    cfg = parse(["--memory", "--transport", "http", "--scheduler-bind", "0.0.0.0:19667"], {})
    children = build_children(cfg, {}, tmp_path)
    host = _by_name(children, "svc-db")
    # an all-interfaces bind is reached on loopback, and only it is allowed
    assert host.argv[-4:] == ["--engine", "node", "--allow-net", "127.0.0.1:19667"]
    for name in ("svc schema apply", "svc-scheduler"):
        env = _by_name(children, name).env
        assert env["SVC_INGEST_TRANSPORT"] == "http"
        assert env["SVC_INGEST_URL"] == "http://127.0.0.1:19667/ingest"


def test_standalone_posts_to_the_ssp(tmp_path: Path) -> None:
    cfg = parse(["--memory", "--standalone", "--transport", "http",
                 "--ssp-bind", "127.0.0.1:18667"], {})
    children = build_children(cfg, {}, tmp_path)
    assert _by_name(children, "svc-db").argv[-1] == "127.0.0.1:18667"
    assert _by_name(children, "svc-ssp").env["SVC_INGEST_URL"] == "http://127.0.0.1:18667/ingest"


def test_changefeed_stays_the_default_with_our_host_and_an_external_database_decides(
        tmp_path: Path) -> None:
    children = build_children(parse(["--memory"], {}), {}, tmp_path)
    assert "--engine" not in _by_name(children, "svc-db").argv
    assert _by_name(children, "svc-scheduler").env["SVC_INGEST_TRANSPORT"] == "changefeed"
    # with SVC_DB_URL no host starts, and the services keep their own setting
    external = parse([], {"SVC_DB_URL": "ws://db.example:8000/rpc"})
    children = build_children(external, {"SVC_INGEST_TRANSPORT": "http"}, tmp_path)
    assert _by_name(children, "svc-scheduler").env["SVC_INGEST_TRANSPORT"] == "http"


def test_http_without_an_ingest_listener_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--transport", "http", "--no-ssp"], {})
