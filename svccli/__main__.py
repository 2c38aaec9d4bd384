"""`svc`: the operator command line: `svc schema apply`, `svc sql`, `svc view watch`,
`svc admin add|list|remove` (the admin roster), `svc project validate|show` (the project
files, checked; the resolved configuration with secrets masked).

Exit codes: 0 success, 2 bad configuration (flags, environment, project file, or a transport
the database cannot support), 1 database errors. Messages say what is wrong and never print
the database password or `SVC_AUTH_SECRET`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from dbclient import Database, DbError
from svccli.schema import apply_schema
from svccli.settings import ConfigError, SchemaSettings, resolve_settings

EXIT_OK = 0
EXIT_DB_ERROR = 1
EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree for every `svc` subcommand."""
    parser = argparse.ArgumentParser(prog="svc", description="Incremental view service CLI.")
    sub = parser.add_subparsers(dest="command", required=True)

    schema = sub.add_parser("schema", help="database schema of the service")
    schema_sub = schema.add_subparsers(dest="action", required=True)
    apply = schema_sub.add_parser(
        "apply",
        help="write meta tables and sync hooks (idempotent)",
        description="Write the service's meta tables and hook every synced table into the "
        "ingest transport. Database from SVC_DB_URL, SVC_DB_USER, SVC_DB_PASS, SVC_DB_NS, "
        "SVC_DB_NAME. Transport: --transport, else SVC_INGEST_TRANSPORT, else sync.transport "
        "in the project file, else http.",
    )
    apply.add_argument("--transport", choices=("http", "changefeed"),
                       help="ingest transport (overrides SVC_INGEST_TRANSPORT and project file)")
    apply.add_argument("--project", metavar="FILE",
                       help="root project file (default: ./project.yml when present)")
    apply.add_argument("--ingest-url", metavar="URL",
                       help="the SSP's or scheduler's /ingest URL for transport http "
                       "(default: SVC_INGEST_URL)")
    apply.add_argument("--retention", metavar="DURATION",
                       help="changefeed retention, e.g. 1h (default: SVC_CHANGEFEED_RETENTION "
                       "or 1h)")
    sql = sub.add_parser("sql", help="run SurrealQL and print each statement's result as JSON",
                         description="Database from SVC_DB_URL, SVC_DB_USER, SVC_DB_PASS, "
                         "SVC_DB_NS, SVC_DB_NAME.")
    sql.add_argument("query", help="one or more SurrealQL statements")

    view = sub.add_parser("view", help="registered views")
    view_sub = view.add_subparsers(dest="action", required=True)
    watch = view_sub.add_parser("watch", help="print a view's state and its edges as they change")
    watch.add_argument("view_id", help="the view id, e.g. query:top")
    watch.add_argument("--ref-mode", choices=("dedicated", "single"), default="dedicated")
    watch.add_argument("--seconds", type=float, default=None, help="stop after this long")

    admin = sub.add_parser("admin", help="the admin listener's roster (_00_admin)",
                           description="Who may sign in to the admin listener with their app "
                           "account. Database from SVC_DB_URL, SVC_DB_USER, SVC_DB_PASS, "
                           "SVC_DB_NS, SVC_DB_NAME.")
    admin_sub = admin.add_subparsers(dest="action", required=True)
    a_add = admin_sub.add_parser("add", help="put a user on the roster")
    a_add.add_argument("ident", help="record id (user:alice), sign-in name or e-mail")
    a_add.add_argument("--note", default=None, help="free text kept with the entry")
    admin_sub.add_parser("list", help="print the roster (JSON lines)")
    a_rm = admin_sub.add_parser("remove", help="take a user off the roster")
    a_rm.add_argument("ident", help="the identifier as added")

    proj = sub.add_parser("project", help="the project files (project.yml)",
                          description="The root project file: --project, else "
                          "SVC_PROJECT_FILE, else ./project.yml. Needs no database.")
    proj_sub = proj.add_subparsers(dest="action", required=True)
    for action, text in (("validate", ("check the root file and every app's file; every "
                          "problem is printed with its file, property path and reason")),
                         ("show", ("print the resolved configuration (defaults filled in, "
                          "the SSP job config and scheduler job tables; secrets masked)"))):
        p = proj_sub.add_parser(action, help=text, description=text)
        p.add_argument("--project", metavar="FILE", help="root project file (validate also "
                       "takes one app's project.yml)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `svc` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "schema" and args.action == "apply":
        return _schema_apply(args)
    if args.command in ("sql", "view", "admin"):
        return _tool(args)
    if args.command == "project":
        from svccli import project

        path = project.project_path(args.project, os.environ, Path.cwd())
        if args.action == "validate":
            return project.validate(path)
        return project.show(path, os.environ)
    raise AssertionError("argparse enforces the subcommands")


def _schema_apply(args: argparse.Namespace) -> int:
    try:
        settings = resolve_settings(
            os.environ,
            transport_flag=args.transport,
            project_flag=args.project,
            ingest_url_flag=args.ingest_url,
            retention_flag=args.retention,
            cwd=Path.cwd(),
        )
    except ConfigError as e:
        print(f"svc schema apply: configuration error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return asyncio.run(_run_apply(settings))


def _tool(args: argparse.Namespace) -> int:
    from dbclient import DbConfig
    from svccli.tools import run_sql, watch_view

    try:
        cfg = DbConfig.from_env(os.environ)
    except ValueError as e:
        print(f"svc {args.command}: configuration error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        if args.command == "admin":
            from svccli import admin

            if args.action == "add":
                return asyncio.run(admin.add(cfg, args.ident, args.note))
            if args.action == "remove":
                return asyncio.run(admin.remove(cfg, args.ident))
            return asyncio.run(admin.listing(cfg))
        if args.command == "sql":
            asyncio.run(run_sql(cfg, args.query))
        else:
            asyncio.run(watch_view(cfg, args.view_id, ref_mode=args.ref_mode, seconds=args.seconds))
    except DbError as e:
        print(f"svc {args.command}: database error: {e}", file=sys.stderr)
        return EXIT_DB_ERROR
    except ValueError as e:
        print(f"svc {args.command}: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return EXIT_OK


async def _run_apply(settings: SchemaSettings) -> int:
    db = Database(settings.db)
    try:
        await db.connect()
        report = await apply_schema(db, settings)
    except ConfigError as e:
        print(f"svc schema apply: configuration error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except DbError as e:
        print(f"svc schema apply: database error ({settings.db.ws_url}, "
              f"{settings.db.namespace}/{settings.db.database}): {e}", file=sys.stderr)
        return EXIT_DB_ERROR
    finally:
        await db.close()
    print(f"svc schema apply: {settings.db.ws_url} {settings.db.namespace}/"
          f"{settings.db.database} (transport from {settings.transport_source})")
    for line in report.lines():
        print("  " + line)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
