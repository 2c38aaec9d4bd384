"""Admin sign-in (spec, Authentication 3-5): roster sign-in and break-glass.

``POST /admin/api/session``:

* ``{username, password}`` (roster): the scheduler signs in to the tenant database as that
  record user through the app's record-access method, ``SVC_ADMIN_ACCESS`` when set, else
  every record access ``INFO FOR DB`` lists (service accesses ``_00_*`` excepted, in name
  order), passing the identifier as ``$username`` and then as ``$email`` (with ``$password``).
  The user must then be on the ``_00_admin`` roster (``svc admin add``): an entry whose
  ``record`` is the signed-in record, or whose ``ident`` is that record's id text
  (``user:alice``), exactly. What the user typed is never compared with the roster: anyone
  may sign up as ``CAROL``, or as ``carol`` through another access method, and neither is the
  record ``svc admin add carol`` resolved to (``svccli.admin``). An entry of an older release
  that names no record matches nobody (a warning says to add it again).
* ``{password}`` (break-glass): compared in constant time with ``SVC_ADMIN_PASSWORD``;
  disabled when that is unset (no default). Sessions are flagged ``mode: breakglass``.

Every failure (unknown user, wrong password, not on the roster, break-glass disabled, the
address rate limited) answers the same 401 body (:data:`LOGIN_FAILED`); only an unreachable
tenant database is told apart (503 ``db_unreachable``) and does not count as a failure. A body
that is not an object of strings is 400, and counts as a failure (so does a body that is not
JSON at all: the route, ``scheduler.admin.app``).

:class:`Standing` re-checks on every use of a token that its subject may still act: a roster
subject must still be on the roster (looked up at most every ``STANDING_CACHE_SECS`` per
subject), a break-glass one must carry the fingerprint of the current ``SVC_ADMIN_PASSWORD``
(changing or unsetting it ends those sessions and the tokens they minted). Success: 200 ``{token, subject, mode, scope,
expires_at_ms, persistent}``; the token is a session token (:mod:`scheduler.admin.tokens`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from typing import Any

from surrealdb import RecordID

from dbclient import DbAuthError, DbError, record_signin
from engine.values import parse_record_id, record_id_text
from scheduler.admin.cluster import Cluster
from scheduler.admin.errors import (
    DB_UNREACHABLE,
    Invalid,
    Unauthorized,
    Unavailable,
    db_unreachable,
)
from scheduler.admin.ratelimit import LoginLimiter
from scheduler.admin.tokens import BREAKGLASS_SUBJECT, Principal, TokenAuthority

log = logging.getLogger("scheduler.admin.sessions")

__all__ = ["LOGIN_FAILED", "SignIn", "Standing", "roster_has"]

LOGIN_FAILED = "sign-in failed"
FIELD_MAX = 1024
SIGNIN_TIMEOUT_SECS = 10.0
#: how long a roster answer is reused for one subject (a removal takes effect within it)
STANDING_CACHE_SECS = 5.0
#: how long a roster answer still stands while the database is unreachable
STANDING_STALE_SECS = 300.0
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
        self._warned_unbound = False

    @property
    def breakglass_available(self) -> bool:
        return self._breakglass is not None

    async def login(self, body: Any, addr: str) -> tuple[str, Principal]:
        if self.limiter.blocked(addr):
            raise Unauthorized(LOGIN_FAILED)
        try:
            self._check_shape(body)
        except Invalid:
            self.limiter.fail(addr)
            raise
        password = body["password"]
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

    @staticmethod
    def _check_shape(body: Any) -> None:
        if not isinstance(body, dict):
            raise Invalid("the body must be an object {username, password} or {password}")
        for key in ("username", "password"):
            v = body.get(key)
            if v is not None and (not isinstance(v, str) or len(v) > FIELD_MAX):
                raise Invalid(f"{key}: must be a string of at most {FIELD_MAX} characters")
        if not isinstance(body.get("password"), str):
            raise Invalid("password: is required (a string)")

    def _check_breakglass(self, password: str) -> str | None:
        if self._breakglass is None:
            _digest(password)  # the same work either way
            return None
        return BREAKGLASS_SUBJECT if hmac.compare_digest(_digest(password), self._breakglass) \
            else None

    async def _accesses(self) -> list[str]:
        pinned = self.cluster.cfg.admin.access
        if pinned:
            return [pinned]
        try:
            info = await self.cluster.db.query_one("INFO FOR DB", idempotent=True)
        except DB_UNREACHABLE as e:
            raise db_unreachable("the tenant database") from e
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
        if not self._warned_unbound:
            self._warned_unbound = True
            await warn_unbound(self.cluster.db)
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
                except DB_UNREACHABLE as e:
                    raise db_unreachable("the tenant database") from e
                if rid is None:
                    continue
                who = record_id_text(rid) if not isinstance(rid, str) else rid
                if await roster_has(self.cluster.db, who):
                    return who
                log.info("admin sign-in: %s signed in but is not on the _00_admin roster", who)
                return None
        return None



async def roster_has(db: Any, who: str) -> bool:
    """``who`` (a record id text) is on the ``_00_admin`` roster: an entry bound to that record,
    or whose identifier is that record id. Unavailable when the database cannot be reached."""
    try:
        rid = parse_record_id(who)
    except ValueError:
        return False
    try:
        found = await db.query_one(
            "SELECT VALUE ident FROM _00_admin WHERE record = $r OR ident = $t LIMIT 1",
            {"r": RecordID(rid.table_name, rid.id), "t": who}, idempotent=True)
    except DB_UNREACHABLE as e:
        raise db_unreachable("the tenant database") from e
    except DbError as e:
        log.info("roster unreadable (%s): nobody is on it", type(e).__name__)
        return False
    return bool(found)


async def warn_unbound(db: Any) -> None:
    """Log the roster entries of older releases (an identifier bound to no record): they match
    nobody now, since matching what a user typed is what let look-alikes in."""
    try:
        idents = await db.query_one(
            "SELECT VALUE ident FROM _00_admin WHERE record = NONE "
            "AND !string::contains(<string> ident, ':')", idempotent=True) or []
    except DbError:
        return
    for ident in idents[:20]:
        log.warning("roster entry %r names no record and matches nobody: add it again "
                    "(svc admin add %s) to bind it to its user's record", str(ident)[:80],
                    str(ident)[:80])


class Standing:
    """Whether a token's subject may still act (see the module docstring)."""

    def __init__(self, db: Any, tokens: TokenAuthority,
                 clock: Any = time.monotonic) -> None:
        self.db = db
        self.tokens = tokens
        self.clock = clock
        self._cache: dict[str, tuple[float, bool]] = {}

    async def __call__(self, p: Principal) -> bool:
        if p.subject == BREAKGLASS_SUBJECT:
            return self.tokens.breakglass_current(p)
        now = self.clock()
        hit = self._cache.get(p.subject)
        if hit is not None and now - hit[0] < STANDING_CACHE_SECS:
            return hit[1]
        try:
            ok = await roster_has(self.db, p.subject)
        except Unavailable:
            # The database is away: the last answer stands for a while, then nobody.
            if hit is not None and now - hit[0] < STANDING_STALE_SECS:
                return hit[1]
            raise
        self._cache[p.subject] = (now, ok)
        if len(self._cache) > 10_000:
            self._cache.pop(next(iter(self._cache)))
        return ok
