"""DbConfig: URL normalisation, env reading, and the password never showing."""

from __future__ import annotations

import pytest

from dbclient import DbConfig, normalise_db_url


@pytest.mark.parametrize(
    ("raw", "http_base", "ws_url"),
    [
        ("ws://127.0.0.1:8000", "http://127.0.0.1:8000", "ws://127.0.0.1:8000/rpc"),
        ("ws://127.0.0.1:8000/", "http://127.0.0.1:8000", "ws://127.0.0.1:8000/rpc"),
        ("ws://127.0.0.1:8000/rpc", "http://127.0.0.1:8000", "ws://127.0.0.1:8000/rpc"),
        ("ws://127.0.0.1:8000/rpc/", "http://127.0.0.1:8000", "ws://127.0.0.1:8000/rpc"),
        ("http://db.internal:8000", "http://db.internal:8000", "ws://db.internal:8000/rpc"),
        ("http://db.internal:8000/rpc", "http://db.internal:8000", "ws://db.internal:8000/rpc"),
        ("https://db.example.com", "https://db.example.com", "wss://db.example.com/rpc"),
        ("wss://db.example.com/rpc", "https://db.example.com", "wss://db.example.com/rpc"),
        ("HTTP://Db:1", "http://db:1", "ws://db:1/rpc"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000", "ws://127.0.0.1:8000/rpc"),
        ("localhost:9000/rpc", "http://localhost:9000", "ws://localhost:9000/rpc"),
        ("  ws://h:1  ", "http://h:1", "ws://h:1/rpc"),
        ("ws://[::1]:8000", "http://[::1]:8000", "ws://[::1]:8000/rpc"),
    ],
)
def test_url_is_normalised_to_http_base_and_ws_rpc(raw: str, http_base: str, ws_url: str) -> None:
    url = normalise_db_url(raw)
    assert (url.http_base, url.ws_url) == (http_base, ws_url)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "empty"),
        ("ftp://h:1", "scheme 'ftp'"),
        ("mem://", "scheme 'mem'"),
        ("surrealkv:///tmp/x", "scheme 'surrealkv'"),
        ("ws://", "no host"),
        ("ws://h:1/sql", "path"),
        ("ws://h:1/rpc?x=1", "query"),
        ("ws://h:notaport", "not a valid URL"),
    ],
)
def test_bad_urls_are_rejected_with_a_clear_message(raw: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        normalise_db_url(raw)


def test_credentials_in_url_are_rejected_without_echoing_them() -> None:
    with pytest.raises(ValueError) as e:
        normalise_db_url("ws://admin:hunter2@h:1")
    assert "hunter2" not in str(e.value)


def test_from_env_reads_every_variable() -> None:
    cfg = DbConfig.from_env({
        "SVC_DB_URL": "http://h:8000",
        "SVC_DB_USER": "svc",
        "SVC_DB_PASS": "pw",
        "SVC_DB_NS": "acme",
        "SVC_DB_NAME": "shop",
        "SVC_SSP_DB_TIMEOUT_SECS": "2.5",
    })
    assert cfg.ws_url == "ws://h:8000/rpc"
    assert cfg.http_url == "http://h:8000"
    assert (cfg.user, cfg.password, cfg.namespace, cfg.database) == ("svc", "pw", "acme", "shop")
    assert cfg.timeout_secs == 2.5


def test_from_env_falls_back_to_legacy_svc_db_ws() -> None:
    cfg = DbConfig.from_env({"SVC_DB_WS": "ws://legacy:1/rpc"})
    assert cfg.ws_url == "ws://legacy:1/rpc"
    both = DbConfig.from_env({"SVC_DB_URL": "ws://new:2", "SVC_DB_WS": "ws://legacy:1"})
    assert both.ws_url == "ws://new:2/rpc"


def test_from_env_defaults() -> None:
    cfg = DbConfig.from_env({"SVC_DB_URL": "h:1"})
    assert (cfg.user, cfg.password, cfg.namespace, cfg.database) == ("root", "", "main", "main")
    assert cfg.timeout_secs == 10.0


def test_from_env_requires_a_url() -> None:
    with pytest.raises(ValueError, match="SVC_DB_URL"):
        DbConfig.from_env({})


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_from_env_rejects_bad_timeouts(value: str) -> None:
    with pytest.raises(ValueError, match="SVC_SSP_DB_TIMEOUT_SECS"):
        DbConfig.from_env({"SVC_DB_URL": "h:1", "SVC_SSP_DB_TIMEOUT_SECS": value})


def test_repr_and_str_never_show_the_password() -> None:
    cfg = DbConfig.from_env({"SVC_DB_URL": "h:1", "SVC_DB_PASS": "s3cr3t-Pa55"})
    assert "s3cr3t-Pa55" not in repr(cfg)
    assert "s3cr3t-Pa55" not in str(cfg)
    assert cfg.password == "s3cr3t-Pa55"


def test_config_is_frozen() -> None:
    cfg = DbConfig.from_env({"SVC_DB_URL": "h:1"})
    with pytest.raises(AttributeError):
        cfg.user = "x"  # type: ignore[misc]
