"""Repo links: a git repository (URL, branch, path of the project inside it) linked to a
project, and the commits noticed on its branch.

The branch head is read with ``git ls-remote`` (no clone): by the background worker every
``SVC_CLOUD_REPO_POLL_SECS``, and at once by ``link_check``. A head that differs from the last
one seen is recorded as a ``repo_commit`` row in state ``new`` (its id is the link and the
sha, so two pollers record it once): the deployment step of the platform's next part takes
those rows.

Only ``https://``, ``ssh://`` and ``git@host:path`` URLs are accepted, without credentials in
them (a URL carrying a password would be stored and shown); ``file://`` and absolute paths
only with ``SVC_CLOUD_LOCAL_REPOS=true`` (development and tests: they read the server's own
disk). git runs with ``GIT_ALLOW_PROTOCOL`` limited to the same transports (never ``ext::``,
which runs commands), no terminal prompt, and a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Any
from urllib.parse import urlsplit

from cloud.errors import BadRequest, NotFound
from cloud.store import Store, limit_guard, new_id, now, rid, row_id

log = logging.getLogger("cloud.repolinks")

__all__ = ["GitRemote", "RepoLinks", "check_branch", "check_url"]

_SCP = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._~/-]+$")
_BRANCH = re.compile(r"^(?![/-])(?!.*//)(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/-]{1,200}(?<![/.])$")
_PATH = re.compile(r"^[A-Za-z0-9._/-]{0,200}$")
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
GIT_TIMEOUT_SECS = 20.0


def check_url(value: Any, local_ok: bool) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 500 or value.startswith("-") \
            or any(c.isspace() for c in value):
        raise BadRequest("url: a git repository URL (https://, ssh:// or git@host:path)")
    if _SCP.match(value):
        return value
    if value.startswith("/") and local_ok:
        return value
    parts = urlsplit(value)
    if parts.scheme == "file" and local_ok and parts.path.startswith("/"):
        return value
    if parts.scheme not in ("https", "ssh") or not parts.hostname:
        local = " (file:// and local paths need SVC_CLOUD_LOCAL_REPOS=true)" \
            if parts.scheme == "file" or value.startswith("/") else ""
        raise BadRequest("url: a git repository URL (https://, ssh:// or git@host:path)" + local)
    if parts.password is not None or (parts.scheme == "https" and parts.username):
        raise BadRequest("url: must not carry credentials (use a deploy key; a URL with a "
                         "password would be stored and shown)")
    return value


def check_branch(value: Any) -> str:
    b = "main" if value is None else value
    if not isinstance(b, str) or not _BRANCH.match(b) or b.endswith(".lock"):
        raise BadRequest("branch: a git branch name (default main)")
    return b


def _check_path(value: Any) -> str:
    p = "" if value is None else value
    if not isinstance(p, str) or not _PATH.match(p) or ".." in p.split("/"):
        raise BadRequest("path: the project's directory inside the repository (default: its "
                         "root), relative, without ..")
    return p.strip("/")


class GitRemote:
    """``git ls-remote`` of one branch."""

    def __init__(self, local_ok: bool, timeout: float = GIT_TIMEOUT_SECS) -> None:
        self.timeout = timeout
        self.env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
        self.env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false",
                        GIT_SSH_COMMAND="ssh -o BatchMode=yes -o ConnectTimeout=10",
                        GIT_ALLOW_PROTOCOL="https:ssh" + (":file" if local_ok else ""))

    async def head(self, url: str, branch: str) -> tuple[str | None, str | None]:
        """``(sha, None)``, ``(None, None)`` when the branch does not exist, or
        ``(None, reason)``."""
        try:
            proc = await asyncio.create_subprocess_exec(
                "git", "ls-remote", "--heads", "--", url, f"refs/heads/{branch}",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env)
        except OSError as e:
            return None, f"git could not start: {e.strerror}"
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return None, f"git ls-remote did not answer within {self.timeout:.0f}s"
        if proc.returncode != 0:
            first = err.decode("utf-8", "replace").strip().splitlines()[:1]
            return None, ("git ls-remote failed: " + (first[0][:200] if first else
                                                      f"exit {proc.returncode}"))
        for line in out.decode().splitlines():
            sha, _, ref = line.partition("\t")
            if ref == f"refs/heads/{branch}" and _SHA.match(sha):
                return sha, None
        return None, None


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row_id(row), "url": row["url"], "branch": row["branch"],
            "path": row.get("path") or "", "last_sha": row.get("last_sha"),
            "last_checked_at": row.get("last_checked_at"), "last_error": row.get("last_error"),
            "created_at": row.get("created_at")}


class RepoLinks:
    def __init__(self, store: Store, git: GitRemote, *, local_ok: bool,
                 max_per_project: int) -> None:
        self.store = store
        self.git = git
        self.local_ok = local_ok
        self.max_per_project = max_per_project

    async def listing(self, project: dict[str, Any], after: str | None, limit: int
                   ) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.store.one(
            "SELECT * FROM repo_link WHERE project = $p AND id > $after ORDER BY id LIMIT $n",
            {"p": project["id"], "after": rid("repo_link", after or ""), "n": limit + 1},
            read=True) or []
        return ([_public(r) for r in rows[:limit]],
                row_id(rows[limit - 1]) if len(rows) > limit else None)

    async def find(self, project: dict[str, Any], link_id: Any) -> dict[str, Any]:
        if not isinstance(link_id, str) or not 0 < len(link_id) <= 40:
            raise BadRequest("link_id: a link id (lnk_...)")
        row = await self.store.get("repo_link", link_id)
        if row is None or row.get("project") != project["id"]:
            raise NotFound(f"no repo link {link_id} in project {project['slug']}")
        return row

    async def create(self, project: dict[str, Any], url: Any, branch: Any, path: Any,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        row = {"tenant": project["tenant"], "project": project["id"],
               "url": check_url(url, self.local_ok), "branch": check_branch(branch),
               "path": _check_path(path), "created_at": now(), "last_sha": None,
               "last_checked_at": None, "last_error": None}
        lid = new_id("lnk")
        await self.store.tx([
            ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("repo_link", lid), "c": row}),
            limit_guard("array::len(SELECT VALUE id FROM repo_link WHERE project = $p)",
                        "links_per_project", self.max_per_project, project["tenant"],
                        {"p": project["id"]}),
            *extra,
        ])
        out = _public({**row, "id": lid})
        out["first_check"] = await self.check({**row, "id": rid("repo_link", lid)})
        return out

    async def delete(self, project: dict[str, Any], link_id: Any,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        row = await self.find(project, link_id)
        await self.store.tx([("DELETE $id", {"id": row["id"]}),
                             ("DELETE repo_commit WHERE link = $l", {"l": row_id(row)}),
                             *extra])
        return {"id": row_id(row), "removed": True}

    async def check(self, row: dict[str, Any]) -> dict[str, Any]:
        """Read the branch head once; record a new commit. Returns what was seen."""
        lid = row_id(row)
        sha, error = await self.git.head(row["url"], row["branch"])
        if sha is None and error is None:
            error = f"branch {row['branch']} does not exist"
        at = now()
        stmts: list[tuple[str, dict[str, Any]]] = [(
            "UPDATE $id SET last_checked_at = $at, last_error = $e"
            + (", last_sha = $sha" if sha else "") + " RETURN NONE",
            {"id": rid("repo_link", lid), "at": at, "e": error, "sha": sha})]
        new = sha is not None and sha != row.get("last_sha")
        if sha is not None and new:
            stmts.append(("UPSERT $id SET link = $l, tenant = $t, project = $p, sha = $sha, "
                          "branch = $b, path = $path, noticed_at = noticed_at ?? $at, "
                          "status = status ?? 'new' RETURN NONE",
                          {"id": rid("repo_commit", f"{lid}.{sha}"), "l": lid,
                           "t": row["tenant"], "p": row["project"], "sha": sha,
                           "b": row["branch"], "path": row.get("path") or "", "at": at}))
            log.info("repo link %s: new commit %s on %s", lid, sha[:12], row["branch"])
        await self.store.tx(stmts)
        return {"sha": sha, "new_commit": new, "error": error, "checked_at": at}

    async def check_by_id(self, project: dict[str, Any], link_id: Any,
                          extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        row = await self.find(project, link_id)
        seen = await self.check(row)
        if extra:
            await self.store.tx(extra)
        return {"id": row_id(row), **seen}

    async def commits(self, project: dict[str, Any], link_id: Any, before: str | None,
                      limit: int) -> tuple[list[dict[str, Any]], str | None]:
        row = await self.find(project, link_id)
        rows = await self.store.one(
            "SELECT *, <string> noticed_at + '|' + sha AS k FROM repo_commit WHERE link = $l "
            "AND <string> noticed_at + '|' + sha < $before ORDER BY k DESC LIMIT $n",
            {"l": row_id(row), "before": before or "~", "n": limit + 1}, read=True) or []
        items = [{"sha": r["sha"], "branch": r["branch"], "path": r.get("path") or "",
                  "noticed_at": r["noticed_at"], "status": r["status"]} for r in rows[:limit]]
        return items, (rows[limit - 1]["k"] if len(rows) > limit else None)

    async def poll_all(self, concurrency: int = 4) -> int:
        """Check every link once (the worker's tick); returns how many new commits."""
        rows = await self.store.one(
            "SELECT * FROM repo_link WHERE type::record('project', project).deleted_at IS NONE",
            read=True) or []
        sem = asyncio.Semaphore(concurrency)

        async def one(r: dict[str, Any]) -> bool:
            async with sem:
                try:
                    return bool((await self.check(r))["new_commit"])
                except Exception:  # noqa: BLE001 - one bad link must not stop the others
                    log.exception("repo link %s: check failed", row_id(r))
                    return False

        return sum(await asyncio.gather(*(one(r) for r in rows)))
