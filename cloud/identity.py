"""Who is calling: users, their sign-in, and the three kinds of credentials.

* **CLI sessions** (``sess_live_...``): ``POST /v1/auth/login`` with e-mail and password;
  every scope the user's roles allow, ``secrets:reveal`` included; lifetime
  ``SVC_CLOUD_SESSION_TTL_SECS``; logout revokes.
* **API keys** (``key_live_...``): automation over REST, bound to one tenant, with scopes.
* **MCP tokens** (``mcp_live_...``, spec Authentication 9): the only credential
  ``/v1/mcp`` takes; scopes (default read-only), a label, an expiry (at most 365 days),
  revocation.

A credential is ``<prefix><id>_<secret>``: the id finds the row, the secret is stored only as
its SHA-256 (the secret is 256 random bits, so a fast hash is enough) and compared in constant
time. Every credential is shown once, in the answer that creates it. Missing, malformed,
unknown, expired and revoked credentials are all 401 with a message that never echoes what was
sent. Sessions and keys cannot mint MCP tokens or keys unless they are a user's session: a
leaked token cannot create more of itself.

Sign-in failures are limited per client address (10 per 5 minutes, kept in the database so
every worker and a restart see them); past the limit every attempt gets the same 401 without
the password being checked. Passwords are hashed with scrypt.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cloud.errors import BadRequest, Conflict, Forbidden, NotFound, Unauthorized
from cloud.scopes import REVEAL, SCOPES, expand, parse_scopes
from cloud.store import Duplicate, Store, guard, new_id, now, rid, row_id

__all__ = ["KINDS", "Identity", "Membership", "Principal", "parse_credential"]

KINDS = {"session": "sess_live_", "api_key": "key_live_", "mcp": "mcp_live_"}
_BY_PREFIX = {p: k for k, p in KINDS.items()}
_ID_LEN = 16
_CRED = re.compile(r"^(sess_live_|key_live_|mcp_live_)([a-z0-9]{16})_([A-Za-z0-9_-]{43})$")
_EMAIL = re.compile(r"^[^@\s]{1,64}@[A-Za-z0-9.-]{1,189}\.[A-Za-z]{2,63}$")
MAX_FAILURES = 10
WINDOW = timedelta(minutes=5)
MAX_TOKEN_DAYS = 365
BAD_SIGNIN = "e-mail or password is wrong, or too many failed attempts from this address"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "maxmem": 64 * 1024 * 1024, "dklen": 32}


@dataclass(frozen=True)
class Membership:
    tenant_id: str
    slug: str
    name: str
    kind: str  # personal | team
    role: str

    def public(self) -> dict[str, Any]:
        return {"id": self.tenant_id, "slug": self.slug, "name": self.name, "kind": self.kind,
                "role": self.role}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: the user, the credential and what it may touch."""

    kind: str  # session | api_key | mcp
    token_id: str
    user_id: str
    email: str
    personal_tenant: str
    scopes: frozenset[str]  # expanded
    memberships: dict[str, Membership] = field(default_factory=dict)
    bound_tenant: str | None = None  # API keys act in one tenant only

    def may(self, scope: str) -> bool:
        return scope in self.scopes

    @property
    def reveal(self) -> bool:
        return REVEAL in self.scopes

    def usable(self) -> list[Membership]:
        """The tenants this credential may act in."""
        if self.bound_tenant is not None:
            m = self.memberships.get(self.bound_tenant)
            return [m] if m else []
        return sorted(self.memberships.values(), key=lambda m: (m.kind != "personal", m.slug))

    def tenants_text(self) -> str:
        return ", ".join(f"{m.slug} ({m.tenant_id}{', personal' if m.kind == 'personal' else ''})"
                         for m in self.usable()) or "none"

    def tenants_detail(self) -> list[dict[str, str]]:
        return [{"id": m.tenant_id, "slug": m.slug} for m in self.usable()]


def parse_credential(token: str) -> tuple[str, str, str] | None:
    """``(kind, id, secret)`` of a well-formed credential, else None."""
    m = _CRED.match(token)
    if m is None:
        return None
    return _BY_PREFIX[m.group(1)], m.group(2), m.group(3)


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _scrypt(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, **_SCRYPT)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def check_password(password: str, stored: str) -> bool:
    try:
        _, salt, digest = stored.split("$")
        want = base64.b64decode(digest)
        got = _scrypt(password, base64.b64decode(salt))
    except ValueError:
        return False
    return hmac.compare_digest(got, want)


_DUMMY_HASH = hash_password(secrets.token_urlsafe(16))  # timing of an unknown e-mail


def _email(value: Any) -> str:
    if not isinstance(value, str) or not _EMAIL.match(value.strip()):
        raise BadRequest("email: not an e-mail address")
    return value.strip().lower()


def _password(value: Any) -> str:
    if not isinstance(value, str) or not 10 <= len(value) <= 256:
        raise BadRequest("password: a string of 10 to 256 characters")
    return value


def _slug_base(email: str) -> str:
    local = re.sub(r"[^a-z0-9]+", "-", email.split("@")[0].lower()).strip("-")
    return (local or "user")[:30].strip("-") or "user"


def _iso(v: Any) -> Any:
    return v.isoformat().replace("+00:00", "Z") if isinstance(v, datetime) else v


class Identity:
    """Users, sign-in and credentials (see module doc)."""

    def __init__(self, store: Store, *, signup_open: bool, session_ttl_secs: int,
                 tokens_per_user: int) -> None:
        self.store = store
        self.signup_open = signup_open
        self.session_ttl = timedelta(seconds=session_ttl_secs)
        self.tokens_per_user = tokens_per_user

    # ------------------------------------------------------------------ users
    async def signup(self, email: Any, password: Any, name: Any) -> dict[str, Any]:
        if not self.signup_open:
            raise Forbidden("sign-up is closed on this platform (SVC_CLOUD_SIGNUP=closed)",
                            code="signup_closed")
        addr = _email(email)
        pw = _password(password)
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 100):
            raise BadRequest("name: a string of 1 to 100 characters")
        hashed = await asyncio.to_thread(hash_password, pw)
        user_id, tenant_id = new_id("usr"), new_id("ten")
        base = _slug_base(addr)
        at = now()
        for attempt in range(6):
            slug = base if attempt == 0 else f"{base}-{secrets.token_hex(2)}"
            try:
                await self.store.tx([
                    ("CREATE $id CONTENT $c", {"id": rid("user", user_id), "c": {
                        "email": addr, "name": name or addr.split("@")[0], "password": hashed,
                        "personal_tenant": tenant_id, "created_at": at}}),
                    ("CREATE $id CONTENT $c", {"id": rid("tenant", tenant_id), "c": {
                        "slug": slug, "name": name or addr.split("@")[0], "kind": "personal",
                        "owner": user_id, "created_at": at}}),
                    ("CREATE $id CONTENT $c", {"id": rid("member", f"{tenant_id}.{user_id}"),
                                               "c": {"tenant": tenant_id, "user": user_id,
                                                     "role": "owner", "added_at": at}}),
                ])
            except Duplicate as e:
                if e.index == "user_email":
                    raise Conflict("email: a user with this e-mail already exists",
                                   code="exists") from None
                continue  # the personal tenant's slug is taken: another suffix
            return {"user": {"id": user_id, "email": addr}, "tenant": {
                "id": tenant_id, "slug": slug, "kind": "personal"}}
        raise Conflict("could not find a free slug for the personal tenant; try again")

    async def _failures(self, addr: str) -> int:
        n = await self.store.one(
            "RETURN array::len(SELECT VALUE id FROM signin_failure WHERE addr = $a "
            "AND at > $since)", {"a": addr, "since": now() - WINDOW}, read=True)
        return int(n or 0)

    async def login(self, email: Any, password: Any, label: Any, addr: str) -> dict[str, Any]:
        if not isinstance(email, str) or not isinstance(password, str) or len(password) > 256:
            raise BadRequest("email and password: strings")
        if label is not None and (not isinstance(label, str) or len(label) > 100):
            raise BadRequest("label: a string of at most 100 characters")
        if await self._failures(addr) >= MAX_FAILURES:
            raise Unauthorized(BAD_SIGNIN)
        user = await self.store.one("SELECT * FROM user WHERE email = $e LIMIT 1",
                                    {"e": email.strip().lower()}, read=True)
        user = user[0] if user else None
        ok = await asyncio.to_thread(check_password, password,
                                     user["password"] if user else _DUMMY_HASH)
        if not ok or user is None:
            await self.store.run("CREATE signin_failure CONTENT {addr: $a, at: time::now()}; "
                                 "DELETE signin_failure WHERE at < $old",
                                 {"a": addr, "old": now() - WINDOW})
            raise Unauthorized(BAD_SIGNIN)
        token, row = await self._mint("session", row_id(user), label or "cli",
                                      ("mcp:full", REVEAL), self.session_ttl, None)
        return {"token": token, "id": row["id"], "expires_at": row["expires_at"],
                "user": {"id": row_id(user), "email": user["email"]}}

    # ------------------------------------------------------------------ credentials
    async def authenticate(self, token: str | None, kinds: tuple[str, ...]) -> Principal:
        """The principal of a bearer credential of one of ``kinds``; 401 otherwise."""
        if not token:
            raise Unauthorized("missing or malformed Authorization header (want: Bearer "
                               "<token>)")
        parsed = parse_credential(token)
        if parsed is None or parsed[0] not in kinds:
            want = " or ".join(KINDS[k] + "..." for k in kinds)
            raise Unauthorized(f"malformed credential (want {want})")
        kind, tid, secret = parsed
        out = await self.store.run(
            "LET $t = (SELECT * FROM ONLY $tid); "
            "RETURN [$t, (SELECT email, personal_tenant FROM ONLY type::record('user', $t.user)),"
            " (SELECT tenant, role, type::record('tenant', tenant).slug AS slug, "
            "type::record('tenant', tenant).name AS name, "
            "type::record('tenant', tenant).kind AS kind FROM member WHERE user = $t.user)]", {"tid": rid("token", tid)}, read=True)
        row, user, members = out[-1] if out and out[-1] else (None, None, [])
        stored = row.get("hash", "") if isinstance(row, dict) else ""
        # constant time whatever was found: a missing row compares against a dummy
        good = hmac.compare_digest(_hash_secret(secret), stored or "0" * 64)
        if not isinstance(row, dict) or not good or row.get("kind") != kind or not user:
            raise Unauthorized("unknown credential")
        if row.get("revoked_at") is not None:
            raise Unauthorized("this credential was revoked")
        if row["expires_at"] <= now():
            raise Unauthorized("this credential has expired")
        ms = {m["tenant"]: Membership(m["tenant"], m["slug"], m["name"], m["kind"], m["role"])
              for m in members or [] if m.get("slug")}
        return Principal(kind=kind, token_id=tid, user_id=row["user"], email=user["email"],
                         personal_tenant=user["personal_tenant"],
                         scopes=expand(row.get("scopes") or ()), memberships=ms,
                         bound_tenant=row.get("tenant"))

    async def _mint(self, kind: str, user_id: str, label: str, scopes: tuple[str, ...],
                    ttl: timedelta, tenant: str | None) -> tuple[str, dict[str, Any]]:
        tid = new_id("", _ID_LEN)[1:]
        secret = secrets.token_urlsafe(32)
        at = now()
        row = {"kind": kind, "user": user_id, "hash": _hash_secret(secret), "label": label,
               "scopes": list(scopes), "tenant": tenant, "created_at": at,
               "expires_at": at + ttl, "revoked_at": None}
        await self.store.tx([
            (guard("array::len(SELECT VALUE id FROM token WHERE user = $u AND revoked_at IS "
                   "NONE AND expires_at > time::now()) >= $max", 409,
                   f"limit reached: at most {self.tokens_per_user} live credentials per user; "
                   "revoke some"), {"u": user_id, "max": self.tokens_per_user}),
            ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("token", tid), "c": row}),
        ])
        return KINDS[kind] + tid + "_" + secret, {"id": tid, **self._public(row, tid)}

    @staticmethod
    def _public(row: dict[str, Any], tid: str) -> dict[str, Any]:
        return {"id": tid, "kind": row["kind"], "label": row.get("label"),
                "scopes": row.get("scopes") or [], "tenant_id": row.get("tenant"),
                "created_at": _iso(row.get("created_at")),
                "expires_at": _iso(row.get("expires_at")),
                "revoked_at": _iso(row.get("revoked_at"))}

    async def mint(self, p: Principal, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """A new MCP token or API key for the session's user (shown once)."""
        if p.kind != "session":
            raise Forbidden("only a signed-in user's session can create credentials "
                            "(svc cloud login)", code="session_required")
        unknown = set(body) - {"label", "scopes", "expires_in_days", "tenant_id"}
        if unknown:
            raise BadRequest(f"{sorted(unknown)[0]}: unknown field")
        label = body.get("label")
        if not isinstance(label, str) or not 0 < len(label) <= 100:
            raise BadRequest("label: a string of 1 to 100 characters")
        scopes = parse_scopes(body.get("scopes"))
        days = body.get("expires_in_days", 90)
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_TOKEN_DAYS:
            raise BadRequest(f"expires_in_days: an integer from 1 to {MAX_TOKEN_DAYS}")
        tenant = None
        if kind == "api_key":
            ref = body.get("tenant_id")
            found = [m for m in p.memberships.values()
                     if ref is None and m.kind == "personal" or ref in (m.tenant_id, m.slug)]
            if not found:
                raise Forbidden(f"tenant_id: not a tenant you may use; you may use: "
                                f"{p.tenants_text()}", code="tenant_forbidden",
                                details={"tenants": p.tenants_detail()})
            tenant = found[0].tenant_id
        elif "tenant_id" in body:
            raise BadRequest("tenant_id: MCP tokens act in every tenant of their user (each "
                             "tool takes tenant_id); only API keys are bound to one")
        token, row = await self._mint(kind, p.user_id, label, scopes, timedelta(days=days),
                                      tenant)
        return {"token": token, **row,
                "note": "shown once: store it now, the platform keeps only its hash"}

    async def list_credentials(self, p: Principal, kind: str) -> list[dict[str, Any]]:
        rows = await self.store.one(
            "SELECT * FROM token WHERE user = $u AND kind = $k ORDER BY created_at DESC",
            {"u": p.user_id, "k": kind}, read=True)
        return [self._public(r, row_id(r)) for r in rows or []]

    async def revoke(self, p: Principal, kind: str, token_id: str) -> None:
        if p.kind != "session" and token_id != p.token_id:
            raise Forbidden("only a signed-in user's session can revoke other credentials",
                            code="session_required")
        out = await self.store.one(
            "UPDATE $id SET revoked_at = time::now() WHERE user = $u AND kind = $k "
            "AND revoked_at IS NONE RETURN id", {"id": rid("token", token_id[:40]),
                                                 "u": p.user_id, "k": kind})
        if not out:
            raise NotFound(f"no live {kind.replace('_', ' ')} {token_id[:40]} of yours")

    async def logout(self, p: Principal) -> None:
        await self.revoke(p, p.kind, p.token_id)

    @staticmethod
    def me(p: Principal) -> dict[str, Any]:
        return {"user": {"id": p.user_id, "email": p.email}, "credential": {
            "kind": p.kind, "id": p.token_id, "scopes": sorted(p.scopes & SCOPES),
            "tenant_id": p.bound_tenant},
            "personal_tenant": p.personal_tenant,
            "tenants": [m.public() for m in p.usable()]}
