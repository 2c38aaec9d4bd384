"""The Python app client (`viewclient`) through real processes: a database host on disk, a
standalone SSP (changefeed transport, edge mode dedicated) shared by the module, record users
signed in through the SDK. What the issue asks of a client: rows equal SurrealDB's own answer
(ordered, with links), one view per session, the ttl refresh, gap and recovery after kill -9
of the SSP and of the database host, optimistic writes rolled back on a permission error, no
user seeing another's rows, and an outbox call awaited."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from surrealdb import AsyncSurreal, RecordID

from tests.integration.test_scheduler_process import launch, write_config
from tests.support.job_stack import SECRET, Backend, job_config, job_stack
from tests.support.procs import DbHost, ManagedProcess, free_port, start_db_host
from tests.support.ssp_stack import apply_schema, root_db, start_ssp, unique_db, wait_for
from viewclient import GAP, READY, Client, Step, View, ViewError, connect

SCHEMA = """
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD pass ON user TYPE string;
DEFINE INDEX user_name ON user FIELDS name UNIQUE;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = crypto::argon2::generate($pass))
    SIGNIN (SELECT * FROM user WHERE name = $name AND crypto::argon2::compare(pass, $pass))
    DURATION FOR SESSION 1h;
DEFINE TABLE tag SCHEMAFULL PERMISSIONS FULL;
DEFINE FIELD label ON tag TYPE string;
DEFINE TABLE post SCHEMAFULL PERMISSIONS
    FOR select WHERE owner = $auth.id
    FOR create WHERE owner = $auth.id
    FOR update, delete WHERE owner = $auth.id AND locked != true;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD title ON post TYPE string;
DEFINE FIELD n ON post TYPE int DEFAULT 0;
DEFINE FIELD locked ON post TYPE option<bool>;
DEFINE FIELD tag ON post TYPE option<record<tag>>;
DEFINE TABLE thread SCHEMALESS PERMISSIONS FOR select FULL;
"""

SERVICE_SECRET = "viewclient-service-secret-5e6f"
ROW_VIEWS = 4  # SVC_ROW_VIEWS_PER_USER of the module's SSP

TOP = ("SELECT id, title, n, tag.label AS label FROM post WHERE owner = $auth.id AND n >= $min "
       "ORDER BY n DESC, title LIMIT 5 START 1")


@dataclass
class Stack:
    host: DbHost
    ns: str
    db: str
    ssp: ManagedProcess
    port: int
    tmp: Path

    @property
    def service_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restart_ssp(self) -> None:
        self.ssp = ManagedProcess(self.ssp.name, self.ssp.argv, self.ssp.env,
                                  self.ssp.log_path).start()
        self.ssp.wait_http(self.service_url + "/health", timeout=60)

    def restart_host(self) -> None:
        self.host = start_db_host(self.tmp, memory=False, path=self.host.path,
                                  port=self.host.port)


async def _prepare(host: DbHost, ns: str, db: str) -> None:
    root = await root_db(host, ns, db)
    try:
        await root.query(SCHEMA)
        await root.query("CREATE tag:a SET label = 'alpha'; CREATE tag:b SET label = 'beta'")
    finally:
        await root.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("viewclient")
    host = start_db_host(tmp, memory=False)
    ns, db = unique_db()
    asyncio.run(_prepare(host, ns, db))
    apply_schema(host, ns, db)
    # The service has a secret the clients never hold: they register by their rows.
    # Views honour their owner's select permission, as in production.
    ssp = start_ssp(tmp, host, ns, db, TTL_CLEANUP_INTERVAL_SECS="1",
                    SVC_AUTH_SECRET=SERVICE_SECRET, SVC_SSP_VIEW_PERMISSIONS="enforce",
                    SVC_ROW_VIEWS_PER_USER=str(ROW_VIEWS))
    s = Stack(host, ns, db, ssp.process, ssp.port, tmp)
    try:
        s.ssp.wait_http(s.service_url + "/health", timeout=60)
        yield s
    finally:
        s.ssp.stop(timeout=40)
        s.host.process.stop()


async def user(stack: Stack, name: str, **options: Any) -> Client:
    """A Client signed in as record user `name` (signed up on first use); it registers its
    views by their rows unless `options` say otherwise."""
    creds = {"access": "account", "variables": {"name": name, "pass": f"{name}-pw"}}
    probe = AsyncSurreal(stack.host.ws_url)
    try:
        await probe.signup({"namespace": stack.ns, "database": stack.db, **creds})
    except Exception:  # noqa: BLE001 - already signed up by an earlier test
        pass
    finally:
        await probe.close()
    return await connect(stack.host.ws_url, stack.ns, stack.db, creds,
                         service_url=stack.service_url, health_interval=0.3, **options)


async def as_root(stack: Stack, sql: str, vars: dict[str, Any] | None = None) -> Any:
    root = await root_db(stack.host, stack.ns, stack.db)
    try:
        for attempt in range(8):
            try:
                return (await root.query(sql, vars))[-1]  # the last statement's result
            except Exception as e:
                if "can be retried" not in str(e) or attempt == 7:
                    raise
                await asyncio.sleep(0.02)
    finally:
        await root.close()


async def settles(view: View, client: Client, surql: str, params: dict[str, Any],
                  timeout: float = 30.0) -> list[Any]:
    """Wait until the view shows SurrealDB's own answer to its query (as its user) and is
    ready; returns that answer."""
    async def same() -> tuple[list[Any]] | None:
        try:
            want = await client.db.query(surql, params)
        except Exception:  # noqa: BLE001 - the client's connection is being replaced
            return None
        return (want,) if view.status == READY and view.rows == want else None
    try:
        got = await wait_for(same, timeout, "view rows == SurrealDB's answer")
        return got[0]  # type: ignore[no-any-return]
    except AssertionError:
        want = await client.db.query(surql, params)
        raise AssertionError(f"view {view.status} {view.rows}\n!= SurrealDB {want}") from None


async def test_rows_equal_surrealdb_after_random_writes_and_users_see_only_their_own(
        stack: Stack) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    print("seed", seed, file=sys.stderr)
    alice, bob = await user(stack, "alice"), await user(stack, "bob")
    try:
        params = {"min": 2}
        va = await alice.view(TOP, params)
        vb = await bob.view(TOP, params)
        steps: list[Step] = []
        va.subscribe(steps.append)
        owners = [alice.auth_id, bob.auth_id]
        for _burst in range(4):
            stmts = []
            for i in range(8):
                key = f"p{rng.randrange(14)}"
                op = rng.random()
                if op < 0.2:
                    stmts.append(f"DELETE post:{key}")
                else:
                    tag = rng.choice(["tag:a", "tag:b", "NONE"])
                    stmts.append(
                        f"UPSERT post:{key} SET owner = $o{i}, title = 't{rng.randrange(5)}', "
                        f"n = {rng.randrange(6)}, tag = {tag}")
            vars = {f"o{i}": rng.choice(owners) for i in range(8)}
            await as_root(stack, "; ".join(stmts), vars)
            got_a = await settles(va, alice, TOP, params)
            got_b = await settles(vb, bob, TOP, params)
            # Every row of alice's view is hers (the query names owner, the rows do not).
            mine = {str(r["id"]) for r in await alice.db.query(
                "SELECT id FROM post WHERE owner = $auth.id")}
            assert {str(r["id"]) for r in got_a} <= mine
            assert not {str(r["id"]) for r in got_b} & mine
        # Some seeds leave alice's window (START 1) empty throughout: two posts of hers at the
        # top make sure the steps have something to show.
        await as_root(stack, "UPSERT post:top1 SET owner = $o, title = 'x', n = 9; "
                      "UPSERT post:top2 SET owner = $o, title = 'y', n = 9", {"o": alice.auth_id})
        await settles(va, alice, TOP, params)
        assert any(s.added or s.removed or s.changed for s in steps)
        assert all(s.status in ("materializing", READY) for s in steps)
    finally:
        await alice.close()
        await bob.close()


async def test_two_sessions_of_one_user_are_two_views_and_close_deletes_only_its_row(
        stack: Stack) -> None:
    one, two = await user(stack, "carol"), await user(stack, "carol")
    try:
        v1 = await one.view(TOP, {"min": 0})
        v2 = await two.view(TOP, {"min": 0})
        assert v1.id != v2.id
        async def both() -> bool:
            rows = await as_root(stack, "SELECT VALUE id FROM _00_query WHERE auth_id = $u",
                                 {"u": one.auth_id})
            return {str(v1.record), str(v2.record)} <= {str(r) for r in rows}
        try:
            await wait_for(both, 30, "a _00_query row for each session's view")
        except AssertionError:
            rows = await as_root(stack, "SELECT id, auth_id, state FROM _00_query")
            raise AssertionError(f"{v1.record} {v2.record} {rows}\n"
                                 + stack.ssp.log_text()[-3000:]) from None
        await v1.close()
        async def gone() -> bool:
            left = await as_root(stack, "SELECT VALUE id FROM _00_query WHERE auth_id = $u",
                                 {"u": one.auth_id})
            ids = {str(r) for r in left}
            return str(v1.record) not in ids and str(v2.record) in ids
        await wait_for(gone, 30, "only the closed view's row deleted")
    finally:
        await one.close()
        await two.close()


async def test_the_bearer_path_still_registers_for_server_side_apps(stack: Stack) -> None:
    client = await user(stack, "kate", registration="bearer", service_token=SERVICE_SECRET)
    try:
        await as_root(stack, "UPSERT post:k1 SET owner = $o, title = 'k', n = 3",
                      {"o": client.auth_id})
        view = await client.view(TOP.replace(" START 1", ""), {"min": 0})
        await settles(view, client, TOP.replace(" START 1", ""), {"min": 0})
        assert [r["id"] for r in view.rows] == [RecordID("post", "k1")]
    finally:
        await client.close()
    wrong = await user(stack, "kate", registration="bearer", service_token="not-the-secret")
    try:
        with pytest.raises(ViewError) as e:
            await wrong.view(TOP, {"min": 0})
        assert e.value.status == 401
    finally:
        await wrong.close()


async def test_a_row_naming_another_user_registers_a_view_of_its_own_writer(
        stack: Stack) -> None:
    """The schema pins `auth_id` to the writer: a row claiming alice's identity (in the row
    and in its params) is bob's view, maintained in bob's edge table with bob's rows."""
    alice, bob = await user(stack, "lena"), await user(stack, "mike")
    try:
        await as_root(stack, "UPSERT post:l1 SET owner = $a, title = 'hers', n = 4; "
                      "UPSERT post:m1 SET owner = $b, title = 'his', n = 4",
                      {"a": alice.auth_id, "b": bob.auth_id})
        q = RecordID("_00_query", "forged" + os.urandom(4).hex())
        await bob.db.query(
            "CREATE $q SET surql = 'SELECT id FROM post WHERE n >= 0', params = $p, "
            "clientId = 'x', ttl = '1m', lastActiveAt = time::now(), auth_id = $a, "
            "state = 'ready', rowCount = 7",
            {"q": q, "a": alice.auth_id, "p": {"auth_id": alice.auth_text}})
        async def registered() -> dict[str, Any] | None:
            got = await as_root(stack, "SELECT * FROM $q", {"q": q})
            row = got[0] if got else None
            return row if row and row.get("state") == READY else None
        row = await wait_for(registered, 30, "the forged row registered")
        assert row["auth_id"] == bob.auth_id
        assert row["params"]["auth_id"] == bob.auth_text
        edges = await as_root(stack, f"SELECT VALUE out FROM {_edge_table(bob)} "
                              "WHERE in = $q", {"q": q})
        assert edges == [RecordID("post", "m1")]  # bob's select permission applied
        # alice's row cannot be changed or deleted by bob either.
        va = await alice.view(TOP, {"min": 0})
        assert not await as_root(stack, f"SELECT VALUE out FROM {_edge_table(alice)} "
                                 "WHERE in = $q", {"q": q})
        await bob.db.query("UPDATE $q SET surql = 'SELECT * FROM post', lastActiveAt = "
                           "time::now(); DELETE $q", {"q": va.record})
        got = await as_root(stack, "SELECT surql FROM $q", {"q": va.record})
        assert got == [{"surql": TOP}]
        await as_root(stack, "DELETE $q", {"q": q})
    finally:
        await alice.close()
        await bob.close()


def _edge_table(client: Client) -> str:
    from viewclient import edge_table
    return edge_table(client.auth_text, client.ref_mode)


async def test_a_refused_query_is_an_error_on_the_client_and_its_row_goes(
        stack: Stack) -> None:
    client = await user(stack, "nina")
    try:
        with pytest.raises(ViewError) as e:
            await client.view("SELECT * FROM post GROUP BY n")
        assert e.value.status == 400 and "rejected" in str(e.value) and "grouped" in str(e.value)
        assert not client.views
        rows = await as_root(stack, "SELECT VALUE id FROM _00_query WHERE auth_id = $u",
                             {"u": client.auth_id})
        assert rows == []
    finally:
        await client.close()


async def test_a_user_holds_at_most_the_limit_of_views_by_rows(stack: Stack) -> None:
    client = await user(stack, "quinn")
    try:
        for n in range(ROW_VIEWS):
            await client.view(TOP, {"min": n})
        with pytest.raises(ViewError) as e:
            await client.view(TOP, {"min": 99})
        assert e.value.status == 429 and "too_many_views" in str(e.value)
        assert len(client.views) == ROW_VIEWS
    finally:
        await client.close()


async def test_a_deleted_row_unregisters_its_view(stack: Stack) -> None:
    client = await user(stack, "olga")
    try:
        q = TOP.replace(" START 1", "")
        gone = await client.view(q, {"min": 0})
        kept = await client.view(q, {"min": 1})
        await as_root(stack, "UPSERT post:o1 SET owner = $o, title = 'o', n = 3",
                      {"o": client.auth_id})
        await settles(gone, client, q, {"min": 0})
        table = _edge_table(client)
        # The app stops following the view, then deletes its row as the user (what close()
        # does): the view's edge deletions must not make it register the view again.
        gone._closed = True
        for t in gone._tasks:
            t.cancel()
        await client.unfollow(gone.edge_table, gone.record)
        client.views.pop(gone.id, None)
        await client.db.query("DELETE $q", {"q": gone.record})
        async def no_edges() -> bool:
            return not await as_root(stack, f"SELECT VALUE out FROM {table} WHERE in = $q",
                                     {"q": gone.record})
        await wait_for(no_edges, 30, "the deleted view's edges torn down")
        await as_root(stack, "UPSERT post:o2 SET owner = $o, title = 'p', n = 5",
                      {"o": client.auth_id})
        await settles(kept, client, q, {"min": 1})
        assert await no_edges(), "a write reached the unregistered view"
        assert not await as_root(stack, "SELECT VALUE id FROM $q", {"q": gone.record})
    finally:
        await client.close()


async def refresh_and_expiry(stack: Stack, name: str) -> None:
    """A refreshed view outlives its ttl while an unrefreshed one of the same ttl expires,
    then the kept one still follows writes. Needs an SSP sweeping every second
    (`TTL_CLEANUP_INTERVAL_SECS=1`); test_http_transport runs it over transport http."""
    client = await user(stack, name)
    try:
        kept = await client.view(TOP, {"min": 1}, ttl="5s")
        # the same ttl, registered after `kept`: once the sweep has removed it, `kept`'s ttl
        # has run out too (refreshed at 4.5 s, it must still be there)
        dropped = await client.view(TOP, {"min": 2}, ttl="5s")
        for t in dropped._tasks:  # this view's user went away: nothing refreshes it
            t.cancel()
        async def expired() -> bool:
            got = await as_root(stack, "SELECT VALUE id FROM _00_query WHERE id = $q",
                                {"q": dropped.record})
            return not got
        await wait_for(expired, 30, "the unrefreshed view expired")
        got = await as_root(stack, "SELECT VALUE id FROM _00_query WHERE id = $q",
                            {"q": kept.record})
        assert got == [kept.record]
        await as_root(stack, f"CREATE post:{name}1 SET owner = $o, title = 'd', n = 3",
                      {"o": client.auth_id})
        await settles(kept, client, TOP, {"min": 1})
    finally:
        await client.close()


async def test_refresh_keeps_a_view_alive_past_its_ttl_and_its_absence_lets_it_expire(
        stack: Stack) -> None:
    await refresh_and_expiry(stack, "dave")


async def _gap_then_right_rows(stack: Stack, kill: str) -> None:
    client = await user(stack, f"erin{kill}")
    try:
        params = {"min": 0}
        view = await client.view(TOP, params)
        steps: asyncio.Queue[Step] = asyncio.Queue()
        view.subscribe(steps.put_nowait)
        for i in range(3):
            await as_root(stack, f"UPSERT post:{kill}{i} SET owner = $o, title = 'e', n = {i}",
                          {"o": client.auth_id})
        await settles(view, client, TOP, params)
        if kill == "ssp":
            stack.ssp.kill9()
        else:
            stack.host.process.kill9()
        while (await asyncio.wait_for(steps.get(), 30)).status != GAP:
            pass
        pending = RecordID("_00_query", "whiledown" + os.urandom(4).hex())
        if kill == "ssp":
            await as_root(stack, f"UPSERT post:{kill}9 SET owner = $o, title = 'late', n = 9",
                          {"o": client.auth_id})
            # A view asked for while no SSP runs: registered when it starts, not restored
            # past the allowlist and the engine's verdict.
            await client.db.query("CREATE $q SET surql = $s, params = {min: 0}, clientId = "
                                  "'c', ttl = '1m', lastActiveAt = time::now()",
                                  {"q": pending, "s": TOP})
            stack.restart_ssp()
        else:
            stack.restart_host()
            await as_root(stack, f"UPSERT post:{kill}9 SET owner = $o, title = 'late', n = 9",
                          {"o": client.auth_id})
            if not stack.ssp.alive():
                stack.restart_ssp()
        got = await settles(view, client, TOP, params, timeout=60)
        # n 9, 2, 1, 0 with START 1: the late write moved post 2 into the window.
        assert [r["id"] for r in got] == [RecordID("post", f"{kill}{i}") for i in (2, 1, 0)]
        if kill == "ssp":
            async def registered() -> bool:
                got = await as_root(stack, "SELECT VALUE state FROM $q", {"q": pending})
                return got == [READY]
            await wait_for(registered, 30, "the row written while the SSP was down registered")
            await client.db.query("DELETE $q", {"q": pending})
    finally:
        await client.close()


async def test_kill9_of_the_ssp_ends_in_gap_then_the_right_rows(stack: Stack) -> None:
    await _gap_then_right_rows(stack, "ssp")


async def test_kill9_of_the_database_host_ends_in_gap_then_the_right_rows(stack: Stack) -> None:
    await _gap_then_right_rows(stack, "db")


async def refused_write_rolls_back(stack: Stack, client: Client,
                                   key: str) -> tuple[View, list[Step]]:
    """An optimistic delete refused by a permission (the row is `locked`) shows at once, rolls
    back and is listed in `failed_writes`; an allowed update then shows. Returns the view
    (`TOP` without START, `min` 0) and its steps, still subscribed. test_http_transport runs
    it over transport http."""
    params = {"min": 0}
    query = TOP.replace(" START 1", "")
    await as_root(stack, f"UPSERT post:{key}1 SET owner = $o, title = 'locked', n = 5, "
                  f"locked = true; UPSERT post:{key}2 SET owner = $o, title = 'open', n = 4",
                  {"o": client.auth_id})
    view = await client.view(query, params)
    await settles(view, client, query, params)
    steps: list[Step] = []
    view.subscribe(steps.append)
    with pytest.raises(PermissionError):
        await client.delete(f"post:{key}1")
    # Shown removed at once, then back when the database refused.
    assert any(RecordID("post", f"{key}1") in [r["id"] for r in s.removed] for s in steps)
    assert RecordID("post", f"{key}1") in [r["id"] for r in view.rows]
    assert [w.target for w in client.failed_writes] == [f"post:{key}1"]
    await client.update(f"post:{key}2", {"title": "edited"})
    await settles(view, client, query, params)
    assert any(r["title"] == "edited" for r in view.rows)
    assert len(client.failed_writes) == 1
    return view, steps


async def test_optimistic_writes_show_at_once_and_roll_back_on_a_permission_error(
        stack: Stack) -> None:
    # A key starting with a digit, as a third of signed-up users get: SurrealDB prints it
    # plainly (`user:5frank`) where the SDK's text escapes it, and the client once compared
    # the two and judged the user's own creates outside `owner = $auth.id`.
    await as_root(stack, "CREATE user:⟨5frank⟩ SET name = 'frank', "
                  "pass = crypto::argon2::generate('frank-pw')")
    client = await connect(stack.host.ws_url, stack.ns, stack.db,  # signed in, no sign-up
                           {"access": "account", "variables": {"name": "frank",
                                                               "pass": "frank-pw"}},
                           service_url=stack.service_url, health_interval=0.3)
    try:
        assert client.auth_id == RecordID("user", "5frank")
        params = {"min": 0}
        view, steps = await refused_write_rolls_back(stack, client, "f")
        # Optimistic creates honour the view's WHERE (`n >= $min`): one outside it is never
        # shown, not even for the moment the database takes to answer; one inside is.
        steps.clear()
        await client.create("post:f3", {"owner": client.auth_id, "title": "out", "n": -1})
        await client.create("post:f4", {"owner": client.auth_id, "title": "in", "n": 7})
        shown = {str(r["id"]) for s in steps for r in s.added}
        assert "post:f3" not in shown and "post:f4" in shown, shown
        await settles(view, client, TOP.replace(" START 1", ""), params)
        # Placed by the view's ORDER BY (n DESC) and cut by its LIMIT at once: the first step
        # of a create is the optimistic one, before the database has answered.
        for i in range(3):
            await as_root(stack, f"UPSERT post:g{i} SET owner = $o, title = 'g', n = {i + 1}",
                          {"o": client.auth_id})
        await settles(view, client, TOP.replace(" START 1", ""), params)
        before = [str(r["id"]) for r in view.rows]
        assert len(before) == 5, before  # a full window: LIMIT 5
        steps.clear()
        await client.create("post:f5", {"owner": client.auth_id, "title": "top", "n": 100})
        assert [str(r["id"]) for r in steps[0].rows] == ["post:f5", *before[:4]], steps[0]
        steps.clear()
        await client.create("post:f6", {"owner": client.auth_id, "title": "low", "n": 0})
        assert all("post:f6" not in {str(r["id"]) for r in s.rows} for s in steps)
        await settles(view, client, TOP.replace(" START 1", ""), params)
        # An update that takes a row out of the WHERE (n >= $min) leaves the view at once.
        steps.clear()
        await client.update("post:f5", {"n": -5})
        assert "post:f5" in {str(r["id"]) for r in steps[0].removed}, steps[0]
        await settles(view, client, TOP.replace(" START 1", ""), params)
    finally:
        await client.close()


async def test_run_writes_an_outbox_job_and_returns_its_result(
        shared_db_host: DbHost, tmp_path: Path) -> None:
    async def open_jobs(root: Any) -> None:
        # An app lets its users write jobs; the SSP alone moves them on.
        await root.query("ALTER TABLE job PERMISSIONS FULL")

    async with job_stack(shared_db_host, tmp_path, before_start=open_jobs) as js:
        creds = {"access": "account", "variables": {"name": "gina", "pass": "pw"}}
        probe = AsyncSurreal(shared_db_host.ws_url)
        await probe.signup({"namespace": js.ns, "database": js.dbname, **creds})
        await probe.close()
        client = await connect(shared_db_host.ws_url, js.ns, js.dbname, creds,
                               service_url=js.base, service_token=SECRET)
        try:
            result = await client.run("job", "/ok", {"x": 1})
            assert result["ok"] is True
        finally:
            await client.close()


async def test_scheduler_mode_and_edge_mode_single_rows_equal_surrealdb(
        shared_db_host: DbHost, tmp_path: Path) -> None:
    """The client registers through the scheduler (which places the view on its SSP) and
    follows the shared `_00_list_ref` (mode `single`, rows filtered by `auth_id`); its outbox
    call is run by the scheduler's SSP, the job row reaching it through the scheduler."""
    host = shared_db_host
    name = "vc" + os.urandom(5).hex()
    await _prepare(host, name, name)
    root = await root_db(host, name, name)
    try:  # outbox tables the app's users may write (job_config names all three)
        await root.query("DEFINE TABLE job SCHEMALESS PERMISSIONS FULL; "
                         "DEFINE TABLE job_one SCHEMALESS; DEFINE TABLE job_c3 SCHEMALESS;")
    finally:
        await root.close()
    apply_schema(host, name, name)
    backend = Backend()
    await backend.start()
    port = free_port()
    sched = launch(tmp_path, write_config(tmp_path, host, name, port), port, name,
                   ready_timeout=120, SVC_INGEST_TRANSPORT="changefeed",
                   SVC_ROW_VIEWS_PER_USER="2",
                   # no recovery sweep in the test's time: the job must come by its event
                   SVC_JOB_SWEEP_SECS="3600")
    ssp = start_ssp(tmp_path, host, name, name, SVC_SSP_REF_MODE="single",
                    SVC_SCHEDULER_URL=sched.url, SVC_SSP_ID="ssp-vc",
                    HEARTBEAT_INTERVAL_MS="200", SVC_JOB_CONFIG=job_config(backend.url))
    s = Stack(host, name, name, ssp.process, ssp.port, tmp_path)
    clients: list[Client] = []
    try:
        ssp.process.wait_http(f"http://127.0.0.1:{ssp.port}/health", timeout=120)
        for who in ("hana", "ivan"):
            creds = {"access": "account", "variables": {"name": who, "pass": f"{who}-pw"}}
            probe = AsyncSurreal(host.ws_url)
            await probe.signup({"namespace": name, "database": name, **creds})
            await probe.close()
            clients.append(await connect(host.ws_url, name, name, creds,
                                         service_url=sched.url, ref_mode="single",
                                         health_interval=0.3))
        params = {"min": 1}
        views = [await c.view(TOP, params) for c in clients]
        rng = random.Random()
        for _ in range(3):
            stmts = [f"UPSERT post:s{rng.randrange(10)} SET owner = $o{i}, title = "
                     f"'t{rng.randrange(4)}', n = {rng.randrange(5)}, tag = tag:a"
                     for i in range(6)]
            await as_root(s, "; ".join(stmts),
                          {f"o{i}": rng.choice(clients).auth_id for i in range(6)})
            for v, c in zip(views, clients):
                await settles(v, c, TOP, params)
        # The scheduler's limit of views by rows per user (2 here).
        await clients[0].view(TOP, {"min": 3})
        with pytest.raises(ViewError) as e:
            await clients[0].view(TOP, {"min": 4})
        assert e.value.status == 429 and "too_many_views" in str(e.value)
        # The outbox call: the scheduler tails the job table's changefeed and hands the
        # pending row to its SSP, which calls the backend and writes the result.
        result = await clients[1].run("job", "/ok", {"x": 7})
        assert result["ok"] is True and result["echo"] == {"x": 7}, result
        (call,) = [c for c in backend.calls if c.path == "/ok"]
        job = await as_root(s, "SELECT VALUE assignee FROM ONLY type::record($j)",
                            {"j": call.job})
        assert job == "ssp-vc"
    finally:
        for c in clients:
            await c.close()
        code = ssp.stop()
        sched.process.stop()
        await backend.stop()
        assert code == 0, ssp.process.log_text()[-3000:]
