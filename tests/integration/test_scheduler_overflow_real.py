"""A buffer overflow forces a re-bootstrap through 409 and the SSP comes back Ready (issue 5),
with real processes: the database host, `svc-scheduler` (`max_buffer_per_ssp: 3`) and one
`svc-ssp` in scheduler mode under ops/run's supervisor (`stack.supervisor`, relaunch on 2-6).

How the SSP is kept Bootstrapping at the scheduler without racing its bootstrap: it advertises
the address of a relay in the test (`Gate`). The scheduler reaches the SSP only through that
address (health polls, event batches, views), while the SSP reaches the scheduler directly
(register, proxy reads, heartbeats). While the gate is closed every connection through it is
dropped, so no health poll can see `ready` and the entry stays Bootstrapping however fast the
SSP loads; the 4th event queued for it overflows the buffer of 3. The gate is opened at once:
the SSP finishes its bootstrap, its next heartbeat is answered 409 `{reason, clean: true}`, it
wipes its local state and exits 4, the supervisor relaunches it, it registers again (a snapshot
that holds the 4 events) and reaches Ready. Its views' edges then equal SurrealDB's answer
over every row written, the overflow-time ones included, and it holds the scheduler's last seq.

Transport `http`: each row is written to the database and its event posted to `/ingest` (the
embedded host has no `http::*` functions).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.procs import DbHost, ManagedProcess, base_env, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    db_env,
    edges,
    root_db,
    wait_for,
)

MAX_BUFFER = 3


class Gate:
    """A TCP relay to the SSP that drops every connection while closed."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.open = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()  # either side ending ends the connection (HTTP: nothing is lost)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        if self._server is not None:
            await self._server.wait_closed()


async def jget(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url, headers={"Authorization": "Bearer any"}) as r:
        return json.loads(await r.text())


async def write(root: Any, http: aiohttp.ClientSession, s: SchedulerProc, op: str, i: int,
                n: int) -> int:
    """Row post:p<i> created/updated (n) or deleted in the database, then its event posted;
    the event's seq."""
    rid = f"post:p{i}"
    if op == "DELETE":
        await root.query("DELETE type::record('post', $k)", {"k": f"p{i}"})
        rec: dict[str, Any] = {}
    else:
        verb = "CREATE" if op == "CREATE" else "UPSERT"
        await root.query(f"{verb} type::record('post', $k) SET owner = user:alice, "
                         "title = 't', n = $n", {"k": f"p{i}", "n": n})
        rec = {"id": rid, "owner": "user:alice", "title": "t", "n": n}
    async with http.post(s.url + "/ingest", json={"table": "post", "op": op, "id": rid,
                                                  "record": rec}) as r:
        assert r.status == 200, await r.text()
        return int((await r.json())["seq"])


def log_count(p: ManagedProcess, text: str) -> int:
    return p.log_text().count(text)


async def test_buffer_overflow_forces_a_rebootstrap_through_409_and_the_ssp_comes_back_ready(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    name = "ovf_" + uuid.uuid4().hex[:8]
    host = shared_db_host
    root = await root_db(host, name, name)
    await root.query(APP_SCHEMA)
    apply_schema(host, name, name)  # changefeed flavour: the embedded host has no http::*
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
    for i in range(30):
        await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                         "n = $n", {"k": f"p{i}", "n": i})
    sched_port, ssp_port = free_port(), free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, sched_port,
                                      max_buffer_per_ssp=MAX_BUFFER, ssp_poll_interval_ms=100,
                                      bootstrap_timeout_secs=3600), sched_port, name)
    gate = Gate(ssp_port)
    await gate.start()
    ssp_id = f"ssp-{ssp_port}"  # ops/run's id: stable across relaunches
    sup = ManagedProcess(
        "supervisor",
        [sys.executable, "-m", "tests.support.supervised_ssp", "--ssps", "1",
         "--ssp-bind", f"127.0.0.1:{ssp_port}", "--scheduler-bind", f"127.0.0.1:{sched_port}",
         "--data", str(tmp_path / "data")],
        base_env(**db_env(host, name, name), SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1",
                 HEARTBEAT_INTERVAL_MS="200", SVC_SSP_BOOTSTRAP_PAGE_SIZE="7",
                 SVC_SSP_ADVERTISE_ADDR=f"127.0.0.1:{gate.port}",
                 SVC_SSP_RUN_DIR=str(tmp_path / "run")),
        tmp_path / "supervisor.log").start()
    ssp_url = f"http://127.0.0.1:{ssp_port}"
    sup_code: int | None = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def entry() -> dict[str, Any] | None:
                m = await jget(http, s.url + "/metrics")
                return next((x for x in m["ssps"] if x["id"] == ssp_id), None)

            async def registered() -> bool:
                assert sup.alive(), sup.log_text()[-4000:]
                return await entry() is not None

            await wait_for(registered, 120, "the SSP registered")
            # Nothing can move it on while the gate is closed (the poll is the only way out).
            first = await entry()
            assert first is not None and first["state"] == "bootstrapping", first

            # More events than max_buffer_per_ssp while it bootstraps: the last one overflows.
            # Each is published to the queues before its 200, so the flag is set by then.
            for i in range(100, 101 + MAX_BUFFER):
                await write(root, http, s, "CREATE", i, i)
            assert log_count(s.process, f"SSP {ssp_id} flagged for re-bootstrap: buffer "
                                        f"overflow: more than {MAX_BUFFER} events queued") == 1
            now = await entry()
            removed = f"SSP {ssp_id} removed: answered 409 (buffer overflow"
            if log_count(s.process, removed) == 0:
                # Not answered yet (the removal is logged before the 409 goes out, and only
                # after it can the SSP register again): the entry read is the flagged one.
                assert now is not None and now["state"] == "bootstrapping", now
                assert now["queued"] == 0 and now["flagged"].startswith("buffer overflow"), now

            gate.open = True

            async def relaunched() -> bool:
                return log_count(sup, "exited with 4; relaunching") >= 1

            await wait_for(relaunched, 120, "the SSP exited 4 and was relaunched")
            text = sup.log_text()
            assert ("resync directive from the scheduler: buffer overflow: more than "
                    f"{MAX_BUFFER} events queued (clean=True)") in text
            assert "local state wiped (clean resync)" in text
            assert log_count(s.process, removed) == 1

            async def ready() -> bool:
                assert sup.alive(), sup.log_text()[-4000:]
                e = await entry()
                return e is not None and e["state"] == "ready"

            await wait_for(ready, 120, "the relaunched SSP ready at the scheduler")
            # It registered again after the overflow: its snapshot holds the 4 events.
            snapshot_seqs = [int(x.split()[0]) for x in
                             sup.log_text().split("snapshot_seq ")[1:]]
            assert snapshot_seqs == [0, MAX_BUFFER + 1], snapshot_seqs

            views = {"all": "SELECT * FROM post WHERE n >= 0",
                     "high": "SELECT * FROM post WHERE n >= 20"}
            for key, surql in views.items():
                body = {"id": f"query:{key}", "surql": surql, "clientId": "c1", "ttl": "10m",
                        "params": {"auth_id": "user:alice"}}
                async with http.post(s.url + "/view/register", json=body) as r:
                    reply = await r.json()
                    assert r.status == 200 and reply["ssp_id"] == ssp_id, reply

            # Events after the re-bootstrap: new rows, an overflow-time row changed, one deleted.
            # The limit holds in every state (scheduler/README: "any -> flagged"), and events
            # wait in the queue while a batch is in flight: posting the next one only after the
            # scheduler delivered the last keeps this Ready SSP's queue at 1, under the limit.
            async def delivered(seq: int) -> bool:
                e = await entry()
                assert e is not None and e["flagged"] is None, e
                return bool(e["sent_seq"] >= seq)

            for op, i, n in [*(("CREATE", i, i) for i in range(200, 205)), ("UPDATE", 100, 5),
                             ("DELETE", 101, 0), ("UPDATE", 3, 50)]:
                seq = await write(root, http, s, op, i, n)
                await wait_for(functools.partial(delivered, seq), 60, f"event {seq} delivered")

            async def converged() -> bool:
                for key, surql in views.items():
                    want = {f"post:{r['id'].id}" for r in await root.query_one(surql)}
                    if await edges(root, "_00_list_ref_user_alice", key) != want:
                        return False
                return True

            await wait_for(converged, 60, "every view's edges equal SurrealDB's answer")
            all_edges = await edges(root, "_00_list_ref_user_alice", "all")
            assert {"post:p100", "post:p102", "post:p103"} <= all_edges
            assert "post:p101" not in all_edges and len(all_edges) == 30 + 4 - 1 + 5

            async def holds_everything() -> bool:
                latest = (await jget(http, s.url + "/health"))["scheduler"]["latest_seq"]
                info = (await jget(http, ssp_url + "/info"))[0]
                hb = await jget(http, ssp_url + "/debug/heartbeat")
                return (latest == MAX_BUFFER + 1 + 8 and hb["last_seq"] == latest
                        and info["circuit_tables"]["post"] == len(all_edges))

            await wait_for(holds_everything, 60, "the SSP holds every row and the last seq")
            assert log_count(sup, "exited with") == 1  # one relaunch, after the 409 only
    finally:
        sup_code = sup.stop(timeout=90)
        s.process.stop()
        await gate.close()
        with contextlib.suppress(Exception):
            await root.close()
    assert sup_code == 0, sup.log_text()[-4000:]
