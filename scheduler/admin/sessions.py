"""Admin sign-in (spec, Authentication 3-5): roster sign-in and break-glass.

``POST /admin/api/session``:

* ``{username, password}`` (roster): the scheduler signs in to the tenant database as that
  record user through the app's record-access method, ``SVC_ADMIN_ACCESS`` when set, else
  every record access ``INFO FOR DB`` lists (service accesses ``_00_*`` excepted, in name
  order), passing the identifier as ``$username`` and then as ``$email`` (with ``$password``).
  The user must then be on the ``_00_admin`` roster (``svc admin add``): an entry equal to the
  signed-in record id (``user:alice``) or to the identifier given.
* ``{password}`` (break-glass): compared in constant time with ``SVC_ADMIN_PASSWORD``;
  disabled when that is unset (no default). Sessions are flagged ``mode: breakglass``.

Every failure (unknown user, wrong password, not on the roster, break-glass disabled, the
address rate limited) answers the same 401 body (:data:`LOGIN_FAILED`); only an unreachable
tenant database is told apart (503 ``db_unreachable``) and does not count as a failure. A body
that is not an object of strings is 400. Success: 200 ``{token, subject, mode, scope,
expires_at_ms, persistent}``; the token is a session token (:mod:`scheduler.admin.tokens`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from typing import Any

from dbclient import DbAuthError, DbConnectionError, DbError, DbTimeout, record_signin
from engine.values import record_id_text
from scheduler.admin.cluster import Cluster
from scheduler.admin.errors import Invalid, Unauthorized, Unavailable
from scheduler.admin.ratelimit import LoginLimiter
from scheduler.admin.tokens import Principal, TokenAuthority

log = logging.getLogger("scheduler.admin.sessions")

__all__ = ["LOGIN_FAILED", "SignIn"]

LOGIN_FAILED = "sign-in failed"
FIELD_MAX = 1024
SIGNIN_TIMEOUT_SECS = 10.0
_ACCESS_RECORD = re.compile(r"\bTYPE\s+RECORD\b", re.IGNORECASE)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class SignIn:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, tokens: TokenAuthority, limiter: LoginLimiter) -> None:
        self.cluster = cluster
        self.tokens = tokens
        self.limiter = limiter
        pw = cluster.cfg.admin.password
        self._breakglass = _digest(pw) if pw else None
        self._warned_no_access = False

    @property
    def breakglass_available(self) -> bool:
        return self._breakglass is not None

    async def login(self, body: Any, addr: str) -> tuple[str, Principal]:
        if not isinstance(body, dict):
            raise Invalid("the body must be an object {username, password} or {password}")
        for key in ("username", "password"):
            v = body.get(key)
            if v is not None and (not isinstance(v, str) or len(v) > FIELD_MAX):
                raise Invalid(f"{key}: must be a string of at most {FIELD_MAX} characters")
        password = body.get("password")
        if not isinstance(password, str):
            raise Invalid("password: is required (a string)")
        if self.limiter.blocked(addr):
            raise Unauthorized(LOGIN_FAILED)
        username = body.get("username")
        subject: str | None
        if username is None:
            subject, mode = self._check_breakglass(password), "breakglass"
        else:
            subject, mode = await self._check_roster(username, password), "roster"
        if subject is None:
            self.limiter.fail(addr)
            log.info("admin sign-in failed from %s (%s)", addr, mode)
            raise Unauthorized(LOGIN_FAILED)
        log.info("admin sign-in: %s (%s) from %s", subject, mode, addr)
        return self.tokens.session(subject, mode)

    def _check_breakglass(self, password: str) -> str | None:
        if self._breakglass is None:
            _digest(password)  # the same work either way
            return None
        return "breakglass" if hmac.compare_digest(_digest(password), self._breakglass) else None

    async def _accesses(self) -> list[str]:
        pinned = self.cluster.cfg.admin.access
        if pinned:
            return [pinned]
        try:
            info = await self.cluster.db.query_one("INFO FOR DB", idempotent=True)
        except (DbConnectionError, DbTimeout) as e:
            raise Unavailable("the tenant database is unreachable; try again",
                              code="db_unreachable") from e
        accesses = info.get("accesses", {}) if isinstance(info, dict) else {}
        names = sorted(n for n, text in accesses.items()
                       if isinstance(n, str) and not n.startswith("_00_")
                       and _ACCESS_RECORD.search(str(text)))
        if not names and not self._warned_no_access:
            self._warned_no_access = True
            log.warning("roster sign-in impossible: the database defines no record access "
                        "method (set SVC_ADMIN_ACCESS or define one)")
        return names

    async def _check_roster(self, username: str, password: str) -> str | None:
        if not username.strip():
            return None
        try:
            accesses = await self._accesses()
        except DbError:
            return None
        cfg = self.cluster.cfg.db
        for access in accesses:
            for var in ("username", "email"):
                try:
                    rid = await record_signin(cfg, access, {var: username, "password": password},
                                              timeout=SIGNIN_TIMEOUT_SECS)
                except DbAuthError:
                    continue
                except (DbConnectionError, DbTimeout) as e:
                    raise Unavailable("the tenant database is unreachable; try again",
                                      code="db_unreachable") from e
                if rid is None:
                    continue
                who = record_id_text(rid) if not isinstance(rid, str) else rid
                if await self._on_roster([who, username, username.lower()]):
                    return who
                log.info("admin sign-in: %s signed in but is not on the _00_admin roster", who)
                return None
        return None

    async def _on_roster(self, candidates: list[str]) -> bool:
        try:
            found = await self.cluster.db.query_one(
                "SELECT VALUE ident FROM _00_admin WHERE ident IN $c LIMIT 1",
                {"c": candidates}, idempotent=True)
        except (DbConnectionError, DbTimeout) as e:
            raise Unavailable("the tenant database is unreachable; try again",
                              code="db_unreachable") from e
        except DbError as e:
            log.info("roster unreadable (%s): nobody is on it", type(e).__name__)
            return False
        return bool(found)
