"""Bearer authentication on the SSP listener (spec, Authentication 1)."""

from __future__ import annotations

import pytest

from gateway.testing import GatewayUnderTest
from ipc.bearer import BearerAuth, bearer_token
from ipc.httperrors import HttpError

SECRET = "s3cret-token"
INGEST = {"table": "post", "op": "CREATE", "id": "post:1", "record": {}}
PUBLIC = ["/health", "/version", "/info", "/info/text"]
PRIVATE_GETS = ["/debug/view/query:a", "/debug/deps", "/debug/memory", "/debug/catchup-rows/post",
                "/debug/heartbeat", "/logs?tail=false"]


@pytest.mark.parametrize("path", PUBLIC)
async def test_public_routes_need_no_token(path: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_get(path)
        assert result.status_code == 200


@pytest.mark.parametrize("path", PRIVATE_GETS)
@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic czNjcmV0", "Bearer wrong", f"Bearer {SECRET}x", "s3cret-token"]
)
async def test_private_get_routes_refuse_missing_or_wrong_tokens(path: str, header: str | None) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        headers = {} if header is None else {"Authorization": header}
        result = await gw.client.simulate_get(path, headers=headers)
        assert result.status_code == 401
        assert result.json["error"] == "unauthorized"
        assert result.headers["www-authenticate"] == "Bearer"
        assert gw.hub.requests == []


@pytest.mark.parametrize("path", ["/ingest", "/view/register", "/view/unregister", "/reset", "/admin/reload", "/log"])
async def test_post_routes_refuse_a_wrong_token_before_reading_the_body(path: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post(path, body=b"not json", headers={"Authorization": "Bearer nope"})
        assert result.status_code == 401
        assert gw.hub.requests == []


async def test_a_401_never_echoes_the_token_sent() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        sent = "Bearer my-leaked-guess-123"
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers={"Authorization": sent})
        assert result.status_code == 401
        assert "my-leaked-guess" not in result.text
        assert SECRET not in result.text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_the_right_token_is_accepted_whatever_the_scheme_case(scheme: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers={"Authorization": f"{scheme} {SECRET}"})
        assert result.status_code == 200


async def test_without_a_secret_any_bearer_token_is_accepted() -> None:
    async with GatewayUnderTest(None) as gw:
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers={"Authorization": "Bearer anything"})
        assert result.status_code == 200


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc"])
async def test_without_a_secret_a_request_with_no_bearer_is_still_401(header: str | None) -> None:
    async with GatewayUnderTest(None) as gw:
        headers = {} if header is None else {"Authorization": header}
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers=headers)
        assert result.status_code == 401


def test_non_ascii_secret_compares_the_bytes_the_client_sent() -> None:
    auth = BearerAuth("pässwörd")
    # Falcon hands header values over decoded as latin-1: UTF-8 bytes appear as mojibake.
    auth.check("Bearer " + "pässwörd".encode().decode("latin-1"))
    with pytest.raises(HttpError):
        auth.check("Bearer " + "passwort")


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("  bearer   abc  ", "abc"), ("Bearer", None), ("Token abc", None), (None, None)],
)
def test_bearer_token_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token
