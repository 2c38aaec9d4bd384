"""The shared impersonation rules (`maintenance.impersonation`): the flag, the mint's checks
and claims, the user search's validation and `is_admin`."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from maintenance.impersonation import (
    Impersonation,
    Invalid,
    UserSearch,
    parse_flag,
    shape_users,
    signing_key,
)
from scheduler.config import ConfigError as SchedulerConfigError
from scheduler.config import SchedulerConfig
from ssp.config import ConfigError as SspConfigError
from ssp.config import SspConfig

SECRET = "imp-secret-for-tests-0123456789abcdef"
DB_ENV = {"SVC_DB_URL": "ws://127.0.0.1:1/rpc", "SVC_DB_USER": "root", "SVC_DB_PASS": "pw"}
NOW = 1_800_000_000


def body(**over: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"session": "_00_impersonation:s1", "target": "user:alice",
                         "admin": "user:bob", "ttl_secs": 600, "session_remaining_secs": 1800}
    b.update(over)
    return b


def imp() -> Impersonation:
    return Impersonation(True, SECRET, "ns1", "db1")


@pytest.mark.parametrize("raw,want", [(None, False), ("", False), ("off", False),
                                      (" ON ", True), ("on", True), ("true", True),
                                      ("0", False)])
def test_flag_values(raw: str | None, want: bool) -> None:
    assert parse_flag(raw) is want


def test_both_components_read_the_flag_alike() -> None:
    for raw in ("on", "off", "ON", "yes", ""):
        ssp = SspConfig.from_env({**DB_ENV, "SVC_IMPERSONATION": raw}).impersonation
        sched = SchedulerConfig.load(None, {**DB_ENV, "SVC_IMPERSONATION": raw}).impersonation
        assert ssp is sched is parse_flag(raw)
    with pytest.raises(SspConfigError):
        SspConfig.from_env({**DB_ENV, "SVC_IMPERSONATION": "sometimes"})
    with pytest.raises(SchedulerConfigError):
        SchedulerConfig.load(None, {**DB_ENV, "SVC_IMPERSONATION": "sometimes"})


def test_disabled_without_secret_or_flag() -> None:
    assert not Impersonation(True, "", "n", "d").enabled
    assert not Impersonation(True, None, "n", "d").enabled
    assert not Impersonation(False, SECRET, "n", "d").enabled
    assert Impersonation(True, SECRET, "n", "d").enabled


def test_mint_claims_and_expiry_is_the_smallest_bound() -> None:
    m = imp().mint(body(), now=NOW)
    assert m.exp == NOW + 600
    claims = jwt.decode(m.token, signing_key(SECRET), algorithms=["HS256"],
                        options={"verify_exp": False, "verify_nbf": False,
                                 "verify_iat": False})
    assert claims["AC"] == "_00_impersonate" and claims["ID"] == "user:alice"
    assert claims["imp"] == "_00_impersonation:s1" and claims["imp_admin"] == "user:bob"
    assert (claims["NS"], claims["DB"]) == ("ns1", "db1")
    assert imp().mint(body(ttl_secs=99999), now=NOW).exp == NOW + 1800
    assert imp().mint(body(ttl_secs=99999, session_remaining_secs=99999), now=NOW).exp == \
        NOW + 3600
    assert imp().mint(body(session_remaining_secs=30.9), now=NOW).exp == NOW + 30
    other = imp().mint(body(ns="x", db="y", access="account"), now=NOW)
    c2 = jwt.decode(other.token, options={"verify_signature": False})
    assert (c2["NS"], c2["DB"], c2["imp_access"]) == ("x", "y", "account")


def test_the_token_is_not_signed_with_the_bearer_secret_itself() -> None:
    m = imp().mint(body(), now=NOW)
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(m.token, SECRET, algorithms=["HS256"], options={"verify_exp": False})


@pytest.mark.parametrize("over,field", [
    ({"session": "user:s1"}, "session"),
    ({"session": "_00_impersonation"}, "session"),
    ({"session": None}, "session"),
    ({"target": "user:bob"}, "target"),
    ({"target": "user:⟨bob⟩"}, "target"),
    ({"target": 5}, "target"),
    ({"session_remaining_secs": 0}, "session_remaining_secs"),
    ({"session_remaining_secs": -5}, "session_remaining_secs"),
    ({"session_remaining_secs": None}, "session_remaining_secs"),
    ({"ttl_secs": 0}, "ttl_secs"),
    ({"ttl_secs": "600"}, "ttl_secs"),
    ({"access": "a b"}, "access"),
])
def test_mint_refuses(over: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid, match=field):
        imp().mint(body(**over), now=NOW)


def test_user_search_validation() -> None:
    s = UserSearch.from_body({"table": "user", "fields": ["name", "email"], "search": "AL",
                              "limit": 500})
    assert s.limit == 100 and s.fields == ("name", "email")
    text, variables = s.query()
    assert variables == {"s": "al", "n": 100}
    assert "SELECT id, name, email, is_admin FROM user WHERE" in text and "(name ?? '')" in text
    for bad in ({"table": "user; DELETE user"}, {"table": "user", "fields": ["a-b"]},
                {"table": "user", "fields": "name"}, {"table": "user", "limit": 0},
                {"table": "user", "limit": "5"}, {"table": "user", "search": 3}, [],
                # root reads here: a password hash must be neither returned nor searchable
                {"table": "user", "fields": ["pass"]}, {"table": "user", "fields": ["token"]},
                {"table": "_00_admin", "fields": ["name"]}):
        with pytest.raises(Invalid):
            UserSearch.from_body(bad)


def test_is_admin_from_roster_or_own_field() -> None:
    rows = [{"id": "user:alice", "name": "alice"}, {"id": "user:bob", "email": "Bob@x.io"},
            {"id": "user:carol", "is_admin": True}, {"id": "user:dan"},
            {"id": "user:x", "name": "ALICE"}]
    # the roster as the query reads it: bound records, or record-id entries; a name that only
    # looks like an entry (bob@x.io typed by anyone, ALICE) is not an admin
    out = shape_users(rows, ["user:alice", "bob@x.io"], ("name", "email"))
    assert [r["is_admin"] for r in out] == [True, False, True, False, False]
    assert shape_users(rows[:1], "user:alice", ())[0]["is_admin"] is True


# ---------------------------------------------------------------- the two listeners' routes


class _Cfg:
    def __init__(self, enabled: bool, secret: str | None) -> None:
        from dbclient import DbConfig

        self.impersonation = enabled
        self.auth_secret = secret
        self.db = DbConfig.from_env({**DB_ENV, "SVC_DB_NS": "n", "SVC_DB_NAME": "d"})


class _Sched:
    def __init__(self, enabled: bool, secret: str | None) -> None:
        self.cfg = _Cfg(enabled, secret)
        self.db = None  # the user search is covered by the integration test


def _scheduler_client(enabled: bool, secret: str | None, db: Any = None) -> Any:
    import falcon.asgi
    import falcon.testing

    from ipc.httperrors import serialize_error
    from scheduler.impersonate import add_impersonation_routes

    app: Any = falcon.asgi.App()
    app.set_error_serializer(serialize_error)
    sched = _Sched(enabled, secret)
    sched.db = db
    add_impersonation_routes(app, sched)
    return falcon.testing.TestClient(app)


@pytest.mark.parametrize("enabled,secret", [(False, SECRET), (True, None), (True, "")])
def test_scheduler_routes_are_404_unless_enabled_with_a_secret(enabled: bool,
                                                               secret: str | None) -> None:
    client = _scheduler_client(enabled, secret)
    for path in ("/impersonate/mint", "/impersonate/users"):
        r = client.simulate_post(path, json=body(),
                                 headers={"Authorization": f"Bearer {SECRET}"})
        assert r.status_code == 404, r.text


def test_scheduler_mint_needs_the_bearer_then_a_good_body() -> None:
    client = _scheduler_client(True, SECRET)
    assert client.simulate_post("/impersonate/mint", json=body()).status_code == 401
    assert client.simulate_post("/impersonate/mint", json=body(),
                                headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = {"Authorization": f"Bearer {SECRET}"}
    r = client.simulate_post("/impersonate/mint", json=body(target="user:bob"), headers=ok)
    assert r.status_code == 400 and r.json["error"] == "invalid"
    r = client.simulate_post("/impersonate/mint", json=body(), headers=ok)
    assert r.status_code == 200 and set(r.json) == {"token", "exp"}


async def test_ssp_hub_routes_are_404_unless_enabled() -> None:
    from ssp.impersonate import impersonation_routes

    for imp_ in (Impersonation(False, SECRET, "n", "d"), Impersonation(True, "", "n", "d")):
        routes = impersonation_routes(imp_)
        for route in ("POST /impersonate/mint", "POST /impersonate/users"):
            r = await routes[route](None, {"route": route, "body": body()})
            assert r["status"] == 404, r
    routes = impersonation_routes(imp())
    r = await routes["POST /impersonate/mint"](None, {"body": body(admin="user:alice")})
    assert r["status"] == 400 and r["body"]["error"] == "invalid"
    r = await routes["POST /impersonate/users"](None, {"body": {"table": "a b"}})
    assert r["status"] == 400


class _DownDb:
    async def query(self, *_a: Any, **_k: Any) -> Any:
        from dbclient import DbConnectionError

        raise DbConnectionError("connection refused by 10.0.0.7:8000 (user root)")


def test_scheduler_user_search_with_the_database_down_is_the_one_503() -> None:
    """The scheduler's user search, the admin API and the pools answer a database that did
    not answer with one code and one sentence, never the engine's text (it may name a host or
    a credential)."""
    from dbclient.errors import UNREACHABLE_CODE
    from scheduler.admin.errors import db_unreachable
    from scheduler.pools.service import db_down

    client = _scheduler_client(True, SECRET, _DownDb())
    r = client.simulate_post("/impersonate/users", json={"table": "user"},
                             headers={"Authorization": f"Bearer {SECRET}"})
    assert r.status_code == 503, r.text
    assert r.json["error"] == UNREACHABLE_CODE and "10.0.0.7" not in r.text
    assert db_unreachable().error_code == UNREACHABLE_CODE
    status, reply = db_down().reply()
    assert status == 503 and reply["error"] == UNREACHABLE_CODE
    assert reply["message"] == r.json["message"] == db_unreachable().message
