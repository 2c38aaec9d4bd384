"""`ops/run`: the database host and the service processes, in the foreground, until Ctrl-C."""

from __future__ import annotations

import logging
import os
import sys

from stack.config import StackConfig, parse
from stack.supervisor import RELAUNCH_CODES, Child, Supervisor


def build_children(cfg: StackConfig, env: dict[str, str]) -> list[Child]:
    """The processes of the local stack, in start order."""
    children: list[Child] = []
    child_env = dict(env)
    child_env["SVC_DB_USER"] = cfg.db_user
    child_env["SVC_DB_PASS"] = cfg.db_pass
    if cfg.starts_host:
        argv = [sys.executable, "-m", "dbhost", "--bind", cfg.db_bind]
        if cfg.data_dir is None:
            argv.append("--memory")
        else:
            cfg.data_dir.mkdir(parents=True, exist_ok=True)
            argv += ["--path", str(cfg.data_dir)]
        children.append(Child("svc-db", argv, child_env, health_url=f"http://{cfg.db_bind}/health"))
        child_env["SVC_DB_URL"] = cfg.effective_db_url
        # The embedded engine has no http::* functions: its ingest transport is the changefeed.
        child_env["SVC_INGEST_TRANSPORT"] = "changefeed"
    if cfg.start_ssp:
        children.append(Child("svc schema apply",
                              [sys.executable, "-m", "svccli", "schema", "apply"],
                              child_env, oneshot=True))
        ssp_env = dict(child_env)
        ssp_env.setdefault("SVC_SSP_LISTEN_ADDR", cfg.ssp_bind)
        if cfg.data_dir is not None:
            ssp_env.setdefault("SVC_SSP_SNAPSHOT_DIR", str(cfg.data_dir / "ssp"))
        children.append(Child("svc-ssp", [sys.executable, "-m", "ssp"], ssp_env,
                              health_url=f"http://{cfg.ssp_bind}/health",
                              relaunch_on=RELAUNCH_CODES))
    return children


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ops/run %(levelname)s %(message)s")
    env = dict(os.environ)
    cfg = parse(sys.argv[1:] if argv is None else argv, env)
    children = build_children(cfg, env)
    if cfg.dev_credentials and cfg.starts_host:
        logging.warning("SVC_DB_USER/SVC_DB_PASS not set: the database root user is root/root "
                        "(local development only)")

    def announce() -> None:
        lines = ["", "service is up:"]
        if cfg.starts_host:
            where = "memory only" if cfg.data_dir is None else str(cfg.data_dir)
            lines.append(f"  database host   http://{cfg.db_bind}  (SDK: ws://{cfg.db_bind}/rpc; data: {where})")
        else:
            lines.append(f"  database        {cfg.effective_db_url} (external, SVC_DB_URL)")
        if cfg.start_ssp:
            lines.append(f"  SSP             http://{cfg.ssp_bind}  (GET /health, /info; POST /view/register)")
        lines.append("Ctrl-C stops everything.")
        print("\n".join(lines), flush=True)

    if not children:
        announce()
    return Supervisor(children).run(on_ready=announce)


if __name__ == "__main__":
    sys.exit(main())
