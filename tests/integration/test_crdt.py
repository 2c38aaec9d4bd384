"""`POST /crdt/apply` end to end: a real database host, `svc schema apply`, a real SSP over
HTTP. Two writers' concurrent Loro text edits converge to one value whatever order they arrive
in, a view over the field sees the merged value, and a bad update is a 400 that changes
nothing. Two `CrdtFields` on one database (two SSPs' worth) merge through `_00_crdt.rev`."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from loro import ExportMode, LoroDoc, VersionVector

from dbclient import Database
from ssp.crdt import CrdtFields
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    apply_schema,
    edges,
    module_ssp,
    root_db,
    start_ssp,
    unique_db,
    view_body,
    wait_for,
)

DOC_SCHEMA = """
DEFINE TABLE doc SCHEMAFULL PERMISSIONS FULL;
DEFINE FIELD title ON doc TYPE string;
DEFINE FIELD body ON doc TYPE option<string> COMMENT 'shared text @crdt';
DEFINE TABLE card SCHEMALESS PERMISSIONS FULL;
"""
AUTH = {"Authorization": "Bearer any"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Env:
    def __init__(self, ssp: Ssp, root: Database, http: aiohttp.ClientSession) -> None:
        self.ssp, self.root, self.http = ssp, root, http

    async def apply(self, body: dict[str, Any]) -> tuple[int, Any]:
        async with self.http.post(f"http://127.0.0.1:{self.ssp.port}/crdt/apply",
                                  data=json.dumps(body), headers={
                                      **AUTH, "Content-Type": "application/json"}) as r:
            return r.status, await r.json(content_type=None)

    async def row(self, rid: str) -> Any:
        return await self.root.query_one("SELECT * FROM ONLY type::record($r)", {"r": rid})

    async def state_rev(self, rid: str, field: str) -> Any:
        return await self.root.query_one(
            "SELECT VALUE rev FROM ONLY type::record('_00_crdt', "
            "[record::tb(type::record($r)), record::id(type::record($r)), $f])",
            {"r": rid, "f": field})


@pytest.fixture(scope="module")
def shared(host: DbHost, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, str, Ssp]]:
    """One database and SSP for the module's tests on it: starting them was most of each
    test's time. The tests write records of their own ids, so none sees another's."""
    # A cache of one document: every test also reads documents back from `_00_crdt`.
    with module_ssp(host, tmp_path_factory.mktemp("crdt"), APP_SCHEMA + DOC_SCHEMA,
                    SVC_CRDT_CACHE_SIZE="1",
                    SVC_CRDT_FIELDS=json.dumps({"card": ["notes"]})) as shared:
        yield shared


@pytest.fixture
async def env(host: DbHost, shared: tuple[str, str, Ssp]) -> AsyncIterator[Env]:
    ns, db, ssp = shared
    root = await root_db(host, ns, db)
    http = aiohttp.ClientSession()
    try:
        yield Env(ssp, root, http)
    finally:
        ssp.close_client()
        await http.close()
        await root.close()


def writer(base: bytes | None) -> LoroDoc:
    doc = LoroDoc()
    if base is not None:
        doc.import_(base)
    return doc


def edit(doc: LoroDoc, fn: Any) -> bytes:
    """Apply `fn(text)` to the doc's `body` and return the update it made."""
    before = doc.oplog_vv
    fn(doc.get_text("body"))
    doc.commit()
    return doc.export(ExportMode.Updates(before))


async def test_concurrent_text_edits_converge_in_any_order(env: Env) -> None:
    results = []
    for rid, order in (("doc:1", "ab"), ("doc:2", "ba"), ("doc:3", "together")):
        await env.root.query("CREATE type::record($r) SET title = 't'", {"r": rid})
        seed = writer(None)
        first = edit(seed, lambda t: t.insert(0, "Hello world"))
        status, reply = await env.apply({"id": rid, "field": "body", "update": b64(first)})
        assert status == 200 and reply["value"] == "Hello world", reply
        base = seed.export(ExportMode.Snapshot())
        a, b = writer(base), writer(base)
        vv = b64(a.oplog_vv.encode())
        ua = edit(a, lambda t: t.insert(0, "Dear "))
        ub = edit(b, lambda t: t.insert(len("Hello world"), "!"))
        body_a = {"id": rid, "field": "body", "update": b64(ua), "version": vv}
        body_b = {"id": rid, "field": "body", "update": b64(ub), "version": vv}
        if order == "together":
            (sa, ra), (sb, rb) = await asyncio.gather(env.apply(body_a), env.apply(body_b))
        else:
            first_body, second_body = (body_a, body_b) if order == "ab" else (body_b, body_a)
            sa, ra = await env.apply(first_body)
            sb, rb = await env.apply(second_body)
            if order == "ba":
                ra, rb = rb, ra
        assert sa == sb == 200, (ra, rb)
        row = await env.row(rid)
        results.append(row["body"])
        # A writer that sends its version gets back what it lacks: the one applied second
        # then holds the merged text.
        a.import_(base64.b64decode(ra["update"]))
        b.import_(base64.b64decode(rb["update"]))
        texts = {a.get_text("body").to_string(), b.get_text("body").to_string()}
        assert row["body"] in texts
        assert ra["value"] == row["body"] or rb["value"] == row["body"]
        assert await env.state_rev(rid, "body") == 3
    assert results == ["Dear Hello world!"] * 3


async def test_a_view_over_the_field_sees_the_merged_value(env: Env) -> None:
    await env.root.query("CREATE doc:v SET title = 'v'")
    r = await env.ssp.call("POST /view/register", view_body(
        "merged", "SELECT * FROM doc WHERE body = 'ab'"))
    assert r["status"] == 200 and r["body"]["rowCount"] == 0, r
    a, b = writer(None), writer(None)
    ua = edit(a, lambda t: t.insert(0, "a"))
    status, reply = await env.apply({"id": "doc:v", "field": "body", "update": b64(ua)})
    assert status == 200 and reply["value"] == "a"
    b.import_(a.export(ExportMode.Snapshot()))
    ub = edit(b, lambda t: t.insert(1, "b"))
    status, reply = await env.apply({"id": "doc:v", "field": "body", "update": b64(ub)})
    assert status == 200 and reply["value"] == "ab"

    async def edge() -> set[str]:
        return await edges(env.root, "_00_list_ref_user_alice", "merged")

    assert await wait_for(edge, what="the view's edge to doc:v") == {"doc:v"}


async def test_bad_updates_get_400_and_change_nothing(env: Env) -> None:
    await env.root.query("CREATE doc:bad SET title = 'bad'")
    w = writer(None)
    good = edit(w, lambda t: t.insert(0, "kept"))
    status, _ = await env.apply({"id": "doc:bad", "field": "body", "update": b64(good)})
    assert status == 200

    later = writer(w.export(ExportMode.Snapshot()))
    edit(later, lambda t: t.insert(4, " one"))
    orphan = edit(later, lambda t: t.insert(8, " two"))  # needs " one", never sent
    wrong_type = LoroDoc()
    wrong_type.get_map("body").insert("x", 1)
    wrong_type.commit()
    snapshot = w.export(ExportMode.Snapshot())
    bad_bodies = [
        {"id": "doc:bad", "field": "body", "update": b64(b"not a loro update")},
        {"id": "doc:bad", "field": "body", "update": "%%% not base64"},
        {"id": "doc:bad", "field": "body", "update": b64(snapshot[:-3])},
        {"id": "doc:bad", "field": "body", "update": b64(orphan)},
        {"id": "doc:bad", "field": "body",
         "update": b64(wrong_type.export(ExportMode.Snapshot()))},
        {"id": "doc:bad", "field": "title", "update": b64(good)},
        {"id": "doc:bad", "field": "body.x", "update": b64(good)},
        {"id": "doc:bad", "field": "body", "update": b64(good), "table": "card"},
        {"id": "nosuch:1", "field": "body", "update": b64(good)},
        {"id": "doc:bad", "field": "body", "update": b64(good), "version": b64(b"junk")},
        {"id": "doc:bad", "field": "body"},
    ]
    for body in bad_bodies:
        status, reply = await env.apply(body)
        assert status == 400 and reply["error"] == "invalid", (body, reply)
        row = await env.row("doc:bad")
        assert row["body"] == "kept" and await env.state_rev("doc:bad", "body") == 1, body
    # (an id no test creates: the module's tests share one database)
    status, reply = await env.apply({"id": "doc:absent", "field": "body", "update": b64(good)})
    assert status == 404, reply
    # The document the refused updates never reached still takes a good one.
    more = edit(w, lambda t: t.insert(4, "!"))
    status, reply = await env.apply({"id": "doc:bad", "field": "body", "update": b64(more)})
    assert status == 200 and reply["value"] == "kept!", reply
    assert (await env.row("doc:bad"))["body"] == "kept!"


async def test_svc_crdt_fields_names_fields_of_a_schemaless_table(env: Env) -> None:
    await env.root.query("CREATE card:1 SET notes = NONE")
    w = writer(None)
    lst = w.get_list("notes")
    lst.push("x")
    lst.push("y")
    w.commit()
    status, reply = await env.apply({"id": "card:1", "field": "notes",
                                     "update": b64(w.export(ExportMode.Snapshot()))})
    assert status == 200 and reply["value"] == ["x", "y"], reply
    assert (await env.row("card:1"))["notes"] == ["x", "y"]
    status, reply = await env.apply({"id": "card:1", "field": "other",
                                     "update": b64(w.export(ExportMode.Snapshot()))})
    assert status == 400, reply


async def test_two_processes_merge_through_the_stored_revision(env: Env) -> None:
    """Two `CrdtFields` with their own caches (two SSPs) writing one document."""
    await env.root.query("CREATE doc:two SET title = 'two'")
    other = CrdtFields(env.root, {}, 100)
    seed = writer(None)
    first = edit(seed, lambda t: t.insert(0, "base"))
    # Both "SSPs" cache the document at revision 1.
    status, _ = await env.apply({"id": "doc:two", "field": "body", "update": b64(first)})
    assert status == 200
    out = await other.apply({"id": "doc:two", "field": "body", "update": b64(first)})
    assert out["value"] == "base" and await env.state_rev("doc:two", "body") == 2
    base = seed.export(ExportMode.Snapshot())
    a, b = writer(base), writer(base)
    ua = edit(a, lambda t: t.insert(0, ">"))
    ub = edit(b, lambda t: t.insert(4, "<"))
    status, reply = await env.apply({"id": "doc:two", "field": "body", "update": b64(ua)})
    assert status == 200 and reply["value"] == ">base", reply
    # `other` still holds revision 2: its write conflicts, it merges the stored state.
    out = await other.apply({"id": "doc:two", "field": "body", "update": b64(ub)})
    assert out["value"] == ">base<"
    assert (await env.row("doc:two"))["body"] == ">base<"
    assert await env.state_rev("doc:two", "body") == 4
    # The SSP's cached copy is behind now; its next apply merges the stored state too.
    more = edit(a, lambda t: t.insert(0, "["))
    status, reply = await env.apply({"id": "doc:two", "field": "body", "update": b64(more)})
    assert status == 200 and reply["value"] == "[>base<", reply
    vv = VersionVector.decode(base64.b64decode(reply["version"]))
    assert isinstance(vv, VersionVector)


async def test_a_deleted_records_documents_are_swept_and_a_new_record_starts_empty(
        env: Env) -> None:
    """`sweep_orphans` removes the state of records that no longer exist (and only those),
    and a process whose cached document was swept elsewhere starts over instead of writing
    the old document back under the new record."""
    await env.root.query("CREATE doc:gone SET title = 'g'; CREATE doc:kept SET title = 'k'")
    mine = CrdtFields(env.root, {}, 100)  # this process caches both documents
    sweeper = CrdtFields(env.root, {}, 100)  # another SSP, which sweeps
    old = edit(writer(None), lambda t: t.insert(0, "old text"))
    for rid in ("doc:gone", "doc:kept"):
        assert (await mine.apply({"id": rid, "field": "body", "update": b64(old)}))[
            "value"] == "old text"
    assert await sweeper.sweep_orphans() == 0  # both records exist
    await env.root.query("DELETE doc:gone")
    assert await sweeper.sweep_orphans() == 1
    assert await env.state_rev("doc:gone", "body") is None
    assert await env.state_rev("doc:kept", "body") == 1
    # the record comes back under the same id; a new client edits an empty document
    await env.root.query("CREATE doc:gone SET title = 'again'")
    fresh = edit(writer(None), lambda t: t.insert(0, "new"))
    out = await mine.apply({"id": "doc:gone", "field": "body", "update": b64(fresh)})
    assert out["value"] == "new"
    assert (await env.row("doc:gone"))["body"] == "new"
    assert await env.state_rev("doc:gone", "body") == 1
    # the sweeping process drops its own cached copy of a swept document too
    await sweeper.apply({"id": "doc:kept", "field": "body", "update": b64(old)})
    assert ("doc:kept", "body") in sweeper.cache
    await env.root.query("DELETE doc:kept")
    assert await sweeper.sweep_orphans() == 1
    assert ("doc:kept", "body") not in sweeper.cache


async def test_the_ssp_sweeps_the_documents_of_deleted_records(host: DbHost,
                                                               tmp_path: Path) -> None:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA + DOC_SCHEMA + "CREATE doc:1 SET title = 'one';")
    apply_schema(host, ns, db)
    ssp = start_ssp(tmp_path, host, ns, db, TTL_CLEANUP_INTERVAL_SECS="1")
    http = aiohttp.ClientSession()
    try:
        await ssp.wait_ready()
        env = Env(ssp, root, http)
        update = edit(writer(None), lambda t: t.insert(0, "text"))
        status, _ = await env.apply({"id": "doc:1", "field": "body", "update": b64(update)})
        assert status == 200 and await env.state_rev("doc:1", "body") == 1
        await root.query("DELETE doc:1")

        async def swept() -> bool:
            return await env.state_rev("doc:1", "body") is None
        await wait_for(swept, timeout=30, what="the deleted record's state swept")
    finally:
        await http.close()
        code = ssp.stop()
        await root.close()
        assert code == 0, ssp.process.log_text()[-3000:]
