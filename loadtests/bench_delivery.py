"""The scheduler -> SSP delivery path, JSON vs the typed encoding (`ipc.typed`), in one run.

    .venv/bin/python loadtests/bench_delivery.py [--events 20000] [--ssps 2] [--rounds 4]
        [--views 0] [--codec-only]

1. Codec, per event, in process (no sockets): what each encoding costs on the scheduler
   (encode a 1,000-event batch), in the SSP's gateway (parse and shape-check the body, build
   the hub message) and in the hub (unpack the message, get the values, canonical row bytes),
   for today's JSON, the typed MessagePack and CBOR as the SDK speaks it (`dbclient.cbor`),
   over rows of a schemaless table with two links, a datetime, ints and text. Best of 15.
   `hub->shard` is what the SSP pays inside, whatever the wire (row bytes, the batch packed
   for the shard and unpacked there): typed values cost more there than text, the price of
   keeping the types, the same a standalone SSP tailing the changefeed pays.
2. Delivery, end to end over real processes: a database host (`--memory`), `--ssps` SSPs (real
   gunicorn gateways, hubs, one shard each) and this process playing the scheduler's senders
   with the scheduler's own code: one sequential stream of 1,000-event batches (with `seq`)
   per SSP, posted to `/ingest`. JSON: the batch dumped per SSP, as the scheduler did before;
   typed: each event packed once (`scheduler.core.Outbound`) and shared by every SSP's batch.
   events/s = events / time until every SSP answered 200 to the last batch (a 200 means the
   SSP applied it in memory); CPU per event is read from /proc for the SSPs' process groups
   and from this process (the sender). Rounds alternate JSON and typed; medians and ratios
   are printed. Without `--views` the SSPs hold no view, so the figure is the delivery path
   itself (encode, HTTP, gateway, hub, shard apply), not edge publication; views select on an
   int field (`cat = N`) so both encodings do the same engine work (with JSON the links would
   no longer match views that compare them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import cbor2
import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surrealdb import RecordID

from dbclient import Database, DbConfig
from dbclient import cbor as sdk_cbor
from dbclient.fieldtypes import restore_types
from engine import wire
from engine.jsonvalues import json_default
from engine.values import canonical_bytes, pack_value, record_id_text, unpack_value
from ipc import typed
from ipc.body import parse_json, parse_typed
from ipc.messages import request
from ipc.routebodies import normalize_body
from scheduler.core import Outbound
from tests.support.procs import start_db_host
from tests.support.ssp_stack import apply_schema, db_env, start_ssp
from timetext.timestamps import parse_timestamp

SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE thread SCHEMALESS;
DEFINE TABLE comment SCHEMALESS;
"""
BATCH = 1000
CATS = 250
BASE = datetime(2026, 1, 1, tzinfo=UTC)


class Events:
    """Row changes of `comment` rows: links to threads and users, a datetime, ints, text."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seq = 0

    def next(self) -> tuple[int, dict[str, Any]]:
        r = self.rng
        self.seq += 1
        key = f"c{r.randrange(5000)}"
        rid = RecordID("comment", key)
        record = {"id": rid, "thread": RecordID("thread", f"t{r.randrange(500)}"),
                  "author": RecordID("user", f"u{r.randrange(200)}"),
                  "created": BASE + timedelta(seconds=r.randrange(10**7),
                                              microseconds=r.randrange(10**6)),
                  "cat": r.randrange(CATS), "score": r.randrange(100),
                  "body": "a comment of a few words, as people write them", "_00_rv": self.seq}
        op = "CREATE" if r.random() < 0.3 else "UPDATE"
        return self.seq, {"table": "comment", "op": op, "id": record_id_text(rid),
                          "record": record}


# ----------------------------------------------------------------------------- codec


def _per_event(fn: Callable[[], Any], n: int, reps: int = 15) -> float:
    """Microseconds per event of fn (which handles n events), the best of `reps` runs."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def codec_figures() -> list[tuple[str, float, float, float, float]]:
    ev = Events(1)
    batch = [{**e, "seq": s} for s, e in (ev.next() for _ in range(BATCH))]

    def hub_msg(body: Any) -> bytes:
        return msgpack.packb(request("POST /ingest", body), use_bin_type=True)

    # JSON: what the scheduler sent before (rows typed again from field definitions: none in
    # a schemaless table, so only the id).
    def json_enc() -> bytes:
        return json.dumps(batch, default=json_default, separators=(",", ":")).encode()
    jb = json_enc()

    def json_gw() -> bytes:
        return hub_msg(normalize_body("POST /ingest", parse_json(jb)))
    jm = json_gw()

    def json_hub() -> None:
        for e in msgpack.unpackb(jm, raw=False, strict_map_key=False)["body"]:
            canonical_bytes(restore_types(e["table"], e["id"], e["record"], {},
                                          parse_datetime=parse_timestamp))

    # typed MessagePack: what the scheduler sends now.
    def typed_enc() -> bytes:
        return typed.encode_batch([Outbound(e["seq"], e).wire() for e in batch])
    tb = typed_enc()

    def typed_gw() -> bytes:
        normalize_body("POST /ingest", parse_typed(tb))
        return hub_msg(tb)
    tm = typed_gw()

    def typed_hub() -> None:
        for e in typed.decode(msgpack.unpackb(tm, raw=False, strict_map_key=False)["body"], wire.ext_hook):
            canonical_bytes(wire.check_record(e["table"], e["id"], e["record"]))

    # CBOR as the SDK speaks it (tags left as cbor2 tags for the shape check).
    def cbor_enc() -> bytes:
        return sdk_cbor.encode(batch)
    cb = cbor_enc()

    def cbor_gw() -> bytes:
        normalize_body("POST /ingest", cbor2.loads(cb))
        return hub_msg(cb)
    cm = cbor_gw()

    def cbor_hub() -> None:
        for e in sdk_cbor.decode(msgpack.unpackb(cm, raw=False, strict_map_key=False)["body"]):
            canonical_bytes(wire.check_record(e["table"], e["id"], e["record"]))

    # Inside the SSP, whatever the wire: the hub's row bytes and its batch to the shard, which
    # unpacks it (typed values cost more here than text: the price of keeping the types).
    def inside(records: list[dict[str, Any]]) -> Callable[[], Any]:
        payload = {"events": [["comment", "UPDATE", record_id_text(r["id"]), r]
                              for r in records]}

        def run() -> None:
            for r in records:
                canonical_bytes(r)
            unpack_value(pack_value(payload))
        return run

    json_rows = [restore_types(e["table"], e["id"], e["record"], {},
                                          parse_datetime=parse_timestamp)
                 for e in msgpack.unpackb(jm, raw=False, strict_map_key=False)["body"]]
    typed_rows = [e["record"] for e in typed.decode(tb, wire.ext_hook)]
    out = []
    for name, fns, size in (("json", (json_enc, json_gw, json_hub, inside(json_rows)), len(jb)),
                            ("typed msgpack", (typed_enc, typed_gw, typed_hub,
                                               inside(typed_rows)), len(tb)),
                            ("cbor (sdk)", (cbor_enc, cbor_gw, cbor_hub, inside(typed_rows)),
                             len(cb))):
        enc, gw, hub, ssp = (_per_event(f, BATCH) for f in fns)
        out.append((f"{name} ({size / BATCH:.0f} B/event)", enc, gw, hub, ssp))
    return out


# ----------------------------------------------------------------------------- delivery


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of process group pgid
    (an SSP: hub, shard, gunicorn master and worker)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


async def deliver(http: aiohttp.ClientSession, urls: list[str], events: Events, n: int,
                  encoding: str) -> float:
    """Post n events in batches to every SSP, one sequential sender per SSP; seconds taken."""
    batches = []
    for _ in range(0, n, BATCH):
        batches.append([Outbound(*events.next()) for _ in range(BATCH)])

    async def sender(url: str) -> None:
        for batch in batches:
            if encoding == "typed":
                data = typed.encode_batch([o.wire() for o in batch])
                ctype = typed.CONTENT_TYPE
            else:
                data = json.dumps([{**o.event, "seq": o.seq} for o in batch],
                                  default=json_default, separators=(",", ":")).encode()
                ctype = "application/json"
            while True:
                async with http.post(url + "/ingest", data=data,
                                     headers={"Content-Type": ctype}) as r:
                    text = await r.text()
                    if r.status == 200:
                        break
                    if r.status != 503:
                        raise RuntimeError(f"{url}: {r.status} {text[:300]}")
                await asyncio.sleep(0.01)  # slots or publication full: as the scheduler

    t = time.perf_counter()
    await asyncio.gather(*(sender(u) for u in urls))
    return time.perf_counter() - t


@dataclass
class Round:
    rate: float  # events/s per SSP (wall clock)
    sender_us: float  # CPU µs per event in this process (the scheduler's side), all SSPs
    ssp_us: float  # CPU µs per event per SSP (gateway + hub + shard)


async def delivery_figures(args: argparse.Namespace) -> dict[str, list[Round]]:
    rounds: dict[str, list[Round]] = {"json": [], "typed": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        host = start_db_host(tmp)
        ns, name = "bench", "delivery_" + uuid.uuid4().hex[:6]
        db = Database(DbConfig.from_env(db_env(host, ns, name)))
        ssps = []
        try:
            await db.connect()
            await db.query(SCHEMA)
            await db.query("CREATE user:u0 SET name = 'u0'")
            apply_schema(host, ns, name, "changefeed")
            # changefeed: the SSP does not wait for commit visibility of posted events (as the
            # scheduler's SSPs run); no rows are written, so its own tail reads nothing.
            ssps = [start_ssp(tmp, host, ns, name, SVC_SSP_SHARDS="1",
                              SVC_INGEST_TRANSPORT="changefeed", SVC_SCHEMA_POLL_SECS="0")
                    for _ in range(args.ssps)]
            for s in ssps:
                await s.wait_ready(timeout=600)
            urls = [f"http://127.0.0.1:{s.port}" for s in ssps]
            pgids = [s.process.proc.pid for s in ssps if s.process.proc is not None]
            async with aiohttp.ClientSession(headers={"Authorization": "Bearer bench"},
                                             timeout=aiohttp.ClientTimeout(total=600)) as http:
                for url in urls:
                    for c in range(args.views):
                        body = {"id": f"query:c{c}", "clientId": "bench", "ttl": "1h",
                                "surql": f"SELECT * FROM comment WHERE cat = {c % CATS}",
                                "params": {"auth_id": "user:u0"}}
                        async with http.post(url + "/view/register", json=body) as r:
                            if r.status != 200:
                                raise RuntimeError(f"register: {r.status} {await r.text()}")
                events = Events(7)
                await deliver(http, urls, events, 2 * BATCH, "json")  # warm up both paths
                await deliver(http, urls, events, 2 * BATCH, "typed")
                for _ in range(args.rounds):
                    for enc in ("json", "typed"):
                        cpu0, ssp0 = time.process_time(), sum(map(group_cpu, pgids))
                        secs = await deliver(http, urls, events, args.events, enc)
                        cpu1, ssp1 = time.process_time(), sum(map(group_cpu, pgids))
                        r = Round(args.events / secs, (cpu1 - cpu0) / args.events * 1e6,
                                  (ssp1 - ssp0) / len(pgids) / args.events * 1e6)
                        print(f"  round {enc:5s}: {r.rate:7,.0f} events/s per SSP, CPU per "
                              f"event: sender {r.sender_us:5.1f} µs, SSP {r.ssp_us:5.1f} µs")
                        rounds[enc].append(r)
        finally:
            for s in ssps:
                s.stop()
            await db.close()
            host.process.stop()
    return rounds


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--ssps", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--views", type=int, default=0,
                   help="views per SSP (cat = N): adds engine and edge publication work")
    p.add_argument("--codec-only", action="store_true")
    args = p.parse_args()
    print(f"codec, µs per event (batches of {BATCH}):")
    print(f"  {'encoding':28s} {'scheduler':>10s} {'gateway':>9s} {'hub':>7s} {'wire total':>11s}"
          f" {'hub->shard':>11s}")
    for name, enc, gw, hub, ssp in codec_figures():
        print(f"  {name:28s} {enc:10.2f} {gw:9.2f} {hub:7.2f} {enc + gw + hub:11.2f} {ssp:11.2f}")
    if args.codec_only:
        return 0
    print(f"\ndelivery: {args.events} events per round to {args.ssps} SSP(s), "
          f"{args.views} views each")
    rounds = await delivery_figures(args)
    med = {enc: Round(*(statistics.median(getattr(r, k) for r in rs)
                        for k in ("rate", "sender_us", "ssp_us")))
           for enc, rs in rounds.items()}
    print(f"\n  {'medians':8s} {'events/s per SSP':>17s} {'sender CPU µs/event':>20s} "
          f"{'SSP CPU µs/event':>17s}")
    for enc, m in med.items():
        print(f"  {enc:8s} {m.rate:17,.0f} {m.sender_us:20.1f} {m.ssp_us:17.1f}")
    j, t = med["json"], med["typed"]
    print(f"  typed / JSON: events/s {t.rate / j.rate:.2f}x, sender CPU "
          f"{t.sender_us / j.sender_us:.2f}x, SSP CPU {t.ssp_us / j.ssp_us:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
