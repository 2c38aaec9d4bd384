"""A project's backups through the platform: each call is forwarded to the admin API of the
scheduler of the project's running deployment (its backup plane does the work; the platform
keeps no copy of the catalog).

The platform signs in to that scheduler as its break-glass operator: the password the
deployment's scheduler runs with (the project's ``SVC_ADMIN_PASSWORD``, else one the
reconcile worker made for it) is kept on the deployment encrypted under the tenant's data
key (associated data binding tenant, project and deployment), never in plaintext. The
session token is cached per deployment in the process and signed in again once when the
scheduler refuses it (a restarted scheduler).

Errors: no running deployment is 409 ``not_running``; a scheduler that does not answer is
503 ``deployment_unreachable``; the scheduler's own refusals keep their status and message
(400, 404, 409, 503: backups without object storage, a restore while not ready), and any
other failure of the scheduler is 502 ``deployment_error``, never a 500 of the platform.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from cloud.crypto import decrypt, encrypt
from cloud.errors import BadRequest, CloudError, Conflict, NotFound, Unavailable
from cloud.keys import DataKeys
from cloud.store import Store, row_id

log = logging.getLogger("cloud.backupfwd")

__all__ = ["BackupForwarder", "admin_aad", "seal_admin_password"]

TIMEOUT_SECS = 30.0
#: the scheduler's answers passed on with their own status
_PASSED = {400: BadRequest, 404: NotFound, 409: Conflict, 503: Unavailable}


class BadGateway(CloudError):
    status = 502
    code = "deployment_error"


def admin_aad(tenant: str, project: str, deployment: str) -> bytes:
    parts = ("admin-password-v1", tenant, project, deployment)
    return b"".join(len(p.encode()).to_bytes(4, "big") + p.encode() for p in parts)


async def seal_admin_password(keys: DataKeys, tenant: str, project: str, deployment: str,
                              password: str) -> str:
    return encrypt(await keys.get(tenant), admin_aad(tenant, project, deployment), password)


def _http(method: str, url: str, body: Any, token: str | None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_SECS) as r:
            raw = r.read()
            status = int(r.status)
    except urllib.error.HTTPError as e:
        raw, status = e.read(), int(e.code)
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, {"message": raw[:200].decode("utf-8", "replace")}


class BackupForwarder:
    def __init__(self, store: Store, keys: DataKeys) -> None:
        self.store = store
        self.keys = keys
        self._tokens: dict[str, str] = {}

    async def _target(self, project: dict[str, Any]) -> tuple[str, str, str]:
        """(deployment id, the scheduler's admin URL, its password) of the running
        deployment."""
        rows = await self.store.one(
            "SELECT * FROM deployment WHERE project = $p AND status = 'running' "
            "ORDER BY version DESC LIMIT 1", {"p": project["id"]}, read=True) or []
        if not rows:
            raise Conflict(f"project {project['slug']} has no running deployment: backups go "
                           "through its scheduler (deploy first)", code="not_running")
        dep = rows[0]
        did = row_id(dep)
        urls = await self.store.one(
            "SELECT VALUE url FROM instance WHERE deployment = $d AND role = 'scheduler' "
            "AND status = 'healthy' LIMIT 1", {"d": did}, read=True) or []
        sealed = dep.get("admin_secret")
        if not urls or not sealed:
            raise Unavailable(f"the scheduler of deployment v{dep['version']} is not up "
                              "(it is being relaunched, or the deployment predates backups "
                              "through the platform: redeploy)", code="deployment_unreachable")
        password = decrypt(await self.keys.get(project["tenant"]),
                           admin_aad(project["tenant"], project["id"], did), sealed)
        return did, str(urls[0]), password

    async def _call(self, url: str, method: str, path: str, body: Any,
                    token: str | None) -> tuple[int, Any]:
        try:
            return await asyncio.to_thread(_http, method, url + path, body, token)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            log.warning("backup call to the deployed scheduler failed: %s", type(e).__name__)
            raise Unavailable("the project's scheduler does not answer; try again shortly",
                              code="deployment_unreachable") from None

    async def call(self, project: dict[str, Any], method: str, path: str,
                   body: Any = None) -> Any:
        """``method`` ``/admin/api{path}`` on the project's scheduler; its JSON answer."""
        did, url, password = await self._target(project)
        for attempt in range(2):
            token = self._tokens.get(did)
            if token is None:
                status, got = await self._call(url, "POST", "/admin/api/session",
                                               {"password": password}, None)
                if status != 200 or not isinstance(got, dict) or "token" not in got:
                    raise BadGateway(f"the project's scheduler refused the platform's sign-in "
                                     f"(HTTP {status})")
                token = str(got["token"])
                self._tokens[did] = token
            status, got = await self._call(url, method, "/admin/api" + path, body, token)
            if status == 401 and attempt == 0:
                self._tokens.pop(did, None)  # a restarted scheduler: sign in again
                continue
            if 200 <= status < 300:
                return got
            message = (got.get("message") or got.get("error") if isinstance(got, dict)
                       else None) or f"HTTP {status}"
            code = got.get("code") if isinstance(got, dict) else None
            kind = _PASSED.get(status)
            if kind is not None:
                raise kind(f"the project's scheduler: {message}",
                           code=str(code) if code else None)
            raise BadGateway(f"the project's scheduler answered HTTP {status}: {message}")
        raise BadGateway("the project's scheduler refused the platform's session")

    @staticmethod
    def backup_path(backup_id: Any) -> str:
        if not isinstance(backup_id, str) or not 0 < len(backup_id) <= 200:
            raise BadRequest("backup_id: a backup id from backups_list")
        return "/backups/" + quote(backup_id, safe="")
