"""The hub's registration decisions, in process, with the shard and the database replaced by
narrow seams (what real processes cannot be made to do on demand: a shard's unexpected engine
error). Real-process tests of the same rules: tests/integration/test_ssp_register_failures.py."""

from __future__ import annotations

from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import DbConnectionError, DbQueryError, DbTimeout
from engine.parser import MAX_DEPTH
from ssp.config import SspConfig
from ssp.hub import Hub, ViewState, check_params
from ssp.naming import view_record
from ssp.shards import ShardError, ShardTimeout
from tests.support.fakedb import FakeDb

OLD = "SELECT * FROM post WHERE n > 3"
NEW = "SELECT * FROM post WHERE n < 3"
ALICE = RecordID("user", "alice")


class FakeShard:
    """Stands in for `ShardHandle`: answers `register` as told, records calls and kills."""

    def __init__(self, register: BaseException | None = None) -> None:
        self.register = register
        self.calls: list[tuple[str, Any]] = []
        self.killed = 0
        self.up = True

    async def call(self, kind: str, payload: Any = None, timeout: float = 0) -> dict[str, Any]:
        self.calls.append((kind, payload))
        if kind == "register" and self.register is not None:
            raise self.register
        if kind == "register":
            return {"ok": True, "members": ["post:1"]}
        if kind == "result":
            raise ShardError("not_found", "no such view")
        return {"ok": True}

    def kill(self) -> None:
        self.killed += 1
        self.up = False


def make_hub(shard: FakeShard, db_fail: BaseException | None = None,
             permissions: str = "off") -> Hub:
    # Select permissions are off here (these tests are about the shard and the publication);
    # with them on they are read from the database (`hub.permissions.db`), which is unreachable.
    hub = Hub(SspConfig.from_env({"SVC_DB_URL": "ws://127.0.0.1:1", "SVC_SSP_SHARDS": "1",
                                  "SVC_SSP_RUN_DIR": "/tmp/ssp-unit",
                                  "SVC_SSP_VIEW_PERMISSIONS": permissions}))
    hub.status = "ready"
    hub.tables.add("post")
    hub.shards = [shard]  # type: ignore[list-item]
    hub.db = FakeDb()  # type: ignore[assignment]
    hub.pub_db = FakeDb(db_fail)  # type: ignore[assignment]
    hub.publisher.db = hub.pub_db  # type: ignore[assignment]
    hub.edges.known.add("_00_list_ref_user_alice")
    return hub


class Unreachable:
    """A database client whose database cannot be reached."""

    async def query_one(self, sql: str, vars: Any = None, **_kw: Any) -> Any:
        raise DbConnectionError("cannot reach the database at ws://127.0.0.1:1/rpc")


def held_view(hub: Hub) -> ViewState:
    view = hub.lifecycle.new("query:v", OLD, {"auth_id": "user:alice"}, ALICE, "c1", "10m",
                         600_000, 0, None)
    view.members = {"post:9"}
    hub.views["query:v"] = view
    return view


def register(surql: str) -> dict[str, Any]:
    return {"route": "POST /view/register", "body": {
        "id": "query:v", "surql": surql, "clientId": "c1", "ttl": "10m",
        "params": {"auth_id": "user:alice"}}}


async def test_an_unexpected_shard_error_is_400_with_its_message_and_the_shard_is_rebuilt() -> None:
    shard = FakeShard(ShardError("internal", "the engine failed on register: RecursionError: x"))
    hub = make_hub(shard)
    r = await hub.handle(register(NEW))
    assert r["status"] == 400 and r["body"]["error"] == "invalid", r
    assert "RecursionError: x" in r["body"]["message"]
    assert "query:v" not in hub.views and shard.killed == 1
    assert hub.pub_db.writes == []  # type: ignore[attr-defined]


async def test_a_held_view_survives_every_shard_failure_of_its_re_registration() -> None:
    for failure, status in ((ShardError("rejected", "SPLIT is not supported"), 400),
                            (ShardError("internal", "MemoryError: "), 400),
                            (ShardTimeout("shard 0 did not answer register within 2s"), 503)):
        shard = FakeShard(failure)
        hub = make_hub(shard)
        old = held_view(hub)
        r = await hub.handle(register(NEW))
        assert r["status"] == status, r
        assert "keeps its previous query and is still maintained" in r["body"]["message"]
        assert hub.views["query:v"] is old and old.members == {"post:9"}
        assert not hub.publisher.teardowns and not hub.publisher.initial
        # Only a shard whose state may be half changed is restarted (the rebuild registers
        # the old view again from the registry).
        assert shard.killed == (0 if isinstance(failure, ShardError)
                                and failure.code == "rejected" else 1)


async def test_unreadable_select_permissions_are_a_retryable_503_not_a_verdict() -> None:
    # The database the permissions are read from cannot be reached: no verdict on the query
    # (not a 400 `rejected`), a retryable 503. (The hub's own client, at an unreachable port,
    # gives the same answer after its connection attempts, seconds later.)
    for held in (False, True):
        shard = FakeShard()
        hub = make_hub(shard, permissions="enforce")
        hub.permissions.db = Unreachable()  # type: ignore[assignment]
        old = held_view(hub) if held else None
        r = await hub.handle(register(NEW))
        assert r["status"] == 503 and r["body"]["error"] == "SSP_NOT_READY", r
        assert "select permissions are unreadable" in r["body"]["message"]
        assert "retry" in r["body"]["message"]
        assert ("keeps its previous query" in r["body"]["message"]) == held
        assert not any(kind == "register" for kind, _ in shard.calls)
        assert hub.views.get("query:v") is old
        assert not hub.publisher.initial


async def test_a_refused_query_is_decided_in_the_hub_before_the_shard_is_asked() -> None:
    shard = FakeShard()
    hub = make_hub(shard)
    old = held_view(hub)
    deep = "SELECT * FROM post WHERE " + "(" * (MAX_DEPTH + 1) + "n = 1" + ")" * (MAX_DEPTH + 1)
    r = await hub.handle(register(deep))
    assert r["status"] == 400 and r["body"]["error"] == "rejected"
    assert "MAX_DEPTH" in r["body"]["message"] and "keeps its previous query" in r["body"][
        "message"]
    assert shard.calls == [] and hub.views["query:v"] is old


@pytest.mark.parametrize("fail", [DbTimeout("query", 0.5),
                                  DbQueryError("statement 0 failed: poisoned")])
async def test_a_failed_first_publication_leaves_nothing_of_the_view(fail: Exception) -> None:
    shard = FakeShard()
    hub = make_hub(shard, db_fail=fail)
    hub.edges.known.clear()  # the edge table definition fails first
    r = await hub.handle(register(NEW))
    assert r["status"] == (503 if isinstance(fail, DbTimeout) else 500), r
    assert "not registered" in r["body"]["message"]
    assert "query:v" not in hub.views
    assert [k for k, _ in shard.calls] == ["register", "unregister"]
    td = hub.publisher.teardowns["query:v"]
    assert td.record == view_record("query:v") and td.edge_table == "_00_list_ref_user_alice"


async def test_a_failed_row_write_of_a_re_registration_tears_the_view_down() -> None:
    shard = FakeShard()
    hub = make_hub(shard, db_fail=DbTimeout("query", 0.5))
    held_view(hub)
    r = await hub.handle(register(NEW))
    assert r["status"] == 503 and "query:v" not in hub.views
    assert "query:v" in hub.publisher.teardowns


async def test_unregister_queues_the_teardown_even_when_the_shard_fails() -> None:
    for failure in (ShardError("internal", "boom"), ShardTimeout("slow")):
        shard = FakeShard()

        async def fail(kind: str, payload: Any = None, timeout: float = 0,
                       _f: BaseException = failure) -> dict[str, Any]:
            raise _f

        hub = make_hub(shard)
        held_view(hub)
        shard.call = fail  # type: ignore[method-assign]
        await hub.unregister("query:v")
        assert "query:v" not in hub.views and "query:v" in hub.publisher.teardowns
        assert shard.killed == 1


async def test_a_held_view_never_changes_identity() -> None:
    hub = make_hub(FakeShard())
    view = held_view(hub)
    view.auth = None  # an anonymous view (edges in the shared table)
    r = await hub.handle(register(NEW))
    assert r["status"] == 409 and r["body"]["error"] == "auth_mismatch"
    assert hub.views["query:v"] is view


def test_params_nesting_is_limited_like_the_query() -> None:
    def nest(n: int) -> Any:
        v: Any = 1
        for i in range(n):
            v = [v] if i % 2 else {"k": v}
        return v

    check_params({"x": nest(MAX_DEPTH - 1)})
    check_params(None)
    with pytest.raises(ValueError, match=f"limit of {MAX_DEPTH} levels"):
        check_params({"x": nest(MAX_DEPTH)})
    with pytest.raises(ValueError, match="params nest deeper"):
        check_params({"x": nest(5000)})


def test_shard_timeout_setting() -> None:
    from ssp.config import ConfigError

    base = {"SVC_DB_URL": "ws://127.0.0.1:1"}
    assert SspConfig.from_env(base).shard_call_timeout_secs == 120
    assert SspConfig.from_env({**base, "SVC_SSP_SHARD_TIMEOUT_SECS": "2"}
                              ).shard_call_timeout_secs == 2
    with pytest.raises(ConfigError, match="SVC_SSP_SHARD_TIMEOUT_SECS"):
        SspConfig.from_env({**base, "SVC_SSP_SHARD_TIMEOUT_SECS": "0"})
