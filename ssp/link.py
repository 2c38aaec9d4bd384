"""The SSP's scheduler mode (`SVC_SCHEDULER_URL` set): registration, bootstrap through the
scheduler's `/proxy/query`, the integrity check, heartbeats, and the exit codes of the spec.

Sequence (contract "SSP scheduler mode"):

1. `POST {scheduler}/ssp/register {ssp_id, url}` retried with capped exponential backoff until
   202 `{snapshot_seq}`. Not registered within `SVC_SSP_REGISTER_MAX_WAIT_SECS`: exit 5 when the
   scheduler never answered over HTTP (unreachable), 6 when its last answer was an HTTP status
   other than 202 (refused).
2. The hub loads every synced table through `POST {scheduler}/proxy/query` (`ProxySource`,
   the same reads as `dbclient.Database`: `INFO FOR DB`, keyset pages, `INFO FOR TABLE`,
   `count()`), asking for CBOR (decoded with the SDK's decoder, so record ids, datetimes and
   decimals keep their types) with `Authorization: Bearer <this SSP's credential>` (derived
   from `SVC_AUTH_SECRET` when set, `ipc.peerauth`; the same on every call below). A
   progress POST after every table (advisory: failures are logged, never retried).
   `last_seq` starts at `snapshot_seq` (events up to it are in the snapshot).
   Warm (ours): with a snapshot holding a scheduler position (`ssp.hub.snapshot`), the
   registration offers it (`warm: {epoch, seq}`); accepted, the snapshot's rows are loaded
   instead and the events after them, up to `snapshot_seq`, read from `/ssp/catchup`; a
   refusal or any failure on the way (the integrity check included) bootstraps cold. The
   answer also lists the views the scheduler assigns to this SSP: those of them the last
   graceful stop wrote beside the snapshot are built on its rows before the catch-up
   (`ssp.hub.warmviews`), and the scheduler's re-sending of them after Ready is a refresh.
3. Integrity: own per-table counts and hashes vs `GET {scheduler}/health/snapshot`, over the
   tables the SSP syncs (a table missing on one side counts 0 rows, hash 0). A mismatch reloads
   from the proxy and checks again; the third failed check exits 2.
4. `/health` answers ready; heartbeats every `HEARTBEAT_INTERVAL_MS`: 200 continue, 404 exit 3,
   409 exit 4 (JSON `{reason, clean}`; clean=true first deletes `snapshot.json` and the arena
   dir; a plain-text body means clean=false), anything else is logged and heartbeating goes on.

Exits go through `Hub.request_exit(code)` (or `SchedulerExit` raised out of `Hub.start`); the
supervisor in `ssp.__main__` stops the gateway and shards gracefully and returns that code.
No changefeed tail and no view restore from `_00_query` in this mode: the scheduler feeds
events and owns view assignment. Edges and `_00_query` rows still go to the database directly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from surrealdb import RecordID
from surrealdb.data.cbor import decode as cbor_decode

from dbclient import DbError
from dbclient.clock import now_ms
from dbclient.sql import require_identifier, require_int
from engine.hashing import hash_text
from engine.values import record_id_text
from ipc.backoff import Backoff
from ipc.http import client_session
from ipc.procmem import rss_bytes
from ipc.version import VERSION

if TYPE_CHECKING:
    from engine.arena import RowStore
    from ssp.config import SspConfig
    from ssp.publisher import Publisher

log = logging.getLogger("ssp.link")

EXIT_INTEGRITY = 2
EXIT_UNKNOWN = 3
EXIT_RESYNC = 4
EXIT_UNREACHABLE = 5
EXIT_REFUSED = 6
INTEGRITY_ATTEMPTS = 3
HTTP_TIMEOUT_SECS = 30.0
WORST_VIEWS = 8
CBOR = "application/cbor"


class SchedulerExit(Exception):
    """The SSP must exit with `code` (the supervisor relaunches it)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(f"exit {code}: {why}")
        self.code = code


class ProxyError(DbError):
    """`/proxy/query` failed (unreachable, non-200, or a statement status ERR)."""


def _headers(secret: str | None, **extra: str) -> dict[str, str]:
    h = dict(extra)
    if secret:
        h["Authorization"] = f"Bearer {secret}"
    return h


class ProxySource:
    """The reads a bootstrap needs, answered by the scheduler's frozen replica."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, secret: str | None,
                 stats: dict[str, int] | None = None) -> None:
        self.session = session
        self.url = f"{base_url}/proxy/query"
        self.secret = secret
        # Bootstrap pages read (the link's, over every source it made): a warm start reads none.
        self.stats = stats if stats is not None else {"pages": 0}

    async def query_one(self, sql: str, vars: Mapping[str, Any] | None = None, *,
                        idempotent: bool = False) -> Any:
        """The result of the one statement `sql` (vars: JSON-able; record ids as text)."""
        body: dict[str, Any] = {"query": sql}
        if vars:
            body["vars"] = {k: record_id_text(v) if isinstance(v, RecordID) else v
                            for k, v in vars.items()}
        try:
            async with self.session.post(self.url, json=body,
                                         headers=_headers(self.secret, Accept=CBOR)) as r:
                data = await r.read()
                if r.status != 200:
                    text = data[:300].decode(errors="replace")
                    raise ProxyError(f"/proxy/query answered {r.status}: {text}")
                ctype = r.headers.get("Content-Type", "")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ProxyError(f"/proxy/query unreachable: {type(e).__name__}: {e}") from None
        try:
            decoded = cbor_decode(data) if ctype.startswith(CBOR) else json.loads(data)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the proxy's fault
            raise ProxyError(f"/proxy/query answer not decodable ({ctype}): {e}") from None
        if not isinstance(decoded, list) or not decoded or not isinstance(decoded[0], dict):
            raise ProxyError("/proxy/query answer is not [{status, result}]")
        first = decoded[0]
        if first.get("status") != "OK":
            raise ProxyError(f"/proxy/query statement failed: {str(first.get('result'))[:300]}")
        return first.get("result")

    async def table_definitions(self) -> dict[str, str]:
        """`INFO FOR DB` (forwarded upstream by the scheduler): table -> DEFINE text."""
        info = await self.query_one("INFO FOR DB", idempotent=True)
        tables = (info or {}).get("tables") if isinstance(info, dict) else None
        return {str(k): str(v) for k, v in (tables or {}).items()}

    async def replica_tables(self) -> list[str]:
        """`TABLES`: the replica's non-empty synced tables."""
        return sorted(str(t) for t in await self.query_one("TABLES", idempotent=True) or [])

    async def table_info(self, table: str) -> dict[str, Any]:
        """`INFO FOR TABLE <table>` (forwarded upstream by the scheduler)."""
        require_identifier(table)
        info = await self.query_one(f"INFO FOR TABLE {table}", idempotent=True)
        return dict(info or {})

    async def keyset_pages(self, table: str, page_size: int = 500
                           ) -> AsyncIterator[list[dict[str, Any]]]:
        """The table in id order, keyset pages of `page_size` (the two proxy statements)."""
        require_identifier(table)
        require_int(page_size, "page_size", minimum=1)
        last: Any = None
        while True:
            if last is None:
                page = await self.query_one(
                    f"SELECT * FROM {table} ORDER BY id LIMIT {page_size}")
            else:
                page = await self.query_one(
                    f"SELECT * FROM {table} WHERE id > $last ORDER BY id LIMIT {page_size}",
                    {"last": last})
            self.stats["pages"] = self.stats.get("pages", 0) + 1
            if not page:
                return
            yield list(page)
            if len(page) < page_size:
                return
            last = page[-1]["id"]


class Usage:
    """CPU percent of this process between two samples, and its resident memory in MB."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()

    def cpu_percent(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        dw = wall - self._wall
        pct = (cpu - self._cpu) / dw * 100 if dw > 0 else 0.0
        self._wall, self._cpu = wall, cpu
        return round(pct, 2)

    @staticmethod
    def memory_mb() -> float:
        rss = rss_bytes()
        if rss:
            return round(rss / 1_048_576, 2)
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 2)


def _restoring(text: str) -> bool:
    """The heartbeat answer's `restoring` (ours; an older scheduler omits it): a restore is
    replacing the database, so this SSP's periodic writers hold still (`HubState.writers_hold`)."""
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("restoring") is True


class HubPort(Protocol):
    """What the link needs of the hub (`ssp.hub.Hub` provides it): its state read for the
    heartbeats and the integrity check, and the loads a bootstrap from the scheduler does."""

    cfg: SspConfig

    @property
    def views(self) -> Mapping[str, Any]: ...  # read only: the link never replaces the map

    tables: set[str]
    rows: RowStore
    wire_hashes: dict[str, int]
    last_seq: int
    wiped: bool
    publisher: Publisher
    upstream_restoring: bool  # set from the heartbeat answer: the scheduler is restoring

    def request_exit(self, code: int) -> None: ...

    def syncs_table(self, name: str, definition: str = "") -> bool: ...

    async def bootstrap_from(self, source: ProxySource, progress: Any = None) -> None: ...

    async def forget_rows(self) -> None: ...

    def linked_snapshot(self) -> tuple[dict[str, Any] | None, str]: ...

    async def load_linked_snapshot(self, snap: dict[str, Any], source: ProxySource
                                   ) -> None: ...

    async def catch_up(self, data: bytes) -> dict[str, Any]: ...

    async def restore_linked_views(self, epoch: str, seq: int, assigned: set[str]
                                   ) -> tuple[int, str]: ...


class SchedulerLink:
    """One SSP's conversation with its scheduler (see the module docstring)."""

    def __init__(self, hub: HubPort) -> None:
        cfg = hub.cfg
        assert cfg.scheduler_url is not None
        self.hub = hub
        self.base = cfg.scheduler_url
        # Our own credential (ipc.peerauth), not the secret: the scheduler's URL is configured,
        # but a credential that opens nothing else is what we send anywhere.
        self.secret = cfg.scheduler_bearer
        self.session: aiohttp.ClientSession | None = None
        self.snapshot_seq: int | None = None
        self.heartbeats_sent = 0
        self.last_heartbeat_status: int | None = None
        self.last_heartbeat_ms: int | None = None
        self.usage = Usage()
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        # The scheduler's replica epoch (from the registration's answer; ours), recorded in
        # the snapshot with the position of its rows.
        self.epoch = ""
        self.warm_accepted = False
        self.warm_refused = ""
        # The views the scheduler assigns to this SSP when it accepted a warm start (ours; an
        # older scheduler sends none, and no view is then restored from the snapshot).
        self.assigned: set[str] = set()
        self.phases: dict[str, float] = {}
        self.stats: dict[str, int] = {"pages": 0}
        # How the last bootstrap went (`/debug/heartbeat` `start`, each heartbeat's `start`).
        self.start: dict[str, Any] | None = None

    @property
    def own_url(self) -> str:
        cfg = self.hub.cfg
        if cfg.advertise_addr:
            addr = cfg.advertise_addr
            return addr if addr.startswith(("http://", "https://")) else f"http://{addr}"
        host = cfg.listen_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{cfg.listen_port}"

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            self.session = client_session(
                timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_SECS))
        return self.session

    def source(self) -> ProxySource:
        return ProxySource(self._session(), self.base, self.secret, self.stats)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    # ------------------------------------------------------------------ register

    async def register(self, warm: tuple[str, int] | None = None) -> int:
        """Register until 202; returns `snapshot_seq`. SchedulerExit 5/6 after the max wait.

        `warm`: the `(epoch, seq)` of the snapshot's rows (ours): the answer's `warm` says
        whether the scheduler replays from there (`warm_accepted`, else `warm_refused`)."""
        cfg = self.hub.cfg
        deadline = time.monotonic() + cfg.register_max_wait_secs
        backoff = Backoff(0.2, cap=cfg.register_retry_max_ms / 1000)
        last_status: int | None = None
        last_problem = "no attempt"
        body: dict[str, Any] = {"ssp_id": cfg.ssp_id, "url": self.own_url}
        if warm is not None:
            body["warm"] = {"epoch": warm[0], "seq": warm[1]}
        while True:
            try:
                async with self._session().post(f"{self.base}/ssp/register", json=body,
                                                headers=_headers(self.secret)) as r:
                    last_status = r.status
                    text = await r.text()
                    if r.status == 202:
                        answer = json.loads(text)
                        seq = answer.get("snapshot_seq")
                        if isinstance(seq, int) and not isinstance(seq, bool):
                            self.snapshot_seq = seq
                            # An older scheduler answers neither: no epoch, never warm.
                            epoch = answer.get("epoch")
                            self.epoch = epoch if isinstance(epoch, str) else ""
                            self.warm_accepted = warm is not None and answer.get("warm") is True
                            views = answer.get("views") if self.warm_accepted else None
                            self.assigned = ({str(v) for v in views}
                                             if isinstance(views, list) else set())
                            self.warm_refused = str(answer.get("warm_refused") or (
                                "" if warm is None or self.warm_accepted
                                else "the scheduler does not start SSPs warm"))[:300]
                            log.info("registered with the scheduler as %s (%s); snapshot_seq %d",
                                     cfg.ssp_id, self.own_url, seq)
                            return seq
                        last_problem = f"202 without an integer snapshot_seq: {text[:200]}"
                    else:
                        last_problem = f"answered {r.status}: {text[:200]}"
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                last_problem = f"{type(e).__name__}: {e}"
            if time.monotonic() >= deadline:
                code = EXIT_UNREACHABLE if last_status is None else EXIT_REFUSED
                raise SchedulerExit(code, f"not registered within {cfg.register_max_wait_secs}s "
                                          f"({last_problem})")
            log.warning("registration with the scheduler failed (%s); retrying in %.1fs",
                        last_problem, backoff.current)
            # `self.sleep`, not `backoff.sleep`: tests replace it to run without waiting.
            await self.sleep(min(backoff.next(), max(0.0, deadline - time.monotonic())))

    # ------------------------------------------------------------------ bootstrap

    async def progress(self, tables_done: int, tables_total: int, rows_loaded: int,
                       current_table: str) -> None:
        """Advisory progress POST: never retried, failures only logged."""
        body = {"ssp_id": self.hub.cfg.ssp_id, "tables_done": tables_done,
                "tables_total": tables_total, "rows_loaded": rows_loaded,
                "current_table": current_table}
        try:
            async with self._session().post(f"{self.base}/ssp/bootstrap-progress", json=body,
                                            headers=_headers(self.secret)) as r:
                await r.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.info("bootstrap progress not delivered: %s", e)

    async def bootstrap(self, forget: Callable[[], Awaitable[None]] | None = None, *,
                        warm: bool = False) -> None:
        """Register, load through the proxy, check integrity (3 attempts, then exit 2).

        `warm` (the start-up): with a snapshot holding a scheduler position, offer it; when
        the scheduler accepts, load the snapshot, apply the events after it up to
        `snapshot_seq` (`/ssp/catchup`) and check integrity as a cold load would; a failure
        on the way drops those rows and bootstraps cold. `forget` drops the loaded rows before
        another attempt (default `hub.forget_rows`; a caller already holding the hub's
        exclusive section passes its own)."""
        started = time.monotonic()
        pages0 = self.stats["pages"]
        snap, why = self.hub.linked_snapshot() if warm else (None, "a reload")
        position = None
        if snap is not None:
            pos = snap["scheduler"]
            position = (str(pos["epoch"]), int(pos["seq"]))
        seq = await self.register(position)
        if snap is not None and position is not None:
            if self.warm_accepted:
                problem, views = await self._warm(snap, position, seq)
                if problem is None:
                    self.start = {"mode": "warm", "from_seq": position[1], "to_seq": seq,
                                  "events": seq - position[1],
                                  "pages_read": self.stats["pages"] - pages0,
                                  "views_restored": views[0], "views_cold_why": views[1],
                                  "phases": self.phases,
                                  "secs": round(time.monotonic() - started, 3)}
                    return
                why = problem
                await (forget or self.hub.forget_rows)()
            else:
                why = self.warm_refused
        log.info("cold bootstrap through the scheduler: %s", why)
        for attempt in range(1, INTEGRITY_ATTEMPTS + 1):
            await self.hub.bootstrap_from(self.source(), self.progress)
            self.hub.last_seq = seq
            problems = await self.integrity_problems()
            if not problems:
                log.info("bootstrap through the scheduler verified (%d tables)",
                         len(self.hub.tables))
                self.start = {"mode": "cold", "why": why,
                              "pages_read": self.stats["pages"] - pages0,
                              "secs": round(time.monotonic() - started, 3)}
                return
            log.error("integrity check %d/%d failed: %s", attempt, INTEGRITY_ATTEMPTS,
                      "; ".join(problems[:10]))
            if attempt < INTEGRITY_ATTEMPTS:
                await (forget or self.hub.forget_rows)()
        raise SchedulerExit(EXIT_INTEGRITY, "the bootstrap never matched the scheduler's "
                                            "snapshot")

    async def _warm(self, snap: dict[str, Any], position: tuple[str, int], seq: int
                    ) -> tuple[str | None, tuple[int, str]]:
        """The warm start; None when it passed the integrity check, else why not (the
        caller drops the rows and views, and bootstraps cold); with how many views came
        back from the snapshot (and why none, when none did). The views are built on the
        snapshot's rows before the catch-up, so the events after them reach the views as
        deltas and only the edges they change are written (`ssp.hub.warmviews`)."""
        hub = self.hub
        views = (0, "")
        t0 = time.monotonic()
        try:
            await hub.load_linked_snapshot(snap, self.source())
            hub.last_seq = position[1]
            t1 = time.monotonic()
            views = await hub.restore_linked_views(position[0], position[1], self.assigned)
            t2 = time.monotonic()
            caught = await self.catch_up(position[1], seq)
            t3 = time.monotonic()
            problems = await self.integrity_problems()
            # where the warm start's time went (`start.phases`, the benchmark prints it)
            self.phases = {"rows": round(t1 - t0, 3), "views": round(t2 - t1, 3),
                           "catch_up": round(t3 - t2, 3),
                           "verify": round(time.monotonic() - t3, 3)}
        except Exception as e:  # noqa: BLE001 - a damaged snapshot must not stop the start
            # (raised out of here, the relaunched SSP would read the same snapshot again)
            log.warning("warm start failed (%s: %s); bootstrapping cold", type(e).__name__, e)
            return f"the warm start failed: {type(e).__name__}: {str(e)[:200]}", views
        if problems:
            log.warning("warm start does not match the scheduler's snapshot (%s); "
                        "bootstrapping cold", "; ".join(problems[:10]))
            return "the warm start did not match the scheduler's snapshot", views
        log.info("warm start from the snapshot at seq %d, %d events caught up to seq %d, "
                 "verified (%d tables); %d views restored from the snapshot%s", position[1],
                 caught, seq, len(hub.tables), views[0], f" ({views[1]})" if views[1] else "")
        return None, views

    async def catch_up(self, after: int, through: int) -> int:
        """Apply the events `after < seq <= through` from the scheduler's WAL (in pages);
        returns how many. ProxyError when the scheduler cannot give them all."""
        done = 0
        hub = self.hub
        while hub.last_seq < through:
            body = {"ssp_id": self.hub.cfg.ssp_id, "after": hub.last_seq, "through": through}
            try:
                async with self._session().post(f"{self.base}/ssp/catchup", json=body,
                                                headers=_headers(self.secret)) as r:
                    data = await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError) as e:
                raise ProxyError(f"/ssp/catchup unreachable: {type(e).__name__}: {e}"
                                 ) from None
            if status != 200:
                raise ProxyError(f"/ssp/catchup answered {status}: "
                                 f"{data[:300].decode(errors='replace')}")
            before = hub.last_seq
            res = await hub.catch_up(data)
            if res.get("status") != 200:
                raise ProxyError(f"a catch-up batch was refused: {res.get('body')}")
            if hub.last_seq <= before:
                raise ProxyError(f"/ssp/catchup sent nothing after seq {before}")
            done += hub.last_seq - before
        return done

    async def snapshot(self) -> dict[str, Any]:
        try:
            async with self._session().get(f"{self.base}/health/snapshot",
                                           headers=_headers(self.secret)) as r:
                if r.status != 200:
                    raise ProxyError(f"/health/snapshot answered {r.status}")
                data = await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise ProxyError(f"/health/snapshot failed: {type(e).__name__}: {e}") from None
        if not isinstance(data, dict):
            raise ProxyError("/health/snapshot is not an object")
        return data

    async def integrity_problems(self) -> list[str]:
        """Differences between own tables and the scheduler's snapshot (empty: equal)."""
        snap = await self.snapshot()
        counts = snap.get("tables") or {}
        hashes = snap.get("hashes") or {}
        names = set(self.hub.tables) | {t for t in counts if self.hub.syncs_table(str(t))}
        problems = []
        for t in sorted(names):
            mine_n = self.hub.rows.count(t)
            mine_h = hash_text(self.hub.wire_hashes.get(t, self.hub.rows.hash(t)))
            theirs_n = int(counts.get(t, 0) or 0)
            theirs_h = str(hashes.get(t, hash_text(0))).lower()
            if mine_n != theirs_n or mine_h != theirs_h:
                problems.append(f"{t}: {mine_n} rows hash {mine_h} vs scheduler {theirs_n} "
                                f"rows hash {theirs_h}")
        return problems

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_body(self) -> dict[str, Any]:
        """The spec's heartbeat body plus `last_seq`, `memory_limit_mb` (SVC_SSP_MEMORY_LIMIT_MB)
        and the publication measurements."""
        hub = self.hub
        pub = hub.publisher
        return {
            "ssp_id": hub.cfg.ssp_id,
            "timestamp": time.time(),
            "views": len(hub.views),
            "cpu_usage": self.usage.cpu_percent(),
            "memory_usage": self.usage.memory_mb(),
            # the ceiling `least_load` placement weighs memory_usage against (scheduler.views)
            "memory_limit_mb": hub.cfg.memory_limit_mb,
            "version": VERSION,
            "last_seq": hub.last_seq,
            # ours: how this SSP's last bootstrap went (warm or cold, and why)
            "start": self.start,
            "publication": {**pub.figures().heartbeat(),
                            "worst_views": pub.worst_views(WORST_VIEWS)},
        }

    async def heartbeat_once(self) -> int | None:
        """Send one heartbeat; acts on 404/409 (SchedulerExit); returns the status or None."""
        try:
            async with self._session().post(f"{self.base}/ssp/heartbeat",
                                            json=self.heartbeat_body(),
                                            headers=_headers(self.secret)) as r:
                text = await r.text()
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("heartbeat failed: %s: %s", type(e).__name__, e)
            return None
        self.heartbeats_sent += 1
        self.last_heartbeat_status = status
        self.last_heartbeat_ms = now_ms()
        if status == 404:
            raise SchedulerExit(EXIT_UNKNOWN, "the scheduler does not know this SSP")
        if status == 409:
            reason, clean = parse_directive(text)
            log.warning("resync directive from the scheduler: %s (clean=%s)", reason, clean)
            if clean:
                self.wipe()
            raise SchedulerExit(EXIT_RESYNC, f"resync directive: {reason}")
        if status != 200:
            log.warning("heartbeat answered %d: %s", status, text[:200])
        else:
            self.hub.upstream_restoring = _restoring(text)
        return status

    async def heartbeats(self) -> None:
        """The heartbeat loop; a directive ends it with `hub.request_exit(code)`."""
        interval = self.hub.cfg.heartbeat_interval_ms / 1000
        while True:
            try:
                await self.heartbeat_once()
            except SchedulerExit as e:
                log.warning("%s", e)
                self.hub.request_exit(e.code)
                return
            except Exception:
                log.exception("heartbeat round failed")
            await self.sleep(interval)

    def wipe(self) -> None:
        """clean=true: delete `snapshot.json` and the arena directory before exiting."""
        cfg = self.hub.cfg
        self.hub.wiped = True
        if cfg.snapshot_dir is not None:
            # views.json: the views of a warm start (ssp.hub.warmviews), the circuits' state
            for name in ("snapshot.json", "snapshot.tmp", "views.json"):
                try:
                    (cfg.snapshot_dir / name).unlink()
                except FileNotFoundError:
                    pass
                except OSError as e:
                    log.error("could not delete %s: %s", cfg.snapshot_dir / name, e)
        if cfg.arena_dir is not None and cfg.arena_dir.exists():
            shutil.rmtree(cfg.arena_dir, ignore_errors=True)
        log.info("local state wiped (clean resync)")

    def debug(self) -> dict[str, Any]:
        """`GET /debug/heartbeat` in scheduler mode."""
        return {"mode": "scheduler", "scheduler_url": self.base,
                "last_heartbeat_seq": self.heartbeats_sent or None,
                "last_heartbeat_status": self.last_heartbeat_status,
                "last_heartbeat_epoch_ms": self.last_heartbeat_ms,
                "snapshot_seq": self.snapshot_seq, "last_seq": self.hub.last_seq,
                "epoch": self.epoch or None, "start": self.start,
                "upstream_restoring": self.hub.upstream_restoring}


def parse_directive(text: str) -> tuple[str, bool]:
    """A 409 body: JSON `{reason, clean}`; anything else (older scheduler) is clean=false."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:500], False
    if not isinstance(data, dict):
        return text.strip()[:500], False
    return str(data.get("reason", ""))[:500], data.get("clean") is True
