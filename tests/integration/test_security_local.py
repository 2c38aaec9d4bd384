"""Attacker-side tests that need a stack of their own (SECURITY.md): a scheduler run without
`SVC_AUTH_SECRET` (development, where anyone on the private network may register an SSP) and
flooded with fake registrations, and SSPs whose run directory another local user could reach.
Real processes on loopback ports, always stopped."""

from __future__ import annotations

import glob
import json
import os
import stat
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.admin_stack import BREAKGLASS, start_scheduler
from tests.support.procs import DbHost, ManagedProcess, base_env, free_port
from tests.support.ssp_stack import APP_SCHEMA, apply_schema, db_env, root_db, wait_for

pytestmark = pytest.mark.slow


async def _json(http: aiohttp.ClientSession, method: str, url: str, **kw: Any
                ) -> tuple[int, Any]:
    async with http.request(method, url, **kw) as r:
        return r.status, await r.json(content_type=None)


async def test_without_a_secret_a_registration_flood_is_capped_evicted_and_costs_one_incident(
        host: DbHost, tmp_path: Path) -> None:
    """Medium: 41 fake registrations froze the replica, were never evicted and opened 41
    incidents (the store keeps 2,000, so a flood could flush the history)."""
    ns = "open_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await root.query("DEFINE TABLE post SCHEMALESS PERMISSIONS FULL")
    await root.close()
    sched = start_scheduler(tmp_path, host, ns, env={"SVC_AUTH_SECRET": ""},
                            bootstrap_timeout_secs=4)
    # a tarpit: answers every health poll with `bootstrapping`, for ever
    hits: list[str] = []

    async def health(req: web.Request) -> web.Response:
        hits.append(req.path)
        return web.json_response({"status": "bootstrapping"})

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    tarpit = free_port()
    await web.TCPSite(runner, "127.0.0.1", tarpit).start()
    dead = free_port()  # nothing listens there
    try:
        async with aiohttp.ClientSession() as http:
            statuses = []
            for i in range(40):
                url = f"http://127.0.0.1:{tarpit if i % 2 else dead}"
                status, _ = await _json(http, "POST", sched.url + "/ssp/register",
                                        json={"ssp_id": f"fake-{i}", "url": url})
                statuses.append(status)
            assert statuses[:32] == [202] * 32 and statuses[32:] == [503] * 8
            status, _ = await _json(http, "POST", sched.url + "/ingest", json={
                "table": "post", "op": "CREATE", "id": "post:1", "record": {"id": "post:1"}})
            assert status == 200
            _, snap = await _json(http, "GET", sched.url + "/health/snapshot")
            assert snap["frozen"] is True  # held for the fakes' bootstrap

            async def gone() -> bool:
                _, m = await _json(http, "GET", sched.url + "/metrics")
                return m["scheduler"]["total_ssps"] == 0

            # unanswered URLs go after the bootstrap timeout (4 s here), tarpits are flagged
            # then and removed one grace period later
            await wait_for(gone, 60, "every fake SSP evicted")
            assert hits  # the tarpits were polled, and answered

            _, snap = await _json(http, "GET", sched.url + "/health/snapshot")
            assert snap["frozen"] is False
            status, s = await _json(http, "POST", sched.admin + "/admin/api/session",
                                    json={"password": BREAKGLASS})
            assert status == 200
            _, inc = await _json(http, "GET", sched.admin + "/admin/api/incidents",
                                 headers={"Authorization": f"Bearer {s['token']}"})
            kinds = sorted(i["kind"] for i in inc["incidents"])
            assert kinds == ["scheduler_started", "ssp_unverified"], kinds
            (agg,) = [i for i in inc["incidents"] if i["kind"] == "ssp_unverified"]
            assert agg["event_count"] >= 32
    finally:
        await runner.cleanup()
        code = sched.process.stop()
        assert code == 0, sched.process.log_text()[-3000:]


def _ssp(tmp: Path, host: DbHost, ns: str, port: int, **env: str) -> ManagedProcess:
    full = base_env(**db_env(host, ns, ns), SVC_SSP_LISTEN_ADDR=f"127.0.0.1:{port}",
                    SVC_SSP_SHARDS="1", SVC_INGEST_TRANSPORT="changefeed",
                    SVC_AUTH_SECRET="local-test-secret", **env)
    return ManagedProcess("svc-ssp", [sys.executable, "-m", "ssp"], full,
                          tmp / f"svc-ssp-{port}.log").start()


def _shard_socket_dir(pid: int) -> str:
    """The directory of the socket the SSP `pid` gave its shard (the shard's `--endpoint`)."""
    for stat_file in glob.glob("/proc/[0-9]*/stat"):
        try:
            ppid = int(Path(stat_file).read_text().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            argv = Path(stat_file).with_name("cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
        if b"--endpoint" in argv:
            endpoint = argv[argv.index(b"--endpoint") + 1].decode()
            return os.path.dirname(endpoint.removeprefix("ipc://"))
    raise AssertionError(f"no shard process of SSP {pid}")


async def _http_ready(port: int, proc: ManagedProcess) -> None:
    async with aiohttp.ClientSession() as http:
        async def ready() -> bool:
            assert proc.alive(), proc.log_text()[-3000:]
            try:
                async with http.get(f"http://127.0.0.1:{port}/health") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(ready, 90, "the SSP ready")


async def test_the_ssp_run_dir_is_private_and_a_foreign_one_refuses_the_start(
        host: DbHost, tmp_path: Path) -> None:
    """Low: the run directory was `/tmp/svc-ssp-<id>` made with `exist_ok` (another local
    user could make it first, and reach the hub's sockets, which skip the bearer check), and a
    deep path fell back to abstract sockets (no file permissions at all)."""
    ns = "rundir_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await root.query(APP_SCHEMA)
    await root.close()
    apply_schema(host, ns, ns)
    # 1. no SVC_SSP_RUN_DIR: a name nobody can guess, private, removed at exit
    ssp_id = "rd-" + uuid.uuid4().hex[:6]
    port = free_port()
    proc = _ssp(tmp_path, host, ns, port, SVC_SSP_ID=ssp_id)
    try:
        await _http_ready(port, proc)
        tmp = tempfile.gettempdir()
        assert not os.path.exists(f"{tmp}/svc-ssp-{ssp_id}")
        (made,) = glob.glob(f"{tmp}/svc-ssp-{ssp_id}-*")
        st = os.stat(made)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        assert not any("@svc-ssp" in line for line in open("/proc/net/unix"))
    finally:
        assert proc.stop() == 0, proc.log_text()[-3000:]
    assert not os.path.exists(made)
    # 2. a directory of ours that others may write to is made private before use
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    port = free_port()
    proc = _ssp(tmp_path, host, ns, port, SVC_SSP_RUN_DIR=str(loose))
    try:
        await _http_ready(port, proc)
        assert stat.S_IMODE(os.stat(loose).st_mode) == 0o700
    finally:
        assert proc.stop() == 0
    # 3. a run dir too deep for a Unix socket address: the sockets go to a private short
    # directory beside it, not to the abstract namespace (which has no file permissions)
    deep = tmp_path / ("deep-" + "d" * 90)
    port = free_port()
    proc = _ssp(tmp_path, host, ns, port, SVC_SSP_RUN_DIR=str(deep))
    try:
        await _http_ready(port, proc)
        # This SSP's own directory, from its shard's endpoint: SSPs of other tests running
        # at the same time make such directories too.
        short = _shard_socket_dir(proc.proc.pid)
        assert short.startswith(f"{tempfile.gettempdir()}/svc-ipc-"), short
        st = os.stat(short)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        assert any(name.endswith(".sock") for name in os.listdir(short))
        assert not any("@svc-ssp" in line for line in open("/proc/net/unix"))
    finally:
        assert proc.stop() == 0, proc.log_text()[-3000:]
    assert not os.path.exists(short)
    # 4. a directory another user made first (chown needs root, as these tests run): refused
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    port = free_port()
    proc = _ssp(tmp_path, host, ns, port, SVC_SSP_RUN_DIR=str(foreign))

    async def exited() -> bool:
        return not proc.alive()

    await wait_for(exited, 60, "the SSP to refuse its run dir")
    assert proc.stop() == 2
    assert "belongs to another user" in proc.log_text()
    assert json.dumps(os.listdir(foreign)) == "[]"  # no socket was put there


async def test_the_database_holds_an_ingest_only_credential_that_no_dump_carries(
        host: DbHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """High: with transport `http` the master secret sat in a database param
    (`$_00_ingest_secret`): readable with the VIEWER role, printed by `INFO FOR DB`, and so
    written into every backup dump. The param now holds a credential that opens an SSP's
    `/ingest` and `/view/unregister` only, and no dump carries it.

    The embedded host runs no `http::*` functions, so `svc schema apply --transport http`
    refuses it at its probe: the apply runs in-process with the probe alone left out; the
    database, the viewer session and the export are real."""
    import gzip

    from surrealdb import AsyncSurreal

    from backup.dumpformat import read_dump
    from backup.exporter import export_database
    from dbclient import Database, DbConfig
    from ipc.peerauth import ingest_credential
    from svccli import schema
    from svccli.settings import resolve_settings
    from tests.support.dbhost_clients import close

    secret = "db-param-test-secret-" + uuid.uuid4().hex
    ns = "param_" + uuid.uuid4().hex[:8]
    env = {**db_env(host, ns, ns), "SVC_AUTH_SECRET": secret}
    root = Database(DbConfig.from_env(env))
    await root.connect()
    try:
        await root.query("DEFINE TABLE post SCHEMALESS PERMISSIONS FULL; "
                         "DEFINE PARAM $_00_ingest_secret VALUE $s PERMISSIONS NONE; "  # older
                         "DEFINE USER watcher ON DATABASE PASSWORD 'watch-pw' ROLES VIEWER",
                         {"s": secret})

        async def no_probe(db: Any, url: str) -> None:
            return None

        monkeypatch.setattr(schema, "probe_http_functions", no_probe)
        settings = resolve_settings(env, transport_flag="http", project_flag=None,
                                    ingest_url_flag="http://127.0.0.1:9/ingest",
                                    retention_flag=None, cwd=tmp_path)
        await schema.apply_schema(root, settings)
        # what a viewer-role database user reads
        viewer = AsyncSurreal(host.ws_url)
        await viewer.signin({"namespace": ns, "database": ns, "username": "watcher",
                             "password": "watch-pw"})
        await viewer.use(ns, ns)
        try:
            info = json.dumps(await viewer.query("INFO FOR DB"), default=str)
        finally:
            await close(viewer)
        assert secret not in info
        assert "_00_ingest_secret" not in info
        assert ingest_credential(secret) in info  # the events need it: ingest-only
        # a dump of the database
        chunks: list[bytes] = []
        await export_database(root, chunks.append, backup_id="b1")
        raw = gzip.decompress(b"".join(chunks))
        assert secret.encode() not in raw
        assert ingest_credential(secret).encode() not in raw
        dump = tmp_path / "dump.cbor.gz"
        dump.write_bytes(b"".join(chunks))
        (schema_rec,) = [r for r in read_dump(dump) if r.get("t") == "schema"]
        assert set(schema_rec["db"]["params"]) == {"_00_ingest_url", "_00_unregister_url"}
    finally:
        await root.close()


async def test_revocations_outlive_a_restart_and_a_new_break_glass_password_ends_old_tokens(
        host: DbHost, tmp_path: Path) -> None:
    """Medium: minted tokens and sessions could not be revoked by id, and changing the
    break-glass password left its sessions (8 h) and the tokens they minted (365 days) working.
    Also: a configured reverse proxy's `X-Forwarded-For` is believed (and only then, see
    test_security's forged-header test), so the per-address limit counts the real client."""
    ns = "bg_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await root.query("DEFINE TABLE post SCHEMALESS PERMISSIONS FULL")
    await root.close()
    proxy = "127.0.0.5"
    sched = start_scheduler(tmp_path, host, ns, env={"SVC_ADMIN_TRUSTED_PROXIES": proxy})
    admin = sched.admin + "/admin/api"

    def auth(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def me(http: aiohttp.ClientSession, token: str) -> int:
        async with http.get(admin + "/me", headers=auth(token)) as r:
            return r.status

    async def sign_in(http: aiohttp.ClientSession, password: str,
                      forwarded: str | None = None) -> tuple[int, Any]:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        return await _json(http, "POST", admin + "/session", json={"password": password},
                           headers=headers)

    try:
        async with aiohttp.ClientSession() as http:
            status, s = await sign_in(http, BREAKGLASS)
            assert status == 200
            session = s["token"]
            minted = {}
            for label in ("kept", "gone"):
                status, m = await _json(http, "POST", admin + "/tokens", headers=auth(session),
                                        json={"label": label, "scope": "read", "ttl_days": 30})
                assert status == 201
                minted[label] = m["token"]
            _, gone = await _json(http, "GET", admin + "/me", headers=auth(minted["gone"]))
            async with http.delete(admin + f"/tokens/{gone['id']}",
                                   headers=auth(session)) as r:
                assert r.status == 204
            assert await me(http, minted["gone"]) == 401

        # behind the configured proxy: the forwarded client is the one the limit counts
        proxied = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(proxy, 0)))
        async with proxied as http:
            for i in range(10):
                status, _ = await sign_in(http, f"wrong-{i}", "203.0.113.7")
                assert status == 401
            status, _ = await sign_in(http, BREAKGLASS, "203.0.113.7")
            assert status == 401  # that client used up its failures
            status, _ = await sign_in(http, BREAKGLASS, "203.0.113.8")
            assert status == 200  # another client behind the same proxy is not blocked

        # a restart: the revocation by id holds, the live session and token still work
        assert sched.process.stop() == 0
        sched.restart()
        async with aiohttp.ClientSession() as http:
            assert [await me(http, t) for t in (session, minted["kept"], minted["gone"])] \
                == [200, 200, 401]
            _, listing = await _json(http, "GET", admin + "/tokens", headers=auth(session))
            by_label = {t["label"]: t for t in listing["tokens"] if t["kind"] == "minted"}
            assert by_label["gone"]["revoked"] and not by_label["kept"]["revoked"]

        # a new break-glass password: the old password's session and its tokens stop
        assert sched.process.stop() == 0
        sched.env["SVC_ADMIN_PASSWORD"] = "a-new-break-glass-password"
        sched.restart()
        async with aiohttp.ClientSession() as http:
            assert [await me(http, t) for t in (session, minted["kept"])] == [401, 401]
            status, _ = await sign_in(http, BREAKGLASS)
            assert status == 401
            status, s2 = await sign_in(http, "a-new-break-glass-password")
            assert status == 200 and await me(http, s2["token"]) == 200

        # no password at all: break-glass is off (there is no default), every try is the
        # same 401, and the sessions it made stop
        assert sched.process.stop() == 0
        del sched.env["SVC_ADMIN_PASSWORD"]
        sched.restart()
        async with aiohttp.ClientSession() as http:
            _, cfg = await _json(http, "GET", admin + "/config")
            assert cfg["breakglass_available"] is False
            for tried in ("a-new-break-glass-password", "", BREAKGLASS):
                status, body = await sign_in(http, tried)
                assert status == 401, body
            assert await me(http, s2["token"]) == 401
    finally:
        code = sched.process.stop()
        assert code == 0, sched.process.log_text()[-3000:]
