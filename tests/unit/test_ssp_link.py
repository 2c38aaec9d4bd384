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


async def _register_waits(refusals: int, **env: str) -> list[float]:
    """The waits between registration attempts against a scheduler (a real HTTP server)
    that answers 503 `refusals` times, then 202."""
    from aiohttp import web

    attempts = [0]

    async def register(_: web.Request) -> web.Response:
        attempts[0] += 1
        if attempts[0] <= refusals:
            return web.json_response({"error": "cloning"}, status=503)
        return web.json_response({"snapshot_seq": 7, "epoch": "e"}, status=202)

    app = web.Application()
    app.router.add_post("/ssp/register", register)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    waits: list[float] = []

    async def no_wait(secs: float) -> None:
        waits.append(round(secs, 3))

    link = _link(SVC_SCHEDULER_URL=f"http://127.0.0.1:{port}/", **env)
    link.sleep = no_wait
    try:
        assert await link.register() == 7
    finally:
        await link.close()
        await runner.cleanup()
    return waits


async def test_registration_retries_double_up_to_the_configured_longest_wait() -> None:
    assert await _register_waits(7) == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert await _register_waits(5, SVC_SSP_REGISTER_RETRY_MAX_MS="500") == [
        0.2, 0.4, 0.5, 0.5, 0.5]
