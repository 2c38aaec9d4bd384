"""svc-db configuration: argv plus environment, read once."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbhost.config import DEFAULT_MAX_FRAME_BYTES, ConfigError, load_config, parse_bind

CREDS = {"SVC_DB_USER": "root", "SVC_DB_PASS": "s3cret"}


def test_defaults_and_memory() -> None:
    c = load_config(["--bind", "127.0.0.1:9000", "--memory"], CREDS)
    assert (c.host, c.port, c.path) == ("127.0.0.1", 9000, None)
    # memory only: surrealkv in the host's scratch directory, nothing fsynced (dbhost.scratch)
    assert c.engine_url(Path("/tmp/x")) == "surrealkv:///tmp/x/data?sync=never"
    with pytest.raises(ValueError):
        c.engine_url()
    assert c.max_frame_bytes == DEFAULT_MAX_FRAME_BYTES
    assert "s3cret" not in repr(c)


def test_path_gives_surrealkv(tmp_path: Path) -> None:
    c = load_config(["--path", str(tmp_path / "d")], CREDS)
    assert c.engine_url() == f"surrealkv://{tmp_path / 'd'}"


def test_max_frame_from_env_and_flag_wins() -> None:
    env = {**CREDS, "SVC_DB_MAX_FRAME_BYTES": "1000"}
    assert load_config([], env).max_frame_bytes == 1000
    assert load_config(["--max-frame-bytes", "2000"], env).max_frame_bytes == 2000
    with pytest.raises(ConfigError):
        load_config([], {**CREDS, "SVC_DB_MAX_FRAME_BYTES": "lots"})
    with pytest.raises(ConfigError):
        load_config(["--max-frame-bytes", "0"], CREDS)


def test_credentials_are_required_unless_insecure_dev_mode() -> None:
    with pytest.raises(ConfigError, match="SVC_DB_USER"):
        load_config([], {})
    with pytest.raises(ConfigError, match="both"):
        load_config([], {"SVC_DB_USER": "root"})
    c = load_config(["--insecure-default-root"], {})
    assert (c.user, c.password, c.insecure_default_root) == ("root", "root", True)


@pytest.mark.parametrize("bind", ["nope", ":80", "host:0", "host:70000", "host:x"])
def test_bad_bind(bind: str) -> None:
    with pytest.raises(ConfigError):
        parse_bind(bind)


def test_ipv6_bind() -> None:
    assert parse_bind("[::1]:8000") == ("::1", 8000)
