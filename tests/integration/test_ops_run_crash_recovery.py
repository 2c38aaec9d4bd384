"""The local stack survives its own processes' crashes under continuous writes.

One `python -m stack --memory --ssps 2` (ops/run) for the module, on free loopback ports, with
12 views registered through the scheduler and a writer that keeps writing through the
database. Each test injects one fault while it writes: `kill -9` of an SSP, `kill -9` of the
scheduler, SIGSTOP of the database host for a few seconds (then SIGCONT). Afterwards the stack
is still running, the views are maintained again (moved or re-sent by the scheduler; after a
scheduler restart the client re-registers a view whose `_00_query` row was deleted, as the
contract asks of clients), every view's edges equal SurrealDB's own answer, and every write the
database acknowledged is there. The last test stops the stack: no process of it is left (found
by a marker in their environment, so reparented orphans count too) and its temporary directory
is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from surrealdb import RecordID

from dbclient import Database, DbConfig, DbError, DbQueryError
from engine.values import record_id_text
from tests.integration.test_ssp_consistency import USERS, VIEWS, expected
from tests.support import lifeline, proctable
from tests.support.procs import ROOT, base_env, free_port, free_ports
from tests.support.ssp_stack import APP_SCHEMA, edges, wait_for

pytestmark = pytest.mark.slow

KEYS = 30  # post:p0 .. post:p29
TOKEN_VAR = "STACK_TEST_TOKEN"
DB_TIMEOUT_SECS = 3


@dataclass
class RunningStack:
    """The stack's process, its ports and what identifies its processes."""

    proc: subprocess.Popen[bytes]
    log: Path
    tmp: Path  # the stack's TMPDIR: its svc-stack-* directory lives here
    token: str
    password: str
    db_port: int
    sched_port: int
    ssp_ports: list[int]
    views: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def sched(self) -> str:
        return f"http://127.0.0.1:{self.sched_port}"

    def db_config(self) -> DbConfig:
        return DbConfig.from_env({"SVC_DB_URL": f"ws://127.0.0.1:{self.db_port}/rpc",
                                  "SVC_DB_USER": "root", "SVC_DB_PASS": self.password})

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> None:
        assert self.proc.poll() is None, "the stack stopped:\n" + self.log_text()[-6000:]

    def child(self, module: str, port: int | None = None) -> int:
        """The pid of the stack's child running `python -m <module>` (an SSP: on `port`)."""
        found = self.children(module, port)
        assert len(found) == 1, (module, port, found)
        return found[0]

    def children(self, module: str, port: int | None = None) -> list[int]:
        """The pids of the stack's processes running `python -m <module>` (SSPs: on `port`)."""
        found = []
        for pid in proctable.descendants(self.proc.pid):
            argv = proctable.cmdline(pid)
            if argv[1:3] != ["-m", module]:
                continue
            if port is not None:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if f"SVC_SSP_LISTEN_ADDR=127.0.0.1:{port}".encode() not in env:
                    continue
            found.append(pid)
        return found


def _start(tmp: Path) -> RunningStack:
    db_port, sched_port = free_port(), free_port()
    ssp_port = free_ports(2)
    token, password = uuid.uuid4().hex, "crash-test-" + uuid.uuid4().hex[:8]
    log = tmp / "stack.log"
    stack_tmp = tmp / "t"
    stack_tmp.mkdir()
    env = base_env(SVC_DB_USER="root", SVC_DB_PASS=password, HEARTBEAT_INTERVAL_MS="500",
                   SVC_SCHEMA_POLL_SECS="1", SVC_SSP_SHARDS="2",
                   SVC_SSP_QUERY_UPDATE_THROTTLE_MS="20", TMPDIR=str(stack_tmp),
                   # The services give up on a database call after 3 s, so stopping the host
                   # for longer makes their calls time out (and retry), not only wait.
                   SVC_SSP_DB_TIMEOUT_SECS=str(DB_TIMEOUT_SECS),
                   **{TOKEN_VAR: token})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stack", "--memory", "--ssps", "2",
             "--db-bind", f"127.0.0.1:{db_port}", "--ssp-bind", f"127.0.0.1:{ssp_port}",
             "--scheduler-bind", f"127.0.0.1:{sched_port}",
             "--admin-bind", f"127.0.0.1:{free_port()}"],
            cwd=str(ROOT), env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        lifeline.adopt(proc.pid)  # dies with this run, killed or not
    return RunningStack(proc, log, stack_tmp, token, password, db_port, sched_port,
                        [ssp_port, ssp_port + 1])


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int | None, Any]:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.status, json.loads(await r.text() or "null")
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None, None


async def _ready_ssps(http: aiohttp.ClientSession, s: RunningStack) -> set[str]:
    status, body = await _get(http, s.sched + "/metrics")
    if status != 200 or not isinstance(body, dict):
        return set()
    return {x["id"] for x in body.get("ssps", []) if x.get("state") == "ready"}


async def _all_ready(http: aiohttp.ClientSession, s: RunningStack) -> bool:
    s.running()
    return await _ready_ssps(http, s) == {f"ssp-{p}" for p in s.ssp_ports}


async def _register_missing(http: aiohttp.ClientSession, s: RunningStack,
                            root: Database) -> None:
    """What a client does: a view whose `_00_query` row is gone is registered again."""
    held = {record_id_text(r) for r in await root.query_one("SELECT VALUE id FROM _00_query")}
    for key, (surql, user) in s.views.items():
        if f"_00_query:{key}" in held:
            continue
        body = {"id": f"query:{key}", "surql": surql, "clientId": "c", "ttl": "30m",
                "params": {"auth_id": f"user:{user}"}}
        try:
            async with http.post(s.sched + "/view/register", json=body) as r:
                assert r.status in (200, 503), (r.status, await r.text())
        except (aiohttp.ClientError, TimeoutError):
            pass  # the scheduler is not back yet: the next round tries again


async def _differences(s: RunningStack, root: Database) -> dict[str, Any]:
    diff = {}
    for key, (surql, user) in s.views.items():
        want = await expected(root, surql, user)
        got = await edges(root, f"_00_list_ref_user_{user}", key)
        if want != got:
            diff[key] = {"missing": sorted(want - got), "extra": sorted(got - want)}
    return diff


async def _views_held(http: aiohttp.ClientSession, s: RunningStack) -> dict[str, int]:
    """Views per SSP as each reported in its last heartbeat."""
    status, body = await _get(http, s.sched + "/metrics")
    if status != 200 or not isinstance(body, dict):
        return {}
    return {x["id"]: int(x.get("views") or 0) for x in body.get("ssps", [])}


async def _assert_views_equal_surrealdb(http: aiohttp.ClientSession, s: RunningStack,
                                        root: Database) -> None:
    async def ok() -> bool:
        s.running()
        await _register_missing(http, s, root)
        # Every view held by an SSP again (moved, re-sent or re-registered), and right.
        return (sum((await _views_held(http, s)).values()) == len(s.views)
                and not await _differences(s, root))
    try:
        await wait_for(ok, timeout=180, what="every view's edges equal SurrealDB's answer")
    except AssertionError:
        raise AssertionError(f"views differ: {await _differences(s, root)}\n"
                             + s.log_text()[-4000:]) from None


State = tuple[str, str, int] | None  # (owner, title, n) of a post, None: no such row


class Writer:
    """Writes through the database until stopped, and remembers what was acknowledged.

    A write that failed without an answer (a timeout, a dropped connection) may or may not
    have been committed, possibly after later writes: its state is one the row may end in."""

    def __init__(self, db: Database, seed: int) -> None:
        self.db = db
        self.rng = random.Random(seed)
        self.acked: dict[str, State] = {}
        self.maybe: dict[str, list[State]] = {}
        self.count = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Writer:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task

    async def wait_acked(self, n: int, s: RunningStack) -> None:
        """Wait until `n` more writes than now were acknowledged."""
        want = self.count + n

        async def done() -> bool:
            s.running()
            assert self._task is not None and not self._task.done(), self._task
            return self.count >= want
        await wait_for(done, timeout=180, what=f"{n} more acknowledged writes")

    async def _run(self) -> None:
        while not self._stop.is_set():
            k = f"p{self.rng.randrange(KEYS)}"
            state: State
            if self.rng.random() < 0.8:
                state = (self.rng.choice(USERS), f"t{self.rng.randrange(5)}",
                         self.rng.randrange(10))
                sql = "UPSERT type::record('post', $k) SET owner = $o, title = $t, n = $n"
                args = {"k": k, "o": RecordID("user", state[0]), "t": state[1], "n": state[2]}
            else:
                state, sql, args = None, "DELETE type::record('post', $k)", {"k": k}
            if await self._write(sql, args):
                self.acked[k] = state
                self.count += 1
            else:
                self.maybe.setdefault(k, []).append(state)
            await asyncio.sleep(0.02)  # continuous, not a flood: the machine is shared

    async def _write(self, sql: str, args: dict[str, Any]) -> bool:
        """True when acknowledged, False when the outcome is unknown."""
        for attempt in range(20):
            try:
                await self.db.query(sql, args)
                return True
            except DbQueryError as e:
                # A write conflict with the SSPs' edge transactions: refused, not applied.
                if "can be retried" not in str(e):
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
            except DbError:
                return False
        raise AssertionError("a write kept conflicting")

    async def assert_acknowledged_writes_are_there(self, root: Database) -> None:
        rows = await root.query_one("SELECT id, owner, title, n FROM post")
        now: dict[str, State] = {
            str(r["id"].id): (str(r["owner"].id), r["title"], r["n"]) for r in rows}
        wrong = {}
        for k, state in self.acked.items():
            allowed = [state, *self.maybe.get(k, [])]
            if now.get(k) not in allowed:
                wrong[k] = {"database": now.get(k), "acknowledged": state,
                            "unknown outcomes": self.maybe.get(k, [])}
        assert not wrong, wrong


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    s = _start(tmp_path_factory.mktemp("stack"))
    try:
        asyncio.run(_prepare(s))
        yield s
    finally:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGINT)
            try:
                s.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait()
        for pid in proctable.with_env(f"{TOKEN_VAR}={s.token}"):  # only what this test started
            os.kill(pid, signal.SIGKILL)


async def _prepare(s: RunningStack) -> None:
    """Stack up, the app schema and `svc schema apply` again (as a developer does after
    defining tables), users, rows, and every view registered through the scheduler."""
    async with aiohttp.ClientSession() as http:
        await wait_for(lambda: _all_ready(http, s), timeout=240, what="both SSPs ready")
        async with Database(s.db_config()) as root:
            await root.query(APP_SCHEMA)
            for u in USERS:
                await root.query("CREATE type::record('user', $u) SET name = $u, pass = 'x'",
                                 {"u": u})
            r = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "svccli", "schema", "apply",
                                 "--transport", "changefeed"],
                env=base_env(SVC_DB_URL=f"ws://127.0.0.1:{s.db_port}/rpc",
                             SVC_DB_USER="root", SVC_DB_PASS=s.password),
                cwd=str(ROOT), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr + r.stdout

            # Events reach the SSPs as JSON (issue 20 part 4): a row arriving before an SSP's
            # schema probe read the table's field types keeps `owner` as text. The probe reads
            # tables in name order, so `user` logged means `post`'s types are known.
            async def probed() -> bool:
                s.running()
                return s.log_text().count("schema: new table user") >= 2
            await wait_for(probed, timeout=120, what="both SSPs know the new tables")
            writer = Writer(root, seed=1).start()
            await writer.wait_acked(40, s)
            await writer.stop()
            for vi, surql in enumerate(VIEWS):
                for u in USERS:
                    s.views[f"v{vi}_{u}"] = (surql, u)
            await _assert_views_equal_surrealdb(http, s, root)


async def _under_writes(s: RunningStack, seed: int, fault: Any, recovered: Any) -> Writer:
    """Write continuously while `fault()` runs and until `recovered()` holds, plus some writes
    after; then stop writing and check the views and the acknowledged writes."""
    async with aiohttp.ClientSession() as http, Database(s.db_config()) as root, \
            Database(s.db_config()) as wdb:
        writer = Writer(wdb, seed).start()
        await writer.wait_acked(20, s)
        await fault()
        await wait_for(lambda: recovered(http), timeout=240, what="the stack recovered")
        await writer.wait_acked(30, s)
        await writer.stop()
        s.running()
        await _assert_views_equal_surrealdb(http, s, root)
        await writer.assert_acknowledged_writes_are_there(root)
        return writer


async def test_kill_9_of_an_ssp_relaunches_it_and_nothing_it_started_survives(
        stack: RunningStack) -> None:
    port = stack.ssp_ports[0]
    victim = stack.child("ssp", port)
    below = proctable.descendants(victim)  # gunicorn master and worker, the shards
    assert len(below) >= 4, [proctable.cmdline(p) for p in below]
    relaunched_before = stack.log_text().count("svc-ssp 1 was killed by SIGKILL")
    async with aiohttp.ClientSession() as http:
        held = await _views_held(http, stack)
    assert held.get(f"ssp-{port}", 0) > 0, held  # it holds views: they must move or come back

    async def fault() -> None:
        os.kill(victim, signal.SIGKILL)
        # Its gateway and shards die with it: nothing keeps its port or its sockets.
        assert proctable.wait_gone(below) == []

    async def recovered(http: aiohttp.ClientSession) -> bool:
        pids = stack.children("ssp", port)
        return (stack.log_text().count("svc-ssp 1 was killed by SIGKILL") > relaunched_before
                and len(pids) == 1 and pids[0] != victim and await _all_ready(http, stack))

    await _under_writes(stack, 2, fault, recovered)
    text = stack.log_text()
    assert "Connection in use" not in text  # the relaunched SSP bound its port at once
    assert "svc-ssp 1 was killed by SIGKILL; relaunching in" in text


async def test_kill_9_of_the_scheduler_relaunches_it_and_views_come_back(
        stack: RunningStack) -> None:
    victim = stack.child("scheduler")

    async def fault() -> None:
        os.kill(victim, signal.SIGKILL)

    async def recovered(http: aiohttp.ClientSession) -> bool:
        pids = stack.children("scheduler")
        return len(pids) == 1 and pids[0] != victim and await _all_ready(http, stack)

    await _under_writes(stack, 3, fault, recovered)
    assert "svc-scheduler was killed by SIGKILL; relaunching in" in stack.log_text()


async def test_a_database_host_stopped_for_seconds_is_waited_for(stack: RunningStack) -> None:
    db = stack.child("dbhost")

    async def fault() -> None:
        os.kill(db, signal.SIGSTOP)
        try:
            # The fault itself: the host answers nothing for longer than the services wait.
            await asyncio.sleep(DB_TIMEOUT_SECS + 2)
        finally:
            os.kill(db, signal.SIGCONT)

    async def recovered(http: aiohttp.ClientSession) -> bool:
        return await _all_ready(http, stack)

    await _under_writes(stack, 4, fault, recovered)
    assert stack.child("dbhost") == db  # waited for, not replaced


def test_stopping_the_stack_leaves_no_process_and_no_temporary_state(
        stack: RunningStack) -> None:
    stack.running()
    ours = proctable.with_env(f"{TOKEN_VAR}={stack.token}")
    assert len(ours) >= 10, ours  # host, scheduler, 2 x (SSP, gunicorn x2, 2 shards)
    assert list(stack.tmp.glob("svc-stack-*"))
    stack.proc.send_signal(signal.SIGINT)
    assert stack.proc.wait(timeout=120) == 0, stack.log_text()[-5000:]
    left = proctable.wait_gone(proctable.with_env(f"{TOKEN_VAR}={stack.token}"), timeout=10)
    assert left == [], [proctable.cmdline(p) for p in left]
    assert list(stack.tmp.glob("svc-stack-*")) == []
    assert stack.password not in stack.log_text()
