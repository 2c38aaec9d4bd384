"""svc-db configuration: argv plus environment, read once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("text,kw,want", [
    ("127.0.0.1:8000", {}, ("127.0.0.1", 8000)),
    ("[::1]:9", {}, ("::1", 9)),
    ("db.internal", {"default_port": 53}, ("db.internal", 53)),
    ("[::1]", {"default_port": 53}, ("::1", 53)),
    ("", {"default_port": 8667, "default_host": "0.0.0.0"}, ("0.0.0.0", 8667)),
    (":8667", {"default_host": "0.0.0.0"}, ("0.0.0.0", 8667)),
])
def test_one_host_port_reader_for_every_listener(text: str, kw: dict[str, Any],
                                                 want: tuple[str, int]) -> None:
    """dbhost's --bind, the SSP's listen address, the platform's bind and resolvers and
    ops/run's options all read HOST:PORT with ipc.envvars.host_port."""
    from ipc.envvars import host_port

    assert host_port(text, "X", **kw) == want


@pytest.mark.parametrize("text", ["nope", ":80", "h:0", "h:65536", "h:x", "h:-1", ""])
def test_host_port_refuses_what_no_listener_can_use(text: str) -> None:
    from ipc.envvars import host_port

    with pytest.raises(ValueError, match="X must be host:port"):
        host_port(text, "X")


def test_engine_and_allowed_targets_from_flags_or_environment() -> None:
    assert load_config(["--memory"], CREDS).engine == "embedded"
    c = load_config(["--engine", "node", "--allow-net", "127.0.0.1:9667, example.com"], CREDS)
    assert (c.engine, c.allow_net) == ("node", ("127.0.0.1:9667", "example.com"))
    c = load_config([], {**CREDS, "SVC_DB_ENGINE": "node", "SVC_DB_ALLOW_NET": "10.0.0.5"})
    assert (c.engine, c.allow_net) == ("node", ("10.0.0.5",))
    assert load_config([], {**CREDS, "SVC_DB_ENGINE": "node"}).allow_net == ()


def test_allowed_targets_need_the_node_engine_and_engines_are_named() -> None:
    # the embedded build has no http::* functions: allowing targets there would mislead
    with pytest.raises(ConfigError, match="--engine node"):
        load_config(["--allow-net", "127.0.0.1"], CREDS)
    with pytest.raises(ConfigError, match="embedded, node"):
        load_config([], {**CREDS, "SVC_DB_ENGINE": "wasm"})


def test_the_memtable_size_follows_the_engines_tiers_of_machine_memory() -> None:
    # The soak prints when the host's first memtable flush comes under --memory: the
    # memtable's size is the engine's tier for the machine's memory.
    from dbhost.scratch import memtable_bytes, memtable_bytes_for

    mib, gib = 1024 * 1024, 1024 ** 3
    assert [memtable_bytes_for(m) for m in (gib - 1, gib, 4 * gib - 1, 4 * gib, 16 * gib - 1,
                                            16 * gib, 64 * gib - 1, 64 * gib)] == [
        64 * mib, 128 * mib, 128 * mib, 256 * mib, 256 * mib, gib, gib, 4 * gib]
    assert memtable_bytes() in {64 * mib, 128 * mib, 256 * mib, gib, 4 * gib}


def test_max_inflight_from_env_and_flag_wins_and_bad_values_are_refused() -> None:
    from dbhost.config import DEFAULT_MAX_INFLIGHT
    assert load_config([], CREDS).max_inflight == DEFAULT_MAX_INFLIGHT
    assert load_config([], {**CREDS, "SVC_DB_MAX_INFLIGHT": "0"}).max_inflight == 0
    assert load_config(["--max-inflight", "3"],
                       {**CREDS, "SVC_DB_MAX_INFLIGHT": "5"}).max_inflight == 3
    for bad in ("-1", "many", "2.5"):
        with pytest.raises(ConfigError, match="SVC_DB_MAX_INFLIGHT"):
            load_config([], {**CREDS, "SVC_DB_MAX_INFLIGHT": bad})
