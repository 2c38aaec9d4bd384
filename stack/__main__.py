"""`ops/run`: the database host and the service processes, in the foreground, until Ctrl-C.

Cluster mode (the default, `--ssps N`, N >= 1, default 1): database host, `svc schema apply`,
`svc-scheduler` (config written to `<data>/scheduler/scheduler.yml`, or the stack's temporary
directory with `--memory`, listening on `--scheduler-bind`, default 127.0.0.1:9667, with its
admin plane on `--admin-bind`, default 127.0.0.1:9668) and N SSPs in scheduler mode on
consecutive ports from the `--ssp-bind` port (default 8667), ids `ssp-<port>`. Without
`SVC_ADMIN_PASSWORD` a break-glass password is generated for the run and printed once.
`--standalone`: database host, `svc schema apply`, one standalone SSP (no scheduler, no
admin plane). `--objstore`: also a local S3 server for backups (`rclone serve s3` on
`--objstore-bind`, default 127.0.0.1:9670, data in `<data>/objstore`), started before the
services, with
`OBJSTORE_*` given to the scheduler and the SSPs. `--cloud`: also the hosted platform's
control plane (`svc-cloud` on `--cloud-bind`, default 127.0.0.1:9680, its state in namespace
`svc_cloud` of the same database); without `SVC_CLOUD_KEYRING` / `SVC_CLOUD_FINGERPRINT_KEY`
development keys are made once and kept in `<data>/cloud/dev-keys.json` (mode 0600; per run
with `--memory`), so the vault stays readable across runs.

Every process is supervised (`stack.supervisor`): one that dies, by a signal too, is relaunched
with backoff and a crash budget; an SSP's exits 2-6 are requested relaunches. The database host
with `--data` is relaunched like the others (surrealkv keeps what was committed across
`kill -9`); with `--memory` its data dies with it, so its death stops the whole stack with a
message saying so. Temporary state (`stack.rundir`: SSP run dirs, the `--memory` scheduler's
files and database host's scratch storage) is removed when the stack stops, and left-overs of a
killed stack on the next start."""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from pathlib import Path

import yaml

from backup.config import DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY
from backup.localserver import serve_argv, serve_env
from stack import rundir
from stack.config import StackConfig, parse
from stack.supervisor import RELAUNCH_CODES, Child, Supervisor

log = logging.getLogger("stack")

MEMORY_DB_LOST = ("It kept the database in memory only (--memory): every table, row and view "
                  "is gone with it, so the services cannot go on. Start the stack again, or "
                  "use --data DIR for a database that survives a crash.")


def build_children(cfg: StackConfig, env: dict[str, str], run_root: Path) -> list[Child]:
    """The processes of the local stack, in start order. `run_root`: the stack's temporary
    directory (stack.rundir)."""
    children: list[Child] = []
    child_env = dict(env)
    child_env["SVC_DB_USER"] = cfg.db_user
    child_env["SVC_DB_PASS"] = cfg.db_pass
    transport = cfg.transport or ("changefeed" if cfg.starts_host else None)
    if cfg.starts_host:
        argv = [sys.executable, "-m", "dbhost", "--bind", cfg.db_bind]
        db_env = child_env
        if cfg.data_dir is None:
            argv.append("--memory")
            # Its scratch storage (dbhost.scratch) lives in the stack's own directory: a host
            # killed with SIGKILL cannot remove it, the stack (which stops with it) does.
            scratch_base = run_root / "db-scratch"
            scratch_base.mkdir(parents=True, exist_ok=True)
            db_env = {**child_env, "TMPDIR": str(scratch_base)}
        else:
            cfg.data_dir.mkdir(parents=True, exist_ok=True)
            argv += ["--path", str(cfg.data_dir)]
        if transport == "http":
            # The embedded build has no http::* functions; the Node build has, and may reach
            # the ingest listener only (dbhost.nodeengine).
            argv += ["--engine", "node", "--allow-net", cfg.ingest_target]
        # surrealkv keeps what was committed across kill -9: a --data host is relaunched; a
        # memory-only one cannot be (an empty database under running services).
        children.append(Child("svc-db", argv, db_env, health_url=f"http://{cfg.db_bind}/health",
                              relaunch=cfg.data_dir is not None, fatal_note=MEMORY_DB_LOST))
        child_env["SVC_DB_URL"] = cfg.effective_db_url
    if transport is not None:
        child_env["SVC_INGEST_TRANSPORT"] = transport
    if transport == "http":
        child_env["SVC_INGEST_URL"] = f"http://{cfg.ingest_target}/ingest"
    if cfg.objstore:
        children.append(objstore_child(cfg, child_env, run_root))
    if cfg.cluster:
        children.append(Child("svc schema apply",
                              [sys.executable, "-m", "svccli", "schema", "apply"],
                              child_env, oneshot=True))
        children.append(scheduler_child(cfg, child_env, run_root))
        for i, bind in enumerate(cfg.ssp_binds()):
            children.append(cluster_ssp_child(cfg, child_env, i, bind, run_root))
    elif cfg.start_ssp:
        children.append(Child("svc schema apply",
                              [sys.executable, "-m", "svccli", "schema", "apply"],
                              child_env, oneshot=True))
        ssp_env = dict(child_env)
        ssp_env.setdefault("SVC_SSP_LISTEN_ADDR", cfg.ssp_bind)
        ssp_env.setdefault("SVC_SSP_RUN_DIR", str(run_root / "ssp"))
        if cfg.data_dir is not None:
            ssp_env.setdefault("SVC_SSP_SNAPSHOT_DIR", str(cfg.data_dir / "ssp"))
        children.append(Child("svc-ssp", [sys.executable, "-m", "ssp"], ssp_env,
                              health_url=f"http://{cfg.ssp_bind}/health",
                              relaunch_codes=RELAUNCH_CODES))
    if cfg.cloud:
        children.append(cloud_child(cfg, child_env, run_root))
    return children


def dev_cloud_keys(cfg: StackConfig, env: dict[str, str], run_root: Path) -> dict[str, str]:
    """The vault's key ring and fingerprint key for a local run: the environment's, else
    development keys made once and kept beside the data (a key ring made per run would leave
    the vault of `./data` unreadable on the next one)."""
    if env.get("SVC_CLOUD_KEYRING") and env.get("SVC_CLOUD_FINGERPRINT_KEY"):
        return {}
    path = (run_root if cfg.data_dir is None else cfg.data_dir) / "cloud" / "dev-keys.json"
    if path.is_file():
        return dict(json.loads(path.read_text()))
    # the key ring's `id:base64key` entry of a 32-byte key (cloud.crypto), written here: the
    # platform imports this module to start deployed stacks, so it cannot import the platform
    keys = {"SVC_CLOUD_KEYRING": f"dev1:{base64.b64encode(os.urandom(32)).decode()}",
            "SVC_CLOUD_FINGERPRINT_KEY": base64.b64encode(os.urandom(32)).decode()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(keys, f)
    return keys


def cloud_child(cfg: StackConfig, env: dict[str, str], run_root: Path) -> Child:
    """`svc-cloud` on `--cloud-bind`, its state in the stack's database (namespace
    `svc_cloud`), local repositories allowed (development)."""
    cloud_env = dict(env)
    cloud_env.setdefault("SVC_CLOUD_DB_URL", cfg.effective_db_url)
    cloud_env["SVC_CLOUD_BIND"] = cfg.cloud_bind
    cloud_env.setdefault("SVC_CLOUD_LOCAL_REPOS", "true")
    cloud_env.update(dev_cloud_keys(cfg, env, run_root))
    return Child("svc-cloud", [sys.executable, "-m", "cloud"], cloud_env,
                 health_url=f"http://{cfg.cloud_bind}/v1/health")


def objstore_child(cfg: StackConfig, env: dict[str, str], run_root: Path) -> Child:
    """`--objstore`: `rclone serve s3` over `<data>/objstore` (the stack's temporary
    directory with --memory) with the keys of OBJSTORE_ACCESS_KEY / OBJSTORE_SECRET_KEY, else
    the documented local defaults; the children started after it get OBJSTORE_* pointing at
    it (the variables already set are kept)."""
    root = (run_root if cfg.data_dir is None else cfg.data_dir) / "objstore"
    root.mkdir(parents=True, exist_ok=True)
    access = env.get("OBJSTORE_ACCESS_KEY") or DEFAULT_ACCESS_KEY
    secret = env.get("OBJSTORE_SECRET_KEY") or DEFAULT_SECRET_KEY
    env["OBJSTORE_ENDPOINT"] = f"http://{cfg.objstore_bind}"
    env["OBJSTORE_ACCESS_KEY"] = access
    env["OBJSTORE_SECRET_KEY"] = secret
    # Any HTTP answer (an unsigned GET is refused) means the server is up.
    return Child("objstore (rclone serve s3)", serve_argv(root, cfg.objstore_bind),
                 {**env, **serve_env(access, secret)}, health_url=f"http://{cfg.objstore_bind}/",
                 ready=lambda status, body: True)


def scheduler_dir(cfg: StackConfig, run_root: Path) -> Path:
    """Where the scheduler's config, replica and WAL live: `<data>/scheduler`, or
    `scheduler/` in the stack's temporary directory with --memory (removed on exit; kept
    across relaunches of the scheduler, whose WAL holds every event it acknowledged)."""
    if cfg.data_dir is None:
        return run_root / "scheduler"
    return cfg.data_dir / "scheduler"


def _scheduler_ready(status: int, body: bytes) -> bool:
    """The scheduler's /health is 503 until an SSP is ready: wait for its own state."""
    try:
        return bool(json.loads(body).get("scheduler", {}).get("state") == "ready")
    except (ValueError, AttributeError):
        return False


def scheduler_child(cfg: StackConfig, env: dict[str, str], run_root: Path) -> Child:
    """`svc-scheduler` with a config written next to its data. Database credentials are not
    written to the file: the scheduler reads them from SVC_DB_* (env overrides win). It is
    relaunched like every child; after a restart the SSPs re-register (heartbeat 404, exit 3)."""
    where = scheduler_dir(cfg, run_root)
    where.mkdir(parents=True, exist_ok=True)
    host, _, port = cfg.scheduler_bind.rpartition(":")
    doc = {"ingest_host": host, "ingest_port": int(port),
           "replica_db_path": str(where / "replica.sqlite3"), "wal_path": str(where / "wal")}
    path = where / "scheduler.yml"
    path.write_text(yaml.safe_dump(doc))
    sched_env = dict(env)
    admin_host, _, admin_port = cfg.admin_bind.rpartition(":")
    sched_env.setdefault("SVC_ADMIN_HOST", admin_host)
    sched_env["SVC_ADMIN_PORT"] = admin_port
    sched_env["SVC_ADMIN_PASSWORD"] = cfg.admin_password
    # Exit 4: a restart asked through the admin API (`scheduler/restart {mode: restart}`),
    # relaunched at once and not counted as a crash.
    return Child("svc-scheduler", [sys.executable, "-m", "scheduler", "--config", str(path)],
                 sched_env, health_url=f"http://{cfg.scheduler_bind}/health",
                 ready=_scheduler_ready, relaunch_codes=frozenset({4}))


def cluster_ssp_child(cfg: StackConfig, env: dict[str, str], index: int, bind: str,
                      run_root: Path) -> Child:
    """SSP number `index` in scheduler mode; exits 2-6 are requested relaunches."""
    ssp_env = dict(env)
    ssp_env["SVC_SCHEDULER_URL"] = f"http://{cfg.scheduler_bind}"
    ssp_env["SVC_SSP_LISTEN_ADDR"] = bind
    port = bind.rpartition(":")[2]
    ssp_env["SVC_SSP_ID"] = f"ssp-{port}"  # stable across relaunches: the scheduler replaces it
    # Its own ipc sockets (SVC_SSP_RUN_DIR from the environment would be shared by all).
    ssp_env["SVC_SSP_RUN_DIR"] = str(run_root / f"ssp-{port}")
    if cfg.data_dir is not None:
        ssp_env["SVC_SSP_SNAPSHOT_DIR"] = str(cfg.data_dir / f"ssp-{port}")
    return Child(f"svc-ssp {index + 1}", [sys.executable, "-m", "ssp"], ssp_env,
                 health_url=f"http://{bind}/health", relaunch_codes=RELAUNCH_CODES)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ops/run %(levelname)s %(message)s")
    env = dict(os.environ)
    cfg = parse(sys.argv[1:] if argv is None else argv, env)
    rundir.sweep()
    run_root = rundir.create()
    try:
        return _run(cfg, env, run_root)
    finally:
        rundir.remove(run_root)


def _run(cfg: StackConfig, env: dict[str, str], run_root: Path) -> int:
    children = build_children(cfg, env, run_root)
    if cfg.dev_credentials and cfg.starts_host:
        log.warning("SVC_DB_USER/SVC_DB_PASS not set: the database root user is root/root "
                    "(local development only)")

    def announce() -> None:
        lines = ["", "service is up:"]
        if cfg.starts_host:
            where = "memory only" if cfg.data_dir is None else str(cfg.data_dir)
            lines.append(f"  database host   http://{cfg.db_bind}  (SDK: ws://{cfg.db_bind}/rpc; data: {where})")
        else:
            lines.append(f"  database        {cfg.effective_db_url} (external, SVC_DB_URL)")
        if cfg.cluster:
            lines.append(f"  scheduler       http://{cfg.scheduler_bind}  (POST /ingest, /view/register; "
                         "GET /health, /metrics)")
            for i, bind in enumerate(cfg.ssp_binds()):
                lines.append(f"  SSP {i + 1:<11} http://{bind}  (GET /health, /info)")
            lines.append(f"  admin           http://{cfg.admin_bind}/admin/  (dashboard, "
                         "/admin/api, MCP at /admin/api/mcp)")
            if cfg.admin_password_generated:
                lines.append(f"    sign in with the break-glass password {cfg.admin_password}"
                             " (generated for this run; set SVC_ADMIN_PASSWORD to choose one), "
                             "or as an app user added with `svc admin add`")
            else:
                lines.append("    sign in with SVC_ADMIN_PASSWORD (break-glass), or as an app "
                             "user added with `svc admin add`")
        elif cfg.start_ssp:
            lines.append(f"  SSP             http://{cfg.ssp_bind}  (GET /health, /info; POST /view/register)")
        if cfg.objstore:
            lines.append(f"  object storage  http://{cfg.objstore_bind}  (S3 for backups; "
                         "POST /admin/api/backups, or /backup/create)")
        if cfg.cloud:
            lines.append(f"  cloud           http://{cfg.cloud_bind}  (platform REST API /v1, "
                         f"MCP at http://{cfg.cloud_bind}/v1/mcp)")
            lines.append(f"    start with: svc cloud --api http://{cfg.cloud_bind} signup "
                         "you@example.com, then svc cloud login you@example.com")
        lines.append("Ctrl-C stops everything.")
        print("\n".join(lines), flush=True)

    if not children:
        announce()
    return Supervisor(children).run(on_ready=announce)


if __name__ == "__main__":
    sys.exit(main())
