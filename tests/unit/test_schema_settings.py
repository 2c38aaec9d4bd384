"""`svc schema apply` settings: transport precedence, project file, retention, ingest URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from svccli.settings import ConfigError, parse_duration_ns, resolve_settings

BASE = {"SVC_DB_URL": "ws://h:1", "SVC_DB_PASS": "pw"}


def resolve(tmp_path: Path, env: dict[str, str] | None = None, **kw: str | None):  # type: ignore[no-untyped-def]
    return resolve_settings(
        {**BASE, **(env or {})},
        transport_flag=kw.get("transport"),
        project_flag=kw.get("project"),
        ingest_url_flag=kw.get("ingest_url"),
        retention_flag=kw.get("retention"),
        cwd=tmp_path,
    )


def write_project(tmp_path: Path, transport: str) -> Path:
    path = tmp_path / "project.yml"
    path.write_text(f"apps: {{}}\nsync:\n  transport: {transport}\n")
    return path


def test_default_transport_is_http_and_needs_an_ingest_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SVC_INGEST_URL"):
        resolve(tmp_path)
    s = resolve(tmp_path, {"SVC_INGEST_URL": "http://sched:9667/ingest"})
    assert (s.transport, s.transport_source) == ("http", "default")
    assert s.service_base_url == "http://sched:9667"


def test_project_file_in_cwd_sets_the_transport(tmp_path: Path) -> None:
    write_project(tmp_path, "changefeed")
    s = resolve(tmp_path)
    assert s.transport == "changefeed"
    assert s.transport_source == f"project file {tmp_path / 'project.yml'} (sync.transport)"


def test_env_overrides_project_file_and_flag_overrides_env(tmp_path: Path) -> None:
    write_project(tmp_path, "http")
    s = resolve(tmp_path, {"SVC_INGEST_TRANSPORT": "changefeed"})
    assert (s.transport, s.transport_source) == ("changefeed", "SVC_INGEST_TRANSPORT")
    s = resolve(tmp_path, {"SVC_INGEST_TRANSPORT": "http"}, transport="changefeed")
    assert (s.transport, s.transport_source) == ("changefeed", "flag --transport")


def test_explicit_project_flag(tmp_path: Path) -> None:
    other = tmp_path / "sub"
    other.mkdir()
    path = write_project(other, "changefeed")
    assert resolve(tmp_path, project=str(path)).transport == "changefeed"
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(tmp_path, project=str(tmp_path / "missing.yml"))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("sync: [1, 2", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("sync: changefeed\n", "sync: must be"),
        ("sync:\n  transport: 3\n", "sync.transport: must be 'http' or 'changefeed'"),
        ("sync:\n  transport: smoke\n", "sync.transport: must be 'http' or 'changefeed'"),
        ("apps: {web: {path: web}}\n", "apps.web.path: web: no such file"),
    ],
)
def test_bad_project_files_are_configuration_errors(tmp_path: Path, text: str,
                                                     fragment: str) -> None:
    (tmp_path / "project.yml").write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        resolve(tmp_path, {"SVC_INGEST_URL": "http://h/ingest"})


def test_unknown_transport_from_env_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be one of http, changefeed"):
        resolve(tmp_path, {"SVC_INGEST_TRANSPORT": "kafka"})


@pytest.mark.parametrize("url", ["ftp://h/ingest", "not a url", "http:///ingest",
                                 "http://u:p@h/ingest"])
def test_bad_ingest_urls_are_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError):
        resolve(tmp_path, ingest_url=url)


def test_secret_is_kept_but_never_in_repr(tmp_path: Path) -> None:
    s = resolve(tmp_path, {"SVC_AUTH_SECRET": "top-secret-9"}, transport="changefeed")
    assert s.auth_secret == "top-secret-9"
    assert "top-secret-9" not in repr(s)
    assert "pw" not in repr(s.db)


def test_database_config_errors_become_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scheme"):
        resolve_settings({"SVC_DB_URL": "mem://"}, transport_flag="changefeed",
                         project_flag=None, ingest_url_flag=None, retention_flag=None,
                         cwd=tmp_path)


@pytest.mark.parametrize(("text", "ns"), [("1h", 3_600 * 10**9), ("90m", 5_400 * 10**9),
                                          ("1h30m", 5_400 * 10**9), ("7d", 604_800 * 10**9),
                                          ("500ms", 5 * 10**8)])
def test_retention_durations(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("text", ["", "1", "h", "1 h", "-1h", "0s", "1h;DROP", "1.5h"])
def test_bad_retention_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration_ns(text)


def test_retention_flag_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="retention"):
        resolve(tmp_path, transport="changefeed", retention="forever")
    assert resolve(tmp_path, transport="changefeed", retention="2h").retention == "2h"


def test_impersonation_session_length_defaults_to_10s_and_is_a_duration(tmp_path: Path) -> None:
    from svccli.schema import impersonation_access_sql

    env = {"SVC_INGEST_TRANSPORT": "changefeed"}
    assert resolve(tmp_path, env).impersonation_session_ms == 10_000
    for text, ms in (("2s", 2000), ("1m30s", 90_000), ("1500ms", 1500)):
        s = resolve(tmp_path, {**env, "SVC_IMPERSONATION_SESSION": text})
        assert s.impersonation_session_ms == ms
        assert impersonation_access_sql("ab12", ms).endswith(f"FOR SESSION {ms}ms")
    for bad in ("soon", "10", "500ms", "2s; REMOVE TABLE user"):
        with pytest.raises(ConfigError, match="SVC_IMPERSONATION_SESSION"):
            resolve(tmp_path, {**env, "SVC_IMPERSONATION_SESSION": bad})
