"""`svc`: the operator command line: `svc schema apply`, `svc sql`, `svc view watch`,
`svc admin add|list|remove` (the admin roster), `svc project validate|show` (the project
files, checked; the resolved configuration with secrets masked), `svc workflows apply`
(workflow and schedule definitions from the project file), `svc migrate` (the workflow
tables' migrations) and `svc dev` (the local stack and the project's apps).

Exit codes: 0 success, 2 bad configuration (flags, environment, project file, or a transport
the database cannot support), 1 database errors. Messages say what is wrong and never print
the database password or `SVC_AUTH_SECRET`.
"""

from __future__ import annotations

import ipc.lazysdk  # noqa: F401  (first: the SDK's unused transports load on first use)

# isort: split

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
        help="write meta tables, the backends' outbox schemas and sync hooks (idempotent)",
        description="Write the service's meta tables, each backend's outbox schema "
        "(method.schema, with a project file) and hook every synced table into the "
        "ingest transport. Database from SVC_DB_URL, SVC_DB_USER, SVC_DB_PASS, SVC_DB_NS, "
        "SVC_DB_NAME. Transport: --transport, else SVC_INGEST_TRANSPORT, else sync.transport "
        "in the project file, else http.",
    )
    apply.add_argument("--transport", choices=("http", "changefeed"),
                       help="ingest transport (overrides SVC_INGEST_TRANSPORT and project file)")
    apply.add_argument("--project", metavar="FILE",
                       help="root project file (default: SVC_PROJECT_FILE, else ./project.yml "
                       "when present)")
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
    watch.add_argument("--ref-mode", choices=("dedicated", "single"), default=None,
                       help="the SSP's ref mode (default: SVC_SSP_REF_MODE, else refMode in the "
                       "project file, else dedicated)")
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

    wf = sub.add_parser("workflows", help="workflow and schedule definitions",
                        description="Database from SVC_DB_URL, SVC_DB_USER, SVC_DB_PASS, "
                        "SVC_DB_NS, SVC_DB_NAME.")
    wf_sub = wf.add_subparsers(dest="action", required=True)
    wf_apply = wf_sub.add_parser(
        "apply", help="validate `workflows:` and `schedules:` of the project file and write "
        "them to the database (removed ones are deleted)")
    wf_apply.add_argument("--project", metavar="FILE",
                          help="root project file (default: ./project.yml)")
    wf_apply.add_argument("--check", action="store_true",
                          help="validate only; nothing is written")
    mig = sub.add_parser("migrate", help="apply the workflow tables' schema migrations",
                         description="Run after upgrading: brings the workflow tables to "
                         "this release's schema version (rerun and retry answer 409 until "
                         "then). Database from SVC_DB_URL, SVC_DB_USER, SVC_DB_PASS, "
                         "SVC_DB_NS, SVC_DB_NAME.")
    mig.add_argument("--to", type=int, default=None, metavar="VERSION",
                     help="stop at this version (default: the current one)")
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
    dev = sub.add_parser(
        "dev", help="run the local stack and the project's apps (scope all or devOnly) until "
        "Ctrl-C",
        description="Validates the project (as `svc project validate`; nothing starts when it "
        "is invalid), starts the local stack as ops/run does (arguments after `--` go to it, "
        "e.g. `svc dev -- --memory`), then each app with scope all or devOnly in dependsOn "
        "order, each ready before its dependents start. Output is prefixed per process. "
        "Ctrl-C stops everything and exits 0; an app that cannot be brought up stops "
        "everything and exits 1.")
    dev.add_argument("--project", metavar="FILE",
                     help="root project file (default: SVC_PROJECT_FILE, else ./project.yml)")
    dev.add_argument("--no-stack", action="store_true",
                     help="run only the apps (the stack runs elsewhere, or is not needed)")
    dev.add_argument("stack_args", nargs=argparse.REMAINDER,
                     help="after `--`: arguments for the stack (ops/run's)")
    from svccli import cloud

    cloud.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `svc` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "schema" and args.action == "apply":
        return _schema_apply(args)
    if args.command in ("sql", "view", "admin"):
        return _tool(args)
    if args.command in ("workflows", "migrate"):
        return _workflows(args)
    if args.command == "cloud":
        from svccli import cloud

        return cloud.run(args)
    if args.command == "dev":
        from svccli import dev

        stack_args = list(args.stack_args)
        if stack_args[:1] == ["--"]:
            stack_args = stack_args[1:]
        return dev.run(_project_path(args), stack=not args.no_stack, stack_args=stack_args)
    if args.command == "project":
        from svccli import project

        path = project.project_path(args.project, os.environ, Path.cwd())
        if args.action == "validate":
            return project.validate(path)
        return project.show(path, os.environ)
    raise AssertionError("argparse enforces the subcommands")


def _project_path(args: argparse.Namespace) -> Path:
    """The root project file, found as everywhere else (`svccli.settings.find_project`):
    `--project`, else `SVC_PROJECT_FILE`, else `./project.yml`."""
    named = args.project or os.environ.get("SVC_PROJECT_FILE", "").strip()
    return Path(named) if named else Path.cwd() / "project.yml"


def _workflows(args: argparse.Namespace) -> int:
    from dbclient import DbConfig
    from project.workflows import DefinitionError
    from svccli import workflows

    prog = "svc migrate" if args.command == "migrate" else "svc workflows apply"
    section = None
    if args.command == "workflows":
        path = _project_path(args)
        try:
            section = workflows.read_section(path, required=True)
        except DefinitionError as e:
            workflows.print_refusal(prog, e)
            return EXIT_CONFIG
        if args.check:
            assert section is not None
            print(f"{prog}: {path}: {len(section.workflows)} workflow(s), "
                  f"{len(section.schedules)} schedule(s): valid")
            return EXIT_OK
    try:
        cfg = DbConfig.from_env(os.environ)
    except ValueError as e:
        print(f"{prog}: configuration error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return asyncio.run(_run_workflows(prog, cfg, section, args))


async def _run_workflows(prog: str, cfg: Any, section: Any, args: argparse.Namespace) -> int:
    from scheduler.workflows.tables import migrate
    from svccli import workflows

    db = Database(cfg)
    try:
        await db.connect()
        if args.command == "migrate":
            try:
                before, after = await migrate(db, args.to)
            except ValueError as e:
                print(f"{prog}: {e}", file=sys.stderr)
                return EXIT_CONFIG
            print(f"{prog}: workflow tables at version {after}"
                  + (" (unchanged)" if before == after else f" (was {before or 'none'})"))
            return EXIT_OK
        print(f"{prog}: {await workflows.ensure_tables(db)}")
        result = await workflows.apply_definitions(db, section)
    except DbError as e:
        print(f"{prog}: database error ({cfg.ws_url}, {cfg.namespace}/{cfg.database}): {e}",
              file=sys.stderr)
        return EXIT_DB_ERROR
    finally:
        await db.close()
    for line in result.lines():
        print("  " + line)
    return EXIT_OK


def _schema_apply(args: argparse.Namespace) -> int:
    from project.workflows import DefinitionError
    from svccli import workflows

    project = _project_path(args)
    try:
        # Refused definitions stop the command before anything is written.
        section = workflows.read_section(project, required=False)
    except DefinitionError as e:
        workflows.print_refusal("svc schema apply", e)
        return EXIT_CONFIG
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
    return asyncio.run(_run_apply(settings, section))


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
            asyncio.run(watch_view(cfg, args.view_id, ref_mode=args.ref_mode or _ref_mode(),
                                   seconds=args.seconds))
    except DbError as e:
        print(f"svc {args.command}: database error: {e}", file=sys.stderr)
        return EXIT_DB_ERROR
    except ValueError as e:  # also svccli.settings.ConfigError
        print(f"svc {args.command}: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _ref_mode() -> str:
    """`SVC_SSP_REF_MODE`, else the project file's `refMode` (`project.service`), else the
    SSP's default."""
    from project.service import with_project_defaults
    from svccli.settings import find_project

    env = with_project_defaults(os.environ, find_project(os.environ, None, Path.cwd()))
    mode = env.get("SVC_SSP_REF_MODE", "").strip().lower() or "dedicated"
    if mode not in ("dedicated", "single"):
        raise ValueError(f"SVC_SSP_REF_MODE must be dedicated or single, got {mode[:20]!r}")
    return mode


async def _run_apply(settings: SchemaSettings, section: Any = None) -> int:
    from svccli import workflows

    db = Database(settings.db)
    extra: list[str] = []
    try:
        await db.connect()
        report = await apply_schema(db, settings)
        extra.append(await workflows.ensure_tables(db))
        if section is not None:
            extra += (await workflows.apply_definitions(db, section)).lines()
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
    for line in report.lines() + extra:
        print("  " + line)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
