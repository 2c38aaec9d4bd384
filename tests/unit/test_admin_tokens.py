"""Admin tokens (scheduler.admin.tokens), the sign-in rate limit and the SSE building blocks."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import jwt
import pytest

from scheduler.admin.errors import Forbidden, Invalid, NotFound, Unauthorized, error_body
from scheduler.admin.ratelimit import LoginLimiter
from scheduler.admin.sse import Channel, LogRing, channel_stream
from scheduler.admin.tokens import AUDIENCE, TokenAuthority, derive_key, token_ref

SECRET = "a-shared-secret-for-the-unit-tests"


def test_the_token_key_is_derived_for_this_purpose_only() -> None:
    key = derive_key(SECRET)
    assert len(key) == 32 and key != SECRET.encode() and key == derive_key(SECRET)
    assert derive_key(SECRET + "x") != key


def test_session_tokens_are_self_describing_and_survive_a_new_authority(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path)
    token, p = a.session("breakglass", "breakglass")
    claims = jwt.decode(token, derive_key(SECRET), algorithms=["HS256"], audience=AUDIENCE)
    assert claims["mode"] == "breakglass" and claims["scope"] == "full"
    assert claims["exp"] - claims["iat"] == 60
    b = TokenAuthority(SECRET, 60, tmp_path)  # a restart
    assert b.verify(token).subject == "breakglass"
    a.revoke(p)  # a logout is forgotten by a restart (spec), kept by this process
    with pytest.raises(Unauthorized):
        a.verify(token)
    assert TokenAuthority(SECRET, 60, tmp_path).verify(token).token_id == p.token_id
    with pytest.raises(Unauthorized):
        TokenAuthority("another-secret-of-enough-length!!", 60, tmp_path).verify(token)


def test_minted_revocations_persist_until_expiry(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path)
    _, session = a.session("breakglass", "breakglass")
    token, minted = a.mint(session, {"label": "ci", "scope": "read", "ttl_days": 2})
    assert minted.mode == "mcp" and minted.kind == "minted" and minted.scope == "read"
    assert a.revoke_token(token) and not a.revoke_token("garbage")
    with pytest.raises(Unauthorized):
        TokenAuthority(SECRET, 60, tmp_path).verify(token)
    saved = json.loads((tmp_path / "admin-tokens.json").read_text())
    # kept by reference (a digest of the id), never the token or its id
    assert minted.token_id not in json.dumps(saved) and token not in json.dumps(saved)
    entry = saved["tokens"][token_ref(minted.token_id)]
    assert entry["revoked_at"] is not None and entry["expires_at"] == minted.expires_at
    assert (tmp_path / "admin-tokens.json").stat().st_mode & 0o077 == 0


def test_tokens_are_listed_and_revoked_by_reference_across_a_restart(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path)
    s_token, session = a.session("user:alice", "roster")
    ci_token, ci = a.mint(session, {"label": "ci", "scope": "full", "ttl_days": 30})
    rows = {r["id"]: r for r in a.listing(session)}
    assert rows[ci.ref]["label"] == "ci" and rows[ci.ref]["subject"] == "user:alice"
    assert rows[session.ref]["current"] and not rows[ci.ref]["revoked"]
    assert {r["id"] for r in a.listing(ci)} == set(rows)  # reading the list opens nothing
    with pytest.raises(Forbidden):
        a.revoke_ref(ci, session.ref)  # a minted token revokes nothing
    b = TokenAuthority(SECRET, 60, tmp_path)  # a restart: the registry is read back
    b.revoke_ref(b.verify(s_token), ci.ref)
    with pytest.raises(NotFound):
        b.revoke_ref(session, "0" * 24)
    for authority in (b, TokenAuthority(SECRET, 60, tmp_path)):
        with pytest.raises(Unauthorized):
            authority.verify(ci_token)
        assert authority.verify(s_token).subject == "user:alice"
    # a session revoked by reference stays revoked after a restart too (unlike a logout)
    b.revoke_ref(session, session.ref)
    with pytest.raises(Unauthorized):
        TokenAuthority(SECRET, 60, tmp_path).verify(s_token)


def test_a_revocation_file_of_an_older_release_still_revokes(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path)
    _, session = a.session("breakglass", "breakglass")
    token, minted = a.mint(session, {"label": "old", "scope": "read", "ttl_days": 1})
    (tmp_path / "admin-tokens.json").unlink()
    (tmp_path / "admin-revoked.json").write_text(json.dumps({minted.token_id:
                                                             minted.expires_at}))
    with pytest.raises(Unauthorized):
        TokenAuthority(SECRET, 60, tmp_path).verify(token)


async def test_break_glass_tokens_fall_when_the_password_changes(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path, breakglass_password="pw-one")
    token, p = a.session("breakglass", "breakglass")
    minted, _ = a.mint(p, {"label": "m", "scope": "read", "ttl_days": 1})
    claims = jwt.decode(token, derive_key(SECRET), algorithms=["HS256"], audience=AUDIENCE)
    assert claims["bg"] and "pw-one" not in json.dumps(claims)
    same = TokenAuthority(SECRET, 60, tmp_path, breakglass_password="pw-one")
    changed = TokenAuthority(SECRET, 60, tmp_path, breakglass_password="pw-two")
    unset = TokenAuthority(SECRET, 60, tmp_path)
    for t in (token, minted):
        assert same.breakglass_current(same.verify(t))
        assert not changed.breakglass_current(changed.verify(t))
        assert not unset.breakglass_current(unset.verify(t))

    async def stands(p: Any) -> bool:
        return changed.breakglass_current(p)

    changed.standing = stands
    with pytest.raises(Unauthorized):
        await changed.check(token)


def test_mint_rules(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path)
    _, session = a.session("breakglass", "breakglass")
    _, mcp = a.mint(session, {"label": "x", "scope": "full", "ttl_days": 365})
    with pytest.raises(Forbidden):
        a.mint(mcp, {"label": "y", "scope": "read", "ttl_days": 1})
    for bad in ({"label": "x", "scope": "read", "ttl_days": 365.5}, {"label": " "},
                {"label": "x", "scope": "root"}, {"label": "x", "ttl_days": True},
                {"label": "x", "ttl_days": 0}, {"label": "x", "scope": "read", "ttl_days": 1.5},
                {"label": "x", "ttl_days": 30}, {"label": "x", "scope": "read", "ttl_days": "7"},
                None, []):
        with pytest.raises(Invalid):
            a.mint(session, bad)


def test_without_the_secret_tokens_are_random_and_in_memory(tmp_path: Path) -> None:
    a = TokenAuthority(None, 60, tmp_path)
    assert not a.persistent
    token, p = a.session("breakglass", "breakglass")
    assert token.startswith("sva_") and "." not in token
    assert a.verify(token) == p
    with pytest.raises(Unauthorized):
        TokenAuthority(None, 60, tmp_path).verify(token)
    a.revoke(p, token)
    with pytest.raises(Unauthorized):
        a.verify(token)


def test_the_limiter_allows_ten_failures_per_window_per_address() -> None:
    now = [0.0]
    lim = LoginLimiter(clock=lambda: now[0])
    for _ in range(9):
        lim.fail("a")
    assert not lim.blocked("a")
    lim.fail("a")
    assert lim.blocked("a") and not lim.blocked("b")
    now[0] = 299.0
    assert lim.blocked("a")
    now[0] = 300.5
    assert not lim.blocked("a")


def test_the_limiter_bounds_failures_from_all_addresses_together() -> None:
    now = [0.0]
    lim = LoginLimiter(clock=lambda: now[0], max_global_failures=30)
    for i in range(30):  # a new address for every guess (rotated addresses)
        assert not lim.blocked(f"10.0.0.{i}")
        lim.fail(f"10.0.0.{i}")
    assert lim.blocked("10.0.0.200") and lim.blocked("127.0.0.1")
    now[0] = 300.5
    assert not lim.blocked("10.0.0.200")


def test_error_bodies_have_one_shape() -> None:
    body = error_body(Forbidden("no", code="mcp_token"))
    assert body == {"error": "forbidden", "code": "mcp_token", "message": "no"}
    assert error_body(Unauthorized()) == {
        "error": "unauthorized", "message": "missing, invalid, expired or revoked bearer token"}


async def test_a_viewer_that_falls_behind_gets_a_gap_then_the_latest() -> None:
    ch = Channel()
    ch.publish({"v": 1})
    stream = channel_stream(ch, "ops", keepalive=5)
    assert (await stream.__anext__()).serialize().startswith(b"retry")
    first = (await stream.__anext__()).serialize()
    assert b'"v":1' in first and b"event: ops" in first
    ch.publish({"v": 2})
    ch.publish({"v": 3})
    ch.publish({"v": 4})
    gap = (await stream.__anext__()).serialize()
    assert gap.startswith(b"event: gap") and b'"missed":2' in gap
    latest = (await stream.__anext__()).serialize()
    assert b'"v":4' in latest
    waiting = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    ch.publish({"v": 5})
    assert b'"v":5' in (await asyncio.wait_for(waiting, 5)).serialize()  # no gap: in step
    assert ch.viewers == 1
    await stream.aclose()
    assert ch.viewers == 0


def test_the_log_ring_reports_lines_lost_before_a_viewer_read_them() -> None:
    ring = LogRing(capacity=5)
    logger = logging.getLogger("test.ring")
    logger.addHandler(ring)
    logger.setLevel(logging.INFO)
    try:
        for i in range(3):
            logger.info("line %d", i)
        lines, cur, gap = ring.since(0)
        assert [ln["message"] for ln in lines] == ["line 0", "line 1", "line 2"] and not gap
        for i in range(3, 12):
            logger.info("line %d", i)
        lines, cur2, gap = ring.since(cur)
        assert gap and [ln["n"] for ln in lines] == [8, 9, 10, 11, 12] and cur2 == 12
        assert ring.since(cur2) == ([], 12, False)
        assert ring.tail_cursor(2) == 10
    finally:
        logger.removeHandler(ring)


def test_a_burst_of_sign_ins_writes_the_registry_at_most_once_a_second(tmp_path: Path) -> None:
    a = TokenAuthority(SECRET, 60, tmp_path)
    writes = []
    real = a._write

    def counting(*, force: bool = True) -> None:
        before = a._written_at
        real(force=force)
        if a._written_at != before:
            writes.append(force)

    a._write = counting  # type: ignore[method-assign]
    for _ in range(200):
        a.session("breakglass", "breakglass")
    assert len(writes) <= 2  # the first, and perhaps one a second later on a slow machine
    a.flush()
    b = TokenAuthority(SECRET, 60, tmp_path)
    _, s = b.session("breakglass", "breakglass")
    assert len(b.listing(s)) == 201  # every session of the burst is listed after a restart

