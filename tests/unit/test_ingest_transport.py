"""One rule for the ingest transport (ipc.transport): the scheduler, the SSP and the CLI read
SVC_INGEST_TRANSPORT the same way, default to the spec's `http`, and refuse the same values
with the same message."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipc.transport import DEFAULT_TRANSPORT, ingest_transport, parse_transport
from scheduler.config import ConfigError as SchedulerConfigError
from scheduler.config import SchedulerConfig
from ssp.config import ConfigError as SspConfigError
from ssp.config import SspConfig
from svccli.settings import ConfigError as CliConfigError
from svccli.settings import resolve_settings

DB = {"SVC_DB_URL": "http://127.0.0.1:1", "SVC_DB_USER": "u", "SVC_DB_PASS": "p",
      "SVC_INGEST_URL": "http://127.0.0.1:9667/ingest",
      "SVC_DB_NS": "n", "SVC_DB_NAME": "d"}


def three(env: dict[str, str], cwd: Path) -> tuple[str, str, str]:
    """(SSP, scheduler, CLI) transport for `env` (no flag, no project file)."""
    ssp = SspConfig.from_env({**DB, **env}).ingest_transport
    sched = SchedulerConfig.load(None, {**DB, **env}).ingest_transport.value
    cli = resolve_settings({**DB, **env}, transport_flag=None, project_flag=None,
                           ingest_url_flag=None, retention_flag=None, cwd=cwd).transport
    return ssp, sched, cli


@pytest.mark.parametrize(("raw", "expected"), [
    (None, "http"), ("", "http"), ("  ", "http"), ("http", "http"), ("HTTP", "http"),
    ("changefeed", "changefeed"), (" ChangeFeed ", "changefeed"),
])
def test_every_component_resolves_the_same_transport(tmp_path: Path, raw: str | None,
                                                     expected: str) -> None:
    env = {} if raw is None else {"SVC_INGEST_TRANSPORT": raw}
    assert three(env, tmp_path) == (expected, expected, expected)
    assert ingest_transport(env) == expected
    assert DEFAULT_TRANSPORT == "http"  # spec, "What the service does" 5


def test_every_component_refuses_the_same_values_alike(tmp_path: Path) -> None:
    env = {**DB, "SVC_INGEST_TRANSPORT": "carrier-pigeon"}
    msg = ("ingest transport 'carrier-pigeon' (from SVC_INGEST_TRANSPORT) must be one of "
           "http, changefeed")
    with pytest.raises(SspConfigError) as e1:
        SspConfig.from_env(env)
    with pytest.raises(SchedulerConfigError) as e2:
        SchedulerConfig.load(None, env)
    with pytest.raises(CliConfigError) as e3:
        resolve_settings(env, transport_flag=None, project_flag=None, ingest_url_flag=None,
                         retention_flag=None, cwd=tmp_path)
    assert str(e1.value) == str(e2.value) == str(e3.value) == msg
    with pytest.raises(ValueError, match="from --transport"):
        parse_transport("kafka", "--transport")
