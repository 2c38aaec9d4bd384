"""ssp.link pieces that need no process: the resync directive and the advertised URL."""

from __future__ import annotations

import pytest

from ssp.config import SspConfig
from ssp.hub import Hub
from ssp.link import SchedulerLink, parse_directive

DB = {"SVC_DB_URL": "ws://127.0.0.1:1", "SVC_SSP_SHARDS": "1"}


@pytest.mark.parametrize(
    ("text", "reason", "clean"),
    [
        ('{"reason": "buffer overflow", "clean": true}', "buffer overflow", True),
        ('{"reason": "operator restart", "clean": false}', "operator restart", False),
        ('{"reason": "x", "clean": "yes"}', "x", False),  # only a JSON true is clean
        ("restart please", "restart please", False),  # older scheduler: plain text
        ("[1, 2]", "[1, 2]", False),
        ("", "", False),
    ],
)
def test_directive_parsing(text: str, reason: str, clean: bool) -> None:
    assert parse_directive(text) == (reason, clean)


def _link(**env: str) -> SchedulerLink:
    cfg = SspConfig.from_env({**DB, "SVC_SCHEDULER_URL": "http://127.0.0.1:9667/",
                              "SVC_SSP_ID": "s1", **env})
    return Hub(cfg).link  # type: ignore[return-value]


def test_own_url_from_listen_or_advertise_address() -> None:
    assert _link().own_url == "http://127.0.0.1:8667"
    assert _link(SVC_SSP_LISTEN_ADDR="10.0.0.5:9000").own_url == "http://10.0.0.5:9000"
    assert _link(SVC_SSP_ADVERTISE_ADDR="ssp-a.internal:8667").own_url == \
        "http://ssp-a.internal:8667"
    assert _link(SVC_SSP_ADVERTISE_ADDR="https://ssp-a.example").own_url == \
        "https://ssp-a.example"
    assert _link().base == "http://127.0.0.1:9667"


def test_standalone_hub_has_no_link() -> None:
    assert Hub(SspConfig.from_env(DB)).link is None
