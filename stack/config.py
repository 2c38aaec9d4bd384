"""Settings of the local stack launcher, read once from argv and the environment."""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ipc.envvars import host_port


@dataclass(frozen=True)
class StackConfig:
    """What `ops/run` starts and where."""

    db_url: str | None  # SVC_DB_URL: use that database and start no host
    db_bind: str  # host:port of the embedded database host
    data_dir: Path | None  # None = memory-only
    ssp_bind: str
    start_ssp: bool
    db_user: str
    db_pass: str = field(repr=False)
    dev_credentials: bool = False  # root/root because SVC_DB_USER/SVC_DB_PASS were not set
    ssps: int = 1  # cluster mode: svc-scheduler + this many SSPs (0 = one standalone SSP)
    scheduler_bind: str = "127.0.0.1:9667"
    admin_bind: str = "127.0.0.1:9668"
    #: break-glass password of the admin plane: SVC_ADMIN_PASSWORD, else generated per run
    admin_password: str = field(default="", repr=False)
    admin_password_generated: bool = False
    #: `--objstore`: a local S3 server (`rclone serve s3`) for backups, on `objstore_bind`
    objstore: bool = False
    objstore_bind: str = "127.0.0.1:9670"
    #: `--cloud`: the hosted platform's control plane (`svc-cloud`) on `cloud_bind`
    cloud: bool = False
    cloud_bind: str = "127.0.0.1:9680"
    #: `--transport`: `changefeed` or `http`, the spec's default: database events post each
    #: change to the ingest listener (the host then runs the Node build). None: changefeed
    #: with our own host; with SVC_DB_URL the services' own setting (SVC_INGEST_TRANSPORT)
    transport: str | None = None

    @property
    def starts_host(self) -> bool:
        return self.db_url is None

    @property
    def effective_db_url(self) -> str:
        return self.db_url or f"ws://{self.db_bind}/rpc"

    @property
    def cluster(self) -> bool:
        return self.start_ssp and self.ssps >= 1

    @property
    def ingest_target(self) -> str:
        """host:port that database events post to under transport http: the scheduler's
        listener in cluster mode, the SSP's standalone (an all-interfaces bind is reached on
        loopback)."""
        bind = self.scheduler_bind if self.cluster else self.ssp_bind
        host, _, port = bind.rpartition(":")
        return f"{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}"

    def ssp_binds(self) -> list[str]:
        """Listen addresses of the SSPs: `--ssp-bind` in standalone mode; in cluster mode
        consecutive ports from the `--ssp-bind` port (default 8667)."""
        if not self.cluster:
            return [self.ssp_bind] if self.start_ssp else []
        host, _, port = self.ssp_bind.rpartition(":")
        return [f"{host}:{int(port) + i}" for i in range(self.ssps)]


def parse(argv: Sequence[str], env: Mapping[str, str]) -> StackConfig:
    """Build the config; argparse exits with code 2 and a message on bad arguments."""
    p = argparse.ArgumentParser(
        prog="ops/run",
        description="Run the service locally on the embedded SurrealDB engine.",
    )
    p.add_argument("--memory", action="store_true", help="keep the database in memory only")
    p.add_argument("--data", default="./data", help="database storage directory (default ./data)")
    p.add_argument("--db-bind", default="127.0.0.1:8000", help="database host address")
    p.add_argument("--ssp-bind", default="127.0.0.1:8667", help="SSP listen address")
    p.add_argument("--no-ssp", action="store_true", help="start only the database host")
    p.add_argument("--ssps", type=int, default=None, metavar="N",
                   help="cluster mode (the default, N=1): svc-scheduler with its admin plane "
                        "and N SSPs in scheduler mode on consecutive ports from the --ssp-bind "
                        "port")
    p.add_argument("--standalone", action="store_true",
                   help="one standalone SSP, no scheduler and no admin plane")
    p.add_argument("--scheduler-bind", default="127.0.0.1:9667",
                   help="scheduler ingest listener address in cluster mode")
    p.add_argument("--admin-bind", default="127.0.0.1:9668",
                   help="admin listener (dashboard, admin API, MCP) address in cluster mode")
    p.add_argument("--objstore", action="store_true",
                   help="start a local S3 server (rclone serve s3, data under <data>/objstore) "
                        "and point the backup plane at it (OBJSTORE_*)")
    p.add_argument("--objstore-bind", default="127.0.0.1:9670",
                   help="address of the --objstore server (default 127.0.0.1:9670)")
    p.add_argument("--cloud", action="store_true",
                   help="also start the hosted platform's control plane (svc-cloud: REST API "
                        "and the MCP endpoint /v1/mcp), its state in the same database")
    p.add_argument("--cloud-bind", default="127.0.0.1:9680",
                   help="address of the --cloud control plane (default 127.0.0.1:9680)")
    p.add_argument("--transport", choices=("changefeed", "http"), default=None,
                   help="how changes reach the service: changefeed (the default with the "
                        "host started here: the services tail each table's changefeed) or http (the spec's default: database "
                        "events post to /ingest inside the writing transaction; the host runs "
                        "SurrealDB's Node build, installed by ops/run with npm)")
    a = p.parse_args(list(argv))
    if a.transport == "http" and a.no_ssp:
        p.error("--transport http needs an ingest listener: drop --no-ssp")
    if a.ssps is not None and a.ssps < 1:
        p.error("--ssps must be 1 or more (--standalone runs one SSP without a scheduler)")
    if a.ssps is not None and a.no_ssp:
        p.error("--ssps and --no-ssp exclude each other")
    if a.standalone and (a.ssps is not None or a.no_ssp):
        p.error("--standalone excludes --ssps and --no-ssp")
    ssps = 0 if a.standalone or a.no_ssp else (a.ssps or 1)
    for name, bind in (("--ssp-bind", a.ssp_bind), ("--scheduler-bind", a.scheduler_bind),
                       ("--admin-bind", a.admin_bind), ("--objstore-bind", a.objstore_bind),
                       ("--cloud-bind", a.cloud_bind)):
        try:
            host_port(bind, name, default_host="0.0.0.0")  # an empty host listens on all
        except ValueError as e:
            p.error(str(e))
    user = env.get("SVC_DB_USER", "")
    password = env.get("SVC_DB_PASS", "")
    dev = not user and not password
    admin_password = env.get("SVC_ADMIN_PASSWORD", "")
    generated = not admin_password
    if generated:  # local development: a fresh break-glass password per run, printed once
        admin_password = secrets.token_urlsafe(18)
    if dev:  # local development only; the host itself refuses to start without credentials
        user, password = "root", "root"
    return StackConfig(
        db_url=env.get("SVC_DB_URL") or env.get("SVC_DB_WS") or None,
        db_bind=a.db_bind,
        ssp_bind=a.ssp_bind,
        start_ssp=not a.no_ssp,
        data_dir=None if a.memory else Path(a.data).resolve(),
        db_user=user,
        db_pass=password,
        dev_credentials=dev,
        ssps=ssps,
        scheduler_bind=a.scheduler_bind,
        admin_bind=a.admin_bind,
        admin_password=admin_password,
        admin_password_generated=generated,
        objstore=a.objstore,
        objstore_bind=a.objstore_bind,
        cloud=a.cloud,
        cloud_bind=a.cloud_bind,
        transport=a.transport,
    )
