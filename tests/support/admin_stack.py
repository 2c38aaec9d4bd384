"""A real cluster for admin-plane tests and the admin benchmark: `svc-scheduler` with its admin
listener, and SSPs in scheduler mode each under ops/run's supervisor (relaunched on exit 2-6),
beside a database host the caller brings. Everything on free loopback ports, always stopped.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.procs import DbHost, ManagedProcess, base_env, free_port

SCHEDULER = str(Path(sys.executable).parent / "svc-scheduler")
AUTH_SECRET = "admin-test-shared-secret-of-32-bytes+"
BREAKGLASS = "break-glass-test-password"

#: the app's record access: signs in by `$username` or `$email` with `$password`
ACCESS_SCHEMA = """
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD email ON user TYPE option<string>;
DEFINE FIELD pass ON user TYPE string;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNIN (SELECT * FROM user WHERE (name = $username OR email = $email)
            AND crypto::argon2::compare(pass, $password))
    DURATION FOR SESSION 1h;
DEFINE TABLE post SCHEMAFULL PERMISSIONS FULL;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD title ON post TYPE string;
DEFINE FIELD n ON post TYPE int DEFAULT 0;
"""


def db_env(host: DbHost, ns: str) -> dict[str, str]:
    return {"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
            "SVC_DB_PASS": host.password, "SVC_DB_NS": ns, "SVC_DB_NAME": ns}


@dataclass
class AdminScheduler:
    """A running `svc-scheduler` with its admin listener."""

    process: ManagedProcess
    port: int
    admin_port: int
    data: Path
    config: Path
    env: dict[str, str]
    log_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the scheduler's own state is ready and the admin config answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.alive(), self.process.log_text()[-4000:]
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    body = json.loads(r.read())
            except urllib.error.HTTPError as e:
                body = json.loads(e.read() or b"{}")
            except OSError:
                body = {}
            if body.get("scheduler", {}).get("state") == "ready":
                try:
                    with urllib.request.urlopen(self.admin + "/admin/api/config",
                                                timeout=1) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError("scheduler not ready:\n" + self.process.log_text()[-4000:])

    def restart(self) -> None:
        """Start the same scheduler again (same config, data and ports)."""
        self.process = ManagedProcess("svc-scheduler", [SCHEDULER, "--config", str(self.config)],
                                      self.env, self.log_dir / f"scheduler-{self.port}.log").start()
        self.wait_ready()


def start_scheduler(tmp: Path, host: DbHost, ns: str, *, env: dict[str, str] | None = None,
                    ready_timeout: float = 60.0, **yaml_keys: Any) -> AdminScheduler:
    port, admin_port = free_port(), free_port()
    data = tmp / "scheduler-data"
    doc = {"db": {"url": host.ws_url, "namespace": ns, "database": ns,
                  "username": host.user, "password": host.password},
           "ingest_host": "127.0.0.1", "ingest_port": port,
           "replica_db_path": str(data / "replica.sqlite3"), "wal_path": str(data / "wal"),
           "ssp_poll_interval_ms": 100, "heartbeat_interval_ms": 200,
           "heartbeat_timeout_ms": 5000}
    doc.update(yaml_keys)
    config = tmp / "scheduler.yml"
    config.write_text(yaml.safe_dump(doc))
    full_env = base_env(**{"SVC_INGEST_TRANSPORT": "http", "SVC_DRIFT_CHECK": "false",
                           "SVC_AUTH_SECRET": AUTH_SECRET, "SVC_ADMIN_PASSWORD": BREAKGLASS,
                           "SVC_ADMIN_HOST": "127.0.0.1", "SVC_ADMIN_PORT": str(admin_port),
                           "SVC_ADMIN_PRESENCE_INTERVAL_SECS": "1",
                           "SVC_ADMIN_JOB_INTERVAL_SECS": "1",
                           "SVC_ADMIN_JOB_LIVE_INTERVAL_SECS": "1", **(env or {})})
    mp = ManagedProcess("svc-scheduler", [SCHEDULER, "--config", str(config)], full_env,
                        tmp / f"scheduler-{port}.log").start()
    s = AdminScheduler(mp, port, admin_port, data, config, full_env, tmp)
    try:
        s.wait_ready(ready_timeout)
    except BaseException:
        mp.stop()  # never leave a scheduler that did not come up running after the test
        raise
    return s


@dataclass
class SupervisedSsp:
    """One SSP in scheduler mode under ops/run's supervisor."""

    process: ManagedProcess
    port: int
    data: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ssp_id(self) -> str:
        return f"ssp-{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def snapshot(self) -> Path:
        return self.data / f"ssp-{self.port}" / "snapshot.json"


def start_ssp(tmp: Path, host: DbHost, ns: str, scheduler: AdminScheduler,
              port: int | None = None, **env: str) -> SupervisedSsp:
    """`port`: that of an SSP stopped before, to start it again (same id, same snapshot)."""
    port = port or free_port()
    data = tmp / f"ssp-data-{port}"
    mp = ManagedProcess(
        "supervisor",
        [sys.executable, "-m", "tests.support.supervised_ssp", "--ssps", "1",
         "--ssp-bind", f"127.0.0.1:{port}", "--scheduler-bind", f"127.0.0.1:{scheduler.port}",
         "--data", str(data)],
        base_env(**{**db_env(host, ns), "SVC_INGEST_TRANSPORT": "http", "SVC_SSP_SHARDS": "1",
                    "HEARTBEAT_INTERVAL_MS": "200", "SVC_AUTH_SECRET": AUTH_SECRET,
                    "SVC_SSP_QUERY_UPDATE_THROTTLE_MS": "20",
                    "SVC_SSP_VIEW_METRICS_FLUSH_MS": "200",
                    "SVC_SSP_RUN_DIR": str(tmp / f"ssp-run-{port}"), **env}),
        tmp / f"supervisor-{port}.log").start()
    return SupervisedSsp(mp, port, data)
