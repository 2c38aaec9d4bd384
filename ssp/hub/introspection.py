"""What the SSP tells about itself: `/health`, `/version`, `/info`, `/log`, `/logs` (over
`ssp.hub.logring.LogRing`, its own log lines) and the `/debug/*` routes. Read-only over the hub's state,
except `/log` (a client line into the ring) and `/debug/memory?reset_latency=1`."""

from __future__ import annotations

import collections
import gc
import heapq
import json
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import xxhash

from dbclient.clock import now_ms
from engine.errors import QueryRejected
from engine.hashing import hash_text
from engine.jsonvalues import to_json
from engine.parser import parse_cached, query_tables
from ipc.messages import ErrorCode, error_reply, reply
from ipc.routebodies import normalize_view_id
from ssp.hub.reconcile import ReconcileStats
from ssp.shards import ShardDown, ShardError

if TYPE_CHECKING:
    from ssp.hub.state import HubState
    from ssp.hub.visibility import Visibility


#: Frames per traced allocation once tracing starts (`start_hub_tracing`); 0: never.
_trace_frames = 0
#: The snapshot later ones are compared with (see `traced_top`).
_traced_baseline: tracemalloc.Snapshot | None = None


def start_hub_tracing(env: Mapping[str, str]) -> None:
    """Allow tracing the hub's heap when `SVC_SSP_HUB_TRACEMALLOC` names a frame count (a
    diagnosis only: it slows the hub). Tracing starts at the first `/debug/memory` call, not
    at start: a traced hub took minutes to register a soak's 2,000 views, and what a steady
    load leaks is allocated after the set-up anyway. Unlike `PYTHONTRACEMALLOC`, the shards and
    the gateway (children that inherit the environment) are not traced: tracing them all
    made a soak's polls time out."""
    global _trace_frames
    frames = env.get("SVC_SSP_HUB_TRACEMALLOC", "")
    _trace_frames = int(frames) if frames.isdigit() else 0


def _where(tb: tracemalloc.Traceback, depth: int) -> list[str]:
    """The `depth` most recent frames of `tb`, the allocating line first."""
    return ["/".join(fr.filename.rsplit("/", 2)[-2:]) + f":{fr.lineno}"
            for fr in reversed(tb[-depth:])]


def traced_top(n: int = 15) -> dict[str, Any] | None:
    """Where the hub's Python heap is, when tracing is allowed: the first call starts tracing,
    the second takes the baseline; each call from then on gives the bytes traced (allocated
    since tracing started and still alive), the `n` source lines holding the most, and the
    `n` tracebacks that grew most since the baseline. A soak's `--memory-log` then names the
    owner of a growth; with traced bytes flat while RSS grows, the growth is the allocator's
    (fragmentation), not a structure's."""
    global _traced_baseline
    if _trace_frames <= 0:
        return None
    if not tracemalloc.is_tracing():
        tracemalloc.start(_trace_frames)
        return {"started": True}
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    top = snap.statistics("lineno")[:n]
    out: dict[str, Any] = {
        "bytes": tracemalloc.get_traced_memory()[0],
        "top": [[_where(st.traceback, 1)[0], st.size, st.count] for st in top]}
    if _traced_baseline is None:
        _traced_baseline = snap
    else:
        grown = snap.compare_to(_traced_baseline, "traceback")[:n]
        out["grown"] = [[_where(d.traceback, _trace_frames), d.size_diff, d.count_diff]
                        for d in grown]
    return out


def object_counts(n: int, holders_of: str = "") -> dict[str, Any]:
    """The `n` most numerous types among the objects the collector tracks, and how many it
    holds frozen (`gc.freeze()`: those are not counted). Two calls a few minutes apart name
    a Python structure that grows under a steady load without tracing, which slows the hub
    too much for a soak; untracked objects (str, int, float, bytes) show only through the
    containers that hold them, and a dict holding only such values (a cache of id texts) is
    not tracked either. `holders_of` (a type name): for up to 20 objects of that type,
    spread over all of them, the chains of containers holding them, two links up, so the
    owner of a growth has a name. `largest`: the 12 longest lists, dicts, sets and deques,
    each with what holds it (a structure that only grows shows there although the count of
    its type stays put). `gc` is the collector's state (counts per generation and
    collections so far: cyclic garbage waits for them)."""
    objs = gc.get_objects()
    counts = collections.Counter(type(o).__name__ for o in objs)
    out: dict[str, Any] = {"tracked": sum(counts.values()), "frozen": gc.get_freeze_count(),
                           "top": counts.most_common(n),
                           "pymalloc": pymalloc_figures(),
                           "gc": {"enabled": gc.isenabled(), "counts": list(gc.get_count()),
                                  "thresholds": list(gc.get_threshold()),
                                  "collections": [g["collections"] for g in gc.get_stats()]}}
    sized = heapq.nlargest(12, (o for o in objs if type(o) in _SIZED), key=len)
    mine = {id(objs), id(sized)}
    up = _holders(sized, mine)
    mine |= {id(up), *(id(hs) for hs in up.values())}
    names = _labels([c for c in sized] + [h for c in sized for h in up.get(id(c), [])[:1]], mine)
    globals_ = _module_globals(sized)
    out["largest"] = [[len(c), names[id(c)],
                       globals_.get(id(c)) or _holder_name(up.get(id(c)), names)]
                      for c in sized]
    if holders_of:
        found = [o for o in objs if type(o).__name__ == holders_of]
        sample = found[::max(1, len(found) // 20)][:20]
        mine |= {id(found), id(sample)}
        first = _holders(sample, mine)
        ones = [h for hs in first.values() for h in hs]
        mine |= {id(ones), id(first), *(id(hs) for hs in first.values())}
        second = _holders(ones, mine)
        names = _labels(ones + [h for hs in second.values() for h in hs[:3]], mine)
        chains: collections.Counter[str] = collections.Counter()
        for obj in sample:
            for r1 in first.get(id(obj), []):
                for r2 in second.get(id(r1), [])[:3] or [None]:
                    chains[f"{names[id(r1)]} <- {names[id(r2)] if r2 is not None else '-'}"] += 1
        out["holders"] = {"type": holders_of, "chains": chains.most_common(15)}
    return out


_SIZED = frozenset({list, dict, set, collections.deque})
_PYMALLOC_LINES = {"# arenas allocated current": "arenas",
                   "# bytes in allocated blocks": "allocated_bytes",
                   "# bytes in available blocks": "available_bytes"}


def pymalloc_figures() -> dict[str, int]:
    """The small-object allocator's arenas (1 MiB each) beside the bytes its live blocks use:
    arenas growing while the blocks do not is fragmentation (an arena is given back only
    when all of it is free). CPython prints these only to the C stderr
    (`sys._debugmallocstats`), so fd 2 points at a temporary file for the call; the hub's
    one thread is in this call, so no log line of its own can go astray."""
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        name = _PYMALLOC_LINES.get(key.strip())
        if name is not None:
            out[name] = int(value.strip().replace(",", ""))
    return out


def _holders(objs: list[Any], mine: set[int]) -> dict[int, list[Any]]:
    """For each of `objs` (by id), the containers and instances that refer to it, but for
    frames and the lists the caller built (`mine`, ids). One pass of the collector over
    every tracked object, not one per object."""
    want = {id(o) for o in objs}
    found: dict[int, list[Any]] = {}
    frame = type(sys._getframe())
    for r in gc.get_referrers(*objs):
        if id(r) in mine or isinstance(r, frame) or r is objs:
            continue
        for ref in gc.get_referents(r):
            if id(ref) in want:
                found.setdefault(id(ref), []).append(r)
    return found


def _module_globals(objs: list[Any]) -> dict[int, str]:
    """`module.name` (by id) for each of `objs` that a module holds as a global. Read from
    `sys.modules`, not from the collector: a module's namespace made before the process's
    `gc.freeze()` (the hub freezes after start-up, `engine.gcpolicy`) sits in the permanent
    generation, which `gc.get_referrers` does not search."""
    want = {id(o) for o in objs}
    out: dict[int, str] = {}
    for name, module in list(sys.modules.items()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict):
            continue
        for key, value in list(space.items()):
            if id(value) in want and id(value) not in out:
                out[id(value)] = f"{name}.{key}"
    return out


def _holder_name(holders: list[Any] | None, names: dict[int, str]) -> str:
    """The label of what holds an object (module globals are named by `_module_globals`)."""
    if not holders:
        return "-"
    first = holders[0]
    return names.get(id(first), type(first).__name__)


def _labels(objs: list[Any], mine: set[int]) -> dict[int, str]:
    """A short name per object (by id): its type, a container's size, or for an instance's
    `__dict__` the instance's type."""
    out: dict[int, str] = {}
    dicts = [o for o in objs if isinstance(o, dict)]
    owners = {id(getattr(r, "__dict__", None)): type(r).__name__
              for r in (gc.get_referrers(*dicts) if dicts else ())
              if id(r) not in mine and not isinstance(r, (dict, list))}
    for o in objs:
        if isinstance(o, dict):
            owner = owners.get(id(o))
            out[id(o)] = f"{owner}.__dict__" if owner else f"dict[{len(o)}]"
        elif isinstance(o, (list, set, tuple, frozenset, collections.deque)):
            out[id(o)] = f"{type(o).__name__}[{len(o)}]"
        else:
            out[id(o)] = type(o).__name__
    return out


def members_hash(members: list[str]) -> str:
    """`last_hash`: xxh3_64 of the sorted member ids (one per line), 16 hex digits; the same
    in every process and across restarts (Python's `hash()` is salted per process)."""
    text = "\n".join(members)
    return f"{xxhash.xxh3_64_intdigest(text.encode()):016x}"


def _query_tables(surql: str) -> tuple[list[str], list[str]]:
    """(tables the view's query names, its subquery tables); empty for an unparsable text
    (a held view always parsed when it registered)."""
    try:
        return query_tables(parse_cached(surql))
    except QueryRejected:
        return [], []

class Introspection:
    """The read-only routes over the hub's state."""

    def __init__(self, state: HubState, version: str,
                 reconcile: ReconcileStats | None = None,
                 visibility: Visibility | None = None) -> None:
        self.state = state
        self.version = version
        self.reconcile = reconcile or ReconcileStats()
        self.visibility = visibility  # its counters

    async def health(self, req: dict[str, Any]) -> dict[str, Any]:
        s = self.state
        body: dict[str, Any] = {"status": s.status}
        timeouts = max(s.db.consecutive_timeouts, s.pub_db.consecutive_timeouts)
        if timeouts:
            body["db"] = {"status": "stalled", "consecutive_timeouts": timeouts}
        if s.backend_health.configured:
            body["backends"] = s.backend_health.summary()
        return reply(200 if s.status == "ready" else 503, body)

    async def version_route(self, req: dict[str, Any]) -> dict[str, Any]:
        return reply(200, {"version": self.version,
                           "mode": "standalone" if self.state.cfg.standalone else "scheduler"})

    def info_record(self) -> dict[str, Any]:
        """This SSP's entity record for `/info`."""
        s = self.state
        return {
            "entity": "ssp",
            "id": s.cfg.ssp_id,
            "status": s.status,
            "views": len(s.views),
            "ref_mode": s.cfg.ref_mode,
            "version": self.version,
            "uptime_seconds": int(time.monotonic() - s.started),
            "circuit_tables": {t: s.rows.count(t) for t in sorted(s.rows.tables())},
            "circuit_hashes": {t: hash_text(s.rows.hash(t)) for t in sorted(s.rows.tables())},
            "bootstrap_warnings": list(s.bootstrap_warnings),
            "query_allowlist": s.allowlist.info(),
        }

    async def info(self, req: dict[str, Any]) -> dict[str, Any]:
        return reply(200, [self.info_record()])

    async def info_text(self, req: dict[str, Any]) -> dict[str, Any]:
        lines = []
        for k, v in self.info_record().items():
            if isinstance(v, dict):
                lines.append(f"{k}:")
                lines += [f"  {kk}: {json.dumps(vv)}" for kk, vv in v.items()]
            elif isinstance(v, list):
                lines.append(f"{k}: {', '.join(map(str, v)) if v else '-'}")
            else:
                lines.append(f"{k}: {v}")
        return reply(200, None, text="\n".join(lines) + "\n")

    async def log(self, req: dict[str, Any]) -> dict[str, Any]:
        body = req.get("body") or {}
        self.state.logs.add({"at": now_ms(), "level": body.get("level", "info"),
                             "message": body.get("message", ""), "data": body.get("data"),
                             "source": "client"})
        return reply(200, {"status": "ok"})

    async def logs(self, req: dict[str, Any]) -> dict[str, Any]:
        q = req.get("query") or {}
        try:
            cursor = int(q["cursor"]) if "cursor" in q else None
            backfill = int(q.get("backfill", "0") or 0)
        except ValueError:
            return error_reply(400, ErrorCode.INVALID, "cursor and backfill must be integers")
        return self.state.logs.poll(cursor, backfill)

    async def debug_view(self, req: dict[str, Any]) -> dict[str, Any]:
        vid = normalize_view_id(str((req.get("params") or {}).get("view_id", "")))
        view = self.state.views.get(vid)
        if view is None:
            return error_reply(404, ErrorCode.NOT_FOUND, f"no view {vid}")
        members = sorted(view.members)
        tables, sub_tables = _query_tables(view.surql)
        # The subquery state lives in the view's shard (its engine); a shard that is down
        # or restarting answers nothing, reported as null rather than an empty cache.
        cache: dict[str, Any] | None = None
        shard = self.state.shards[view.shard] if view.shard < len(self.state.shards) else None
        if shard is not None and shard.up:
            try:
                r = await shard.call("subqueries", {"view_id": vid}, timeout=5.0)
                if r.get("ok"):
                    cache = r.get("subquery_cache")
            except (ShardDown, ShardError, TimeoutError):
                cache = None
        return reply(200, {
            "view_id": vid, "cache_size": len(members), "last_hash": members_hash(members),
            "format": view.format, "cache": members, "subquery_tables": sub_tables,
            "referenced_tables": tables, "content_generation": view.generation,
            "subquery_cache": cache, "shard": view.shard, "auth_id": to_json(view.auth),
            "edge_table": view.edge_table, "surql": view.surql,
        })

    async def debug_deps(self, req: dict[str, Any]) -> dict[str, Any]:
        s = self.state
        deps: dict[str, list[str]] = {}
        for v in s.views.values():
            tables, _ = _query_tables(v.surql)
            # what the query names, plus tables its members come from (record links, FETCH)
            for t in set(tables) | {m.split(":", 1)[0] for m in v.members}:
                deps.setdefault(t, []).append(v.view_id)
        return reply(200, {"dependency_map": {t: sorted(ids) for t, ids in sorted(deps.items())},
                           "tables_in_store": sorted(s.rows.tables()),
                           "view_count": len(s.views)})

    async def debug_memory(self, req: dict[str, Any]) -> dict[str, Any]:
        s = self.state
        query = req.get("query") or {}
        if query.get("reset_latency") in ("1", "true"):
            s.publisher.stats.clear_latencies()  # benchmarks measure one phase
        objects = str(query.get("objects", ""))
        shards = []
        for sh in s.shards:
            try:
                st = await sh.call("stats", {}, timeout=5.0) if sh.up else {"up": False}
            except (ShardDown, ShardError) as e:
                st = {"up": False, "error": str(e)}
            st.pop("ok", None)
            shards.append({"index": sh.index, "pid": sh.pid, **st})
        return reply(200, {
            "rows": s.row_count(),
            "row_bytes": s.rows.arena.live_bytes,
            "arena": {"private": s.arena.private, "segments": s.rows.arena.segments,
                      "segment_bytes": s.rows.arena.segment_bytes},
            "views": len(s.views), "shards": shards,
            "publication": {**s.publisher.figures().debug_memory(),
                            "unlogged_cascades": s.publisher.unlogged_cascades},
            "reaper": s.publisher.reaper.figures() if s.publisher.reaper else None,
            "reconcile": self.reconcile.as_dict(),
            # transport http: commit-visibility waits, and (standalone) the commit check
            "visibility": ({"fallbacks": self.visibility.fallbacks,
                            "superseded": self.visibility.superseded}
                           if self.visibility is not None else None),
            "commit_check": s.commits.status() if s.commits is not None else None,
            "ingested": s.ingested,
            # the interpreter's live blocks beside the process's RSS: a heap that stays flat
            # while RSS grows is the allocator's, not a structure's
            "python_blocks": sys.getallocatedblocks(),
            **({"traced": traced} if (traced := traced_top()) is not None else {}),
            # `?objects=N`: the N most numerous tracked types (a diagnosis: one pass over
            # every tracked object, ~0.1 s for a hub of 2,000 views)
            **({"objects": object_counts(min(int(objects), 200), str(query.get("holders", "")))}
               if objects.isdigit() else {}),
        })

    async def debug_catchup(self, req: dict[str, Any]) -> dict[str, Any]:
        table = str((req.get("params") or {}).get("table", ""))
        return reply(200, {"table": table, "rows": self.state.rows.count(table),
                           "cursor": self.state.cursor.cursors.get(table)})

    async def debug_heartbeat(self, req: dict[str, Any]) -> dict[str, Any]:
        s = self.state
        if s.link is not None:
            return reply(200, s.link.debug())
        return reply(200, {"last_heartbeat_seq": None, "mode": "standalone",
                           "last_seq": s.last_seq})
