"""The scheduler's link to the hosted platform (spec, Authentication 7).

Linked when ``SVC_CLOUD_API_URL``, ``SVC_CLOUD_PROJECT`` and ``SVC_AUTH_SECRET`` are all set;
the credential is that secret, sent as a bearer with the project's slug
(``X-Svc-Project``) to the platform's ``/v1/link/*`` routes. The platform made the secret
for the stack it deployed and keeps only its hash.

* ``GET /admin/api/cloud/deployment``: the platform's view of the deployment (forwarded);
* ``POST /admin/api/cloud/restart {roles, upgrade, clean, surreal}``: forwarded; tracked as
  an operation (``cloud_restart``) that ends when the platform has admitted the restart
  deployment (the platform's own record tracks it from there: it replaces this stack).

Answers: 409 ``not_linked`` without the three variables; a refused credential is 502
``cloud_auth`` (never 401: the operator's own session is fine, the platform refused the
scheduler); a platform that does not answer is 503 ``cloud_unreachable``, one that answers
garbage 502 ``cloud_error``. None of this touches the cluster, which keeps serving.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp

from ipc.http import client_session
from scheduler.admin.errors import AdminError, BadGateway, Conflict, Invalid, Unavailable

log = logging.getLogger("scheduler.admin.cloudlink")

__all__ = ["CloudLink"]

TIMEOUT_SECS = 10.0
PLATFORM = "the hosted platform"


class CloudLink:
    def __init__(self, api_url: str | None, project: str | None, secret: str | None) -> None:
        self.api_url = (api_url or "").rstrip("/")
        self.project = project or ""
        self._secret = secret or ""

    @property
    def linked(self) -> bool:
        return bool(self.api_url and self.project and self._secret)

    def refuse_unlinked(self) -> None:
        if not self.linked:
            raise Conflict(f"Not linked to {PLATFORM}", code="not_linked")

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
        self.refuse_unlinked()
        headers = {"Authorization": f"Bearer {self._secret}", "X-Svc-Project": self.project}
        url = f"{self.api_url}/v1/link/{path}"
        try:
            async with client_session(timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECS)) as s, \
                    s.request(method, url, headers=headers, json=body) as r:
                status = r.status
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.warning("the platform at %s did not answer: %s", self.api_url, type(e).__name__)
            raise Unavailable(f"{PLATFORM} at {self.api_url} did not answer "
                              f"({type(e).__name__}); the cluster keeps serving, try again",
                              code="cloud_unreachable") from None
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            doc = None
        if status in (401, 403):
            raise BadGateway(f"{PLATFORM} refused this scheduler's link credential "
                             "(SVC_CLOUD_PROJECT / SVC_AUTH_SECRET)", code="cloud_auth")
        if not isinstance(doc, dict):
            raise BadGateway(f"{PLATFORM} answered {status} without a JSON object",
                             code="cloud_error")
        if status in (400, 409, 429):
            raise AdminError(str(doc.get("message") or f"{PLATFORM} refused the request")[:500],
                             code=str(doc.get("error") or "cloud_refused"), status=status)
        if status >= 500 and status != 503:
            raise BadGateway(f"{PLATFORM} failed ({status}): "
                             f"{str(doc.get('message') or '')[:300]}", code="cloud_error")
        if status == 503:
            raise Unavailable(f"{PLATFORM} is unavailable: {str(doc.get('message'))[:300]}",
                              code="cloud_unavailable")
        if status >= 300:
            raise BadGateway(f"{PLATFORM} answered {status}", code="cloud_error")
        return doc

    async def deployment(self) -> dict[str, Any]:
        return await self.call("GET", "deployment")

    async def restart(self, body: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(body) - {"roles", "upgrade", "clean", "surreal"})
        if unknown:
            raise Invalid(f"{unknown[0][:60]}: unknown field (roles, upgrade, clean, surreal)")
        roles = body.get("roles", [])
        if roles is None:
            roles = []
        if not isinstance(roles, list) or any(not isinstance(r, str) for r in roles):
            raise Invalid("roles: a list of role names (db, scheduler, ssps); empty means "
                          "scheduler and SSPs")
        for k in ("upgrade", "clean", "surreal"):
            if k in body and not isinstance(body[k], bool):
                raise Invalid(f"{k}: must be true or false")
        return await self.call("POST", "restart", {**body, "roles": roles})
