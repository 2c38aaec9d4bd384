"""``svc cloud ...``: the hosted platform from the shell, over its REST API
(``cloud.client``), in the style of the CLIs of hosted platforms: sign in once, then short
verbs per resource; ``--tenant`` picks a team (default: your personal tenant), ``--json``
prints the API's answer as it came.

Secret values never go through argv where it can be avoided: ``svc cloud login`` prompts for
the password (or reads it from stdin with ``--password-stdin``), ``svc cloud vault set KEY``
reads the value from a prompt or stdin, ``vault generate`` makes it on the server. ``env set
KEY=VALUE`` takes argv like ``fly secrets set`` (use ``env set KEY --stdin`` for a value that
must stay out of the shell history). ``env pull`` resolves an app's ``project.yml`` ``env``
against the platform (``cloud.envresolve``) and writes a dotenv file (mode 0600).

Exit codes: 0 success, 1 the API refused (its message is printed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cloud.client import ApiError, CloudClient, Session

__all__ = ["add_parser", "run"]

EXIT_OK, EXIT_API, EXIT_USAGE = 0, 1, 2


def add_parser(sub: Any) -> None:
    cloud = sub.add_parser("cloud", help="the hosted platform (projects, env, vault, domains, "
                           "repo links, tokens, usage)",
                           description="The hosted platform's API: --api, else "
                           "SVC_CLOUD_API_URL, else the saved login, else "
                           "http://127.0.0.1:9680. Credential: --token, else SVC_CLOUD_TOKEN, "
                           "else the saved login.")
    cloud.add_argument("--api", help="platform API URL")
    cloud.add_argument("--token", help="credential (an API key for automation)")
    cloud.add_argument("--json", action="store_true", help="print the API's JSON answers")
    cs = cloud.add_subparsers(dest="area", required=True)

    def tenant(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tenant", help="tenant slug or id (default: your personal tenant)")

    def project(p: argparse.ArgumentParser, env: bool = False, app: bool = False) -> None:
        tenant(p)
        p.add_argument("--project", "-p", required=True, help="project slug or id")
        if env:
            p.add_argument("--environment", "-e", default=None,
                           help="environment (default production)")
        if app:
            p.add_argument("--app", help="one app of the project (default: every app)")

    p = cs.add_parser("signup", help="create an account (and its personal tenant)")
    p.add_argument("email")
    p.add_argument("--password-stdin", action="store_true")
    p = cs.add_parser("login", help="sign in and save the session")
    p.add_argument("email")
    p.add_argument("--password-stdin", action="store_true")
    cs.add_parser("logout", help="revoke the saved session and forget it")
    cs.add_parser("whoami", help="who the credential is and its tenants")

    t = cs.add_parser("tenants", help="your tenants and teams").add_subparsers(
        dest="action", required=True)
    t.add_parser("ls", help="tenants you may use")
    p = t.add_parser("create", help="create a team")
    p.add_argument("slug")
    p.add_argument("--name")
    p = t.add_parser("members", help="members of a tenant")
    p.add_argument("tenant")
    p = t.add_parser("invite", help="add a platform user to a team")
    p.add_argument("tenant")
    p.add_argument("email")
    p.add_argument("--role", default="member", choices=["viewer", "member", "admin", "owner"])
    p = t.add_parser("remove", help="remove a member")
    p.add_argument("tenant")
    p.add_argument("user", help="e-mail or user id")
    p.add_argument("--confirm", required=True, help="the e-mail or id again")

    pr = cs.add_parser("projects", help="projects").add_subparsers(dest="action",
                                                                   required=True)
    p = pr.add_parser("ls", help="projects of a tenant")
    tenant(p)
    p.add_argument("--deleted", action="store_true", help="soft-deleted ones")
    p = pr.add_parser("create", help="create a project (its slug is the scheduler's "
                      "SVC_CLOUD_PROJECT)")
    tenant(p)
    p.add_argument("slug")
    p.add_argument("--name")
    for verb, text in (("info", "one project"), ("restore", "restore a deleted project")):
        p = pr.add_parser(verb, help=text)
        tenant(p)
        p.add_argument("project")
    p = pr.add_parser("rm", help="soft-delete a project")
    tenant(p)
    p.add_argument("project")
    p.add_argument("--confirm", required=True, help="the project's slug again")
    p = pr.add_parser("transfer", help="move a project to another tenant")
    tenant(p)
    p.add_argument("project")
    p.add_argument("to_tenant")
    p.add_argument("--confirm", required=True, help="the project's slug again")

    e = cs.add_parser("env", help="environment variables").add_subparsers(dest="action",
                                                                          required=True)
    project(e.add_parser("ls", help="variables (values shown: a session may reveal)"),
            env=True, app=True)
    p = e.add_parser("set", help="set KEY=VALUE ... (merged into what is there)")
    project(p, env=True, app=True)
    p.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    p.add_argument("--stdin", action="store_true", help="one KEY, its value read from stdin")
    p.add_argument("--replace", action="store_true", help="drop every variable not given")
    p = e.add_parser("unset", help="remove a variable")
    project(p, env=True, app=True)
    p.add_argument("key")
    p = e.add_parser("pull", help="resolve an app's project.yml env against the platform "
                     "and write a dotenv file")
    project(p, env=True)
    p.add_argument("--app", required=True)
    p.add_argument("--project-file", default="project.yml", help="the root project.yml")
    p.add_argument("--out", default=".env.cloud", help="dotenv file to write ('-': stdout)")

    v = cs.add_parser("vault", help="vault secrets").add_subparsers(dest="action",
                                                                     required=True)
    project(v.add_parser("ls", help="secrets (values shown: a session may reveal)"), env=True)
    p = v.add_parser("set", help="store a secret (value from a prompt or stdin)")
    project(p, env=True)
    p.add_argument("key")
    p = v.add_parser("generate", help="generate a secret on the server (never shown)")
    project(p, env=True)
    p.add_argument("key")
    p.add_argument("--length", type=int)
    p.add_argument("--charset", choices=["alnum", "hex", "base64url"])
    p = v.add_parser("rm", help="remove a secret")
    project(p, env=True)
    p.add_argument("key")

    d = cs.add_parser("domains", help="custom domains").add_subparsers(dest="action",
                                                                       required=True)
    project(d.add_parser("ls", help="domains and their TXT records"))
    for verb, text in (("add", "add a domain"), ("verify", "check its TXT record now"),
                       ("rm", "remove a domain")):
        p = d.add_parser(verb, help=text)
        project(p)
        p.add_argument("hostname")

    lk = cs.add_parser("links", help="repo links").add_subparsers(dest="action", required=True)
    project(lk.add_parser("ls", help="linked repositories"))
    p = lk.add_parser("add", help="link a git repository")
    project(p)
    p.add_argument("url")
    p.add_argument("--branch", default=None)
    p.add_argument("--path", default=None, help="the project's directory in the repository")
    for verb, text in (("check", "read the branch head now"),
                       ("commits", "commits noticed on the branch"), ("rm", "unlink")):
        p = lk.add_parser(verb, help=text)
        project(p)
        p.add_argument("link_id")

    tk = cs.add_parser("tokens", help="MCP tokens").add_subparsers(dest="action",
                                                                   required=True)
    tk.add_parser("ls", help="your MCP tokens (never their secrets)")
    p = tk.add_parser("create", help="create an MCP token (shown once)")
    p.add_argument("--label", required=True)
    p.add_argument("--scope", action="append", dest="scopes",
                   help="a scope (repeat; default mcp:read, read-only)")
    p.add_argument("--days", type=int, default=90, help="lifetime, at most 365")
    p = tk.add_parser("revoke", help="revoke an MCP token")
    p.add_argument("token_id")

    p = cs.add_parser("deploy", help="deploy the project (the same spec answers the "
                      "deployment that has it)")
    project(p)
    p.add_argument("--ssps", type=int, default=None, help="number of SSPs")
    p.add_argument("--database-url", default=None,
                   help="an external SurrealDB URL (default: a database host of its own)")
    p.add_argument("--wait", action="store_true", help="wait until it runs or fails")
    p = cs.add_parser("deployments", help="deployments, newest first (or one)")
    project(p)
    p.add_argument("deployment", nargs="?", help="id or version: one deployment with its "
                   "instances")
    for verb, text in (("rollback", "deploy an earlier deployment's spec again"),
                       ("cancel", "cancel a queued or in-flight deployment")):
        p = cs.add_parser(verb, help=text)
        project(p)
        p.add_argument("deployment", help="id or version")
    p = cs.add_parser("restart", help="restart roles of the running deployment")
    project(p)
    p.add_argument("--role", action="append", dest="roles", choices=["db", "scheduler", "ssps"],
                   help="a role (repeat; default scheduler and SSPs)")
    for flag in ("upgrade", "clean", "surreal"):
        p.add_argument(f"--{flag}", action="store_true")
    p = cs.add_parser("scale", help="set the number of SSPs (a new deployment)")
    project(p)
    p.add_argument("ssps", type=int)
    p = cs.add_parser("logs", help="log lines of a deployment (bounded, oldest first)")
    project(p)
    p.add_argument("deployment", help="id or version")
    p.add_argument("--instance", help="one instance (id or role, e.g. scheduler, ssp-1)")
    p.add_argument("--level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--grep", dest="q", help="text filter")
    p.add_argument("--since")
    p.add_argument("--limit", type=int, default=200, help="lines (at most 500)")
    p.add_argument("--cursor", help="next_cursor of the previous answer")

    bk = cs.add_parser("backups", help="backups of the running deployment (through its "
                       "scheduler)").add_subparsers(dest="action", required=True)
    project(bk.add_parser("ls", help="backups, restores and storage status"))
    p = bk.add_parser("create", help="take a backup now")
    project(p)
    p.add_argument("--name", default=None)
    for verb, text in (("restore", "restore a backup over the project's data"),
                       ("status", "the latest restore of a backup"),
                       ("rm", "soft-delete a backup")):
        p = bk.add_parser(verb, help=text)
        project(p)
        p.add_argument("backup_id")
    p = bk.add_parser("config", help="scheduled-backup settings (show, or set with the flags)")
    project(p)
    p.add_argument("--enable", dest="enabled", action="store_const", const=True)
    p.add_argument("--disable", dest="enabled", action="store_const", const=False)
    p.add_argument("--schedule", help="5-field cron, e.g. '0 3 * * *'")
    p.add_argument("--retention", type=int, help="days (1-3650)")

    p = cs.add_parser("usage", help="usage of a tenant (or one project)")
    tenant(p)
    p.add_argument("--project", "-p")
    p.add_argument("--since", help="ISO time (default: 24 h ago)")


def _read_secret(prompt: str, from_stdin: bool) -> str:
    if from_stdin or not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    return getpass.getpass(prompt)


def _table(rows: list[dict[str, Any]], cols: Sequence[str]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def _cell(v: Any) -> str:
    if isinstance(v, dict) and "fingerprint" in v:
        return str(v["value"]) if "value" in v else f"(redacted {v['fingerprint']})"
    if v is None:
        return "-"
    return str(v)


class Cli:
    def __init__(self, args: argparse.Namespace, env: Mapping[str, str]) -> None:
        self.a = args
        self.env = env
        self.session = Session.load(env, args.api, args.token)
        self.c = CloudClient(self.session)

    def show(self, doc: Any, rows: list[dict[str, Any]] | None = None,
             cols: Sequence[str] = ()) -> None:
        if self.a.json or rows is None:
            print(json.dumps(doc, indent=2))
        else:
            _table(rows, cols)

    def q(self, **kw: Any) -> dict[str, Any]:
        out = {"tenant_id": getattr(self.a, "tenant", None)}
        out.update(kw)
        return {k: v for k, v in out.items() if v is not None}

    def p(self, suffix: str = "") -> str:
        return f"/v1/projects/{self.a.project}{suffix}"

    # ------------------------------------------------------------------ areas
    def account(self) -> int:
        a = self.a
        if a.area in ("signup", "login"):
            pw = _read_secret("Password: ", a.password_stdin)
            if a.area == "signup":
                out = self.c.call("POST", "/v1/auth/signup", {"email": a.email,
                                                              "password": pw})
                print(f"account {out['user']['email']} created; personal tenant "
                      f"{out['tenant']['slug']}. Next: svc cloud login {a.email}")
                return EXIT_OK
            out = self.c.call("POST", "/v1/auth/login", {"email": a.email, "password": pw,
                                                         "label": "svc cli"})
            self.session.token, self.session.email = out["token"], out["user"]["email"]
            where = self.session.save(self.env)
            print(f"signed in to {self.session.api} as {self.session.email} (session saved "
                  f"in {where}, expires {out['expires_at']})")
            return EXIT_OK
        if a.area == "logout":
            if self.session.token and self.session.token.startswith("sess_live_"):
                try:
                    self.c.call("POST", "/v1/auth/logout")
                except ApiError as e:
                    if e.status != 401:
                        raise
            forgot = Session.forget(self.env)
            print("signed out" + ("" if forgot else " (no saved session)"))
            return EXIT_OK
        me = self.c.call("GET", "/v1/me")
        self.show(me, [{"who": me["user"]["email"], "credential": me["credential"]["kind"],
                        "tenants": ", ".join(t["slug"] for t in me["tenants"])}],
                  ("who", "credential", "tenants"))
        return EXIT_OK

    def tenants(self) -> int:
        a = self.a
        if a.action == "ls":
            out = self.c.call("GET", "/v1/tenants")
            self.show(out, out["items"], ("slug", "id", "kind", "role"))
        elif a.action == "create":
            self.show(self.c.call("POST", "/v1/tenants", {"slug": a.slug, "name": a.name}
                                  if a.name else {"slug": a.slug}))
        elif a.action == "members":
            rows = list(self.c.pages(f"/v1/tenants/{a.tenant}/members"))
            self.show({"items": rows}, rows, ("email", "role", "user_id"))
        elif a.action == "invite":
            self.show(self.c.call("POST", f"/v1/tenants/{a.tenant}/members",
                                  {"email": a.email, "role": a.role}))
        else:
            self.show(self.c.call("DELETE", f"/v1/tenants/{a.tenant}/members/{a.user}",
                                  params={"confirm": a.confirm}))
        return EXIT_OK

    def projects(self) -> int:
        a = self.a
        if a.action == "ls":
            rows = list(self.c.pages("/v1/projects", self.q(deleted=a.deleted or None)))
            self.show({"items": rows}, rows, ("slug", "id", "name", "created_at"))
        elif a.action == "create":
            body = self.q(slug=a.slug, name=a.name)
            self.show(self.c.call("POST", "/v1/projects", body))
        elif a.action == "info":
            self.show(self.c.call("GET", f"/v1/projects/{a.project}", params=self.q()))
        elif a.action == "restore":
            self.show(self.c.call("POST", f"/v1/projects/{a.project}/restore", self.q()))
        elif a.action == "rm":
            self.show(self.c.call("DELETE", f"/v1/projects/{a.project}",
                                  params=self.q(confirm=a.confirm)))
        else:
            self.show(self.c.call("POST", f"/v1/projects/{a.project}/transfer",
                                  self.q(to_tenant_id=a.to_tenant, confirm=a.confirm)))
        return EXIT_OK

    def env_area(self) -> int:
        a = self.a
        scope = self.q(environment=a.environment, app=getattr(a, "app", None))
        if a.action == "ls":
            rows = list(self.c.pages(self.p("/env"), scope))
            self.show({"items": rows}, rows, ("key", "value", "version", "updated_at"))
        elif a.action == "set":
            vars_: dict[str, str] = {}
            if a.stdin:
                if len(a.pairs) != 1 or "=" in a.pairs[0]:
                    print("svc cloud env set --stdin: give one KEY", file=sys.stderr)
                    return EXIT_USAGE
                vars_[a.pairs[0]] = _read_secret(f"{a.pairs[0]}: ", True)
            else:
                for pair in a.pairs:
                    k, sep, v = pair.partition("=")
                    if not sep:
                        print(f"svc cloud env set: {k[:60]}: want KEY=VALUE", file=sys.stderr)
                        return EXIT_USAGE
                    vars_[k] = v
            out = self.c.call("PATCH", self.p("/env"), {**scope, "vars": vars_,
                                                        "replace": a.replace})
            self.show(out, [{"changed": ", ".join(out["changed"]) or "-",
                             "removed": ", ".join(out["removed"]) or "-",
                             "unchanged": ", ".join(out["unchanged"]) or "-"}],
                      ("changed", "removed", "unchanged"))
        elif a.action == "unset":
            self.show(self.c.call("DELETE", self.p(f"/env/{a.key}"),
                                  params={**scope, "confirm": a.key}))
        else:
            return self.pull()
        return EXIT_OK

    def pull(self) -> int:
        from cloud.envresolve import MissingVaultKeys, resolve_app_env
        from cloud.secret import Secret
        from project.rootconfig import ProjectInvalid, load_project

        a = self.a
        try:
            proj = load_project(Path(a.project_file))
        except (ProjectInvalid, OSError) as e:
            print(f"svc cloud env pull: {a.project_file}: {e}", file=sys.stderr)
            return EXIT_USAGE
        app = proj.apps.get(a.app)
        if app is None:
            print(f"svc cloud env pull: no app {a.app} in {a.project_file} (apps: "
                  f"{', '.join(proj.apps) or 'none'})", file=sys.stderr)
            return EXIT_USAGE
        scope = self.q(environment=a.environment)

        def values(path: str, extra: dict[str, Any]) -> dict[str, Secret]:
            out = {}
            for item in self.c.pages(path, {**scope, **extra}):
                v = item["value"]
                if "value" not in v:
                    raise ApiError(403, {"error": "redacted", "message": "this credential "
                                         "cannot reveal values (a session or a token with "
                                         "secrets:reveal can)"})
                out[item["key"]] = Secret(v["value"], v["fingerprint"])
            return out

        try:
            env = resolve_app_env(a.app, app.config.env,
                                  platform_all=values(self.p("/env"), {}),
                                  platform_app=values(self.p("/env"), {"app": a.app}),
                                  vault=values(self.p("/vault"), {}),
                                  app_dir=app.dir, project_dir=proj.dir,
                                  fingerprint=lambda v: "local")
        except MissingVaultKeys as e:
            print(f"svc cloud env pull: {e}", file=sys.stderr)
            return EXIT_API
        text = "".join(f"{k}={json.dumps(v.reveal())}\n" for k, v in sorted(env.items()))
        if a.out == "-":
            sys.stdout.write(text)
        else:
            fd = os.open(a.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            print(f"wrote {len(env)} variable(s) for app {a.app} to {a.out}")
        return EXIT_OK

    def vault(self) -> int:
        a = self.a
        scope = self.q(environment=a.environment)
        if a.action == "ls":
            rows = list(self.c.pages(self.p("/vault"), scope))
            self.show({"items": rows}, rows, ("key", "value", "version", "generated"))
        elif a.action == "set":
            value = _read_secret(f"{a.key}: ", False)
            out = self.c.call("PUT", self.p(f"/vault/{a.key}"), {**scope, "value": value})
            self.show(out, [{"key": a.key, "version": out["versions"].get(a.key, "unchanged")}],
                      ("key", "version"))
        elif a.action == "generate":
            body = {**scope, **({"length": a.length} if a.length else {}),
                    **({"charset": a.charset} if a.charset else {})}
            out = self.c.call("POST", self.p(f"/vault/{a.key}/generate"), body)
            self.show(out, [out["secret"]], ("key", "version", "fingerprint"))
        else:
            self.show(self.c.call("DELETE", self.p(f"/vault/{a.key}"),
                                  params={**scope, "confirm": a.key}))
        return EXIT_OK

    def domains(self) -> int:
        a = self.a
        if a.action == "ls":
            rows = [{**d, "txt": f"{d['verification']['name']} = {d['verification']['value']}"}
                    for d in self.c.pages(self.p("/domains"), self.q())]
            self.show({"items": rows}, rows, ("hostname", "state", "reason", "txt"))
        elif a.action == "add":
            out = self.c.call("POST", self.p("/domains"), self.q(hostname=a.hostname))
            d = out["domain"]
            self.show(out, [{"hostname": d["hostname"], "state": d["state"],
                             "publish": f"TXT {d['verification']['name']} "
                                        f"{d['verification']['value']}"}],
                      ("hostname", "state", "publish"))
        elif a.action == "verify":
            out = self.c.call("POST", self.p(f"/domains/{a.hostname}/verify"), self.q())
            self.show(out, [out["domain"]], ("hostname", "state", "reason"))
        else:
            self.show(self.c.call("DELETE", self.p(f"/domains/{a.hostname}"),
                                  params=self.q(confirm=a.hostname)))
        return EXIT_OK

    def backups(self) -> int:
        a = self.a
        if a.action == "ls":
            out = self.c.call("GET", self.p("/backups"), params=self.q())
            catalog = (out.get("backups") or {}).get("catalog") or []
            self.show(out, [b for b in catalog if isinstance(b, dict)],
                      ("backup_id", "name", "status", "created_at_ms", "bytes",
                       "deleted_at_ms"))
        elif a.action == "create":
            body = self.q(name=a.name) if a.name else self.q()
            self.show(self.c.call("POST", self.p("/backups"), body))
        elif a.action == "restore":
            self.show(self.c.call("POST", self.p(f"/backups/{a.backup_id}/restore"),
                                  self.q(confirm=a.backup_id)))
        elif a.action == "status":
            self.show(self.c.call("GET", self.p(f"/backups/{a.backup_id}/restore"),
                                  params=self.q()))
        elif a.action == "rm":
            self.show(self.c.call("DELETE", self.p(f"/backups/{a.backup_id}"),
                                  params=self.q(confirm=a.backup_id)))
        else:
            body = {k: v for k, v in (("enabled", a.enabled), ("schedule", a.schedule),
                                      ("retention", a.retention)) if v is not None}
            out = (self.c.call("PUT", self.p("/backups/config"), self.q(**body)) if body
                   else self.c.call("GET", self.p("/backups/config"), params=self.q()))
            self.show(out, [out["config"]], ("enabled", "schedule", "retention",
                                             "updated_by"))
        return EXIT_OK

    def links(self) -> int:
        a = self.a
        if a.action == "ls":
            rows = list(self.c.pages(self.p("/links"), self.q()))
            self.show({"items": rows}, rows, ("id", "url", "branch", "path", "last_sha"))
        elif a.action == "add":
            out = self.c.call("POST", self.p("/links"),
                              self.q(url=a.url, branch=a.branch, path=a.path))
            self.show(out, [out["link"]], ("id", "url", "branch", "last_sha"))
        elif a.action == "check":
            out = self.c.call("POST", self.p(f"/links/{a.link_id}/check"), self.q())
            self.show(out, [out["link"]], ("id", "sha", "new_commit", "error"))
        elif a.action == "commits":
            rows = list(self.c.pages(self.p(f"/links/{a.link_id}/commits"), self.q()))
            self.show({"items": rows}, rows, ("sha", "branch", "noticed_at", "status"))
        else:
            self.show(self.c.call("DELETE", self.p(f"/links/{a.link_id}"),
                                  params=self.q(confirm=a.link_id)))
        return EXIT_OK

    def tokens(self) -> int:
        a = self.a
        if a.action == "ls":
            out = self.c.call("GET", "/v1/tokens")
            self.show(out, out["items"], ("id", "label", "scopes", "expires_at", "revoked_at"))
        elif a.action == "create":
            body: dict[str, Any] = {"label": a.label, "expires_in_days": a.days}
            if a.scopes:
                body["scopes"] = a.scopes
            out = self.c.call("POST", "/v1/tokens", body)
            if a.json:
                self.show(out)
            else:
                print(out["token"])
                print(f"(shown once; scopes {', '.join(out['scopes'])}; expires "
                      f"{out['expires_at']})", file=sys.stderr)
        else:
            self.c.call("DELETE", f"/v1/tokens/{a.token_id}")
            print(f"revoked {a.token_id}")
        return EXIT_OK

    def deployments(self) -> int:
        a = self.a
        cols = ("version", "id", "status", "trigger", "started_by", "created_at")
        if a.area == "deploy":
            out = self.c.call("POST", self.p("/deployments"), self.q(
                ssps=a.ssps, **({"database_url": a.database_url} if a.database_url else {})))
            dep = out["deployment"]
            if a.wait:
                dep = self._wait(dep["id"])
                out = {**out, "deployment": dep}
            self.show(out, [dep], cols)
            return EXIT_OK if dep["status"] not in ("failed", "cancelled") else EXIT_API
        if a.area == "deployments" and a.deployment:
            out = self.c.call("GET", self.p(f"/deployments/{a.deployment}"), params=self.q())
            self.show(out, out["instances"], ("role", "id", "status", "url", "pid",
                                              "started_at"))
        elif a.area == "deployments":
            rows = list(self.c.pages(self.p("/deployments"), self.q()))
            self.show({"items": rows}, rows, cols)
        elif a.area in ("rollback", "cancel"):
            out = self.c.call("POST", self.p(f"/deployments/{a.deployment}/{a.area}"), self.q())
            self.show(out, [out["deployment"]], cols)
        elif a.area == "restart":
            out = self.c.call("POST", self.p("/restart"), self.q(
                roles=a.roles or [], upgrade=a.upgrade, clean=a.clean, surreal=a.surreal))
            self.show(out, [out["deployment"]], cols)
        elif a.area == "scale":
            out = self.c.call("POST", self.p("/scale"), self.q(ssps=a.ssps))
            self.show(out, [out["deployment"]], cols)
        else:
            out = self.c.call("GET", self.p(f"/deployments/{a.deployment}/logs"), params=self.q(
                instance=a.instance, level=a.level, q=a.q, since=a.since, limit=a.limit, cursor=a.cursor))
            if a.json:
                self.show(out)
            else:
                for ln in out["lines"]:
                    print(f"{ln['at']} {ln['role']:<10} {ln['text']}")
                if out["next_cursor"] and out["more"]:
                    print(f"(more: --cursor {out['next_cursor']})", file=sys.stderr)
        return EXIT_OK

    def _wait(self, dep: str, timeout: float = 600.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.c.call("GET", self.p(f"/deployments/{dep}"), params=self.q())
            d = dict(got["deployment"])
            if d["status"] in ("running", "failed", "cancelled", "superseded") \
                    or time.monotonic() > deadline:
                return d
            time.sleep(1.0)

    def usage(self) -> int:
        a = self.a
        out = self.c.call("GET", "/v1/usage", params=self.q(project=a.project, since=a.since))
        rows = [{**t, "amount": (f"{t['amount']} {t['currency']}" if "amount" in t else "-")}
                for t in out["totals"]]
        self.show(out, rows, ("metric", "quantity", "unit", "measured", "amount"))
        return EXIT_OK


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    cli = Cli(args, os.environ if env is None else env)
    area = {"signup": cli.account, "login": cli.account, "logout": cli.account,
            "whoami": cli.account, "tenants": cli.tenants, "projects": cli.projects,
            "env": cli.env_area, "vault": cli.vault, "domains": cli.domains,
            "links": cli.links, "tokens": cli.tokens, "backups": cli.backups, "usage": cli.usage,
            **dict.fromkeys(("deploy", "deployments", "rollback", "cancel", "restart", "scale",
                             "logs"), cli.deployments)}[args.area]
    try:
        return area()
    except ApiError as e:
        print(f"svc cloud {args.area}: {e.status} {e.body.get('error', '')}: "
              f"{e.body.get('message', '')}", file=sys.stderr)
        return EXIT_API
    except OSError as e:
        print(f"svc cloud {args.area}: cannot reach {cli.session.api}: {e}", file=sys.stderr)
        return EXIT_API
