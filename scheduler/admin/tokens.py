"""Admin bearer tokens: session tokens and minted (MCP) tokens, their encoding, registry and
revocation.

Two kinds share one format:

* ``session``: issued by a sign-in (roster or break-glass), scope ``full``, lifetime
  ``SVC_ADMIN_SESSION_TTL_SECS``; logout revokes it in memory (a restart forgets, spec
  Authentication 4).
* ``minted``: ``POST /admin/api/tokens {label, scope: read|full, ttl_days <= 365}``, mode
  ``mcp``; shown once. ``DELETE /admin/api/tokens {token}`` (or a logout with it) revokes it.

Every token issued is kept in a registry by its *reference*: the SHA-256 of its id (``jti``)
cut to 24 hex digits, never the token itself, so the registry file opens nothing. The registry
lists them (``GET /admin/api/tokens``: label, scope, subject, mode, kind, times, whether
revoked) and revokes one by reference (``DELETE /admin/api/tokens/{id}``), so an operator can
end a leaked token without holding it. The registry and every revocation except a logout
(the spec keeps that one in memory) are written to ``admin-tokens.json`` beside the replica
(temporary file, fsync, rename) and kept until the token's own expiry, so they survive a
restart: a revocation or a mint is written at once, a sign-in's new session at most once per
``WRITE_INTERVAL_SECS`` (a burst of sign-ins must not fsync the whole file each time; a
session issued in the last second before a crash verifies after it but is not listed). A file
of an older release, ``admin-revoked.json`` (revoked ids), is read too.

A token also has to stand when it is used (:meth:`TokenAuthority.check`, the ``standing``
callable the admin plane sets, ``scheduler.admin.sessions.Standing``): its subject must still
be on the roster, or, for break-glass, its ``bg`` claim must be the fingerprint of the current
``SVC_ADMIN_PASSWORD`` (an HMAC under the token key, never the password). A token minted by a
session carries that session's subject, so it falls with it.

Encoding: with ``SVC_AUTH_SECRET`` a token is an HS256 JWT (PyJWT) carrying ``sub, mode,
scope, label, kind, jti, iat, exp, aud`` (and ``bg``) and signed with a key derived from the
secret for this purpose only (HKDF-SHA256, RFC 5869, info ``surreal-views admin token v1``): it
survives a restart and reveals nothing about the secret. Without the secret a token is 32
random bytes (``sva_…``) looked up in memory, lost on restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jwt

from ipc.statefile import read_state, replace_file
from scheduler.admin.errors import Forbidden, Invalid, NotFound, Unauthorized

log = logging.getLogger("scheduler.admin.tokens")

__all__ = ["BREAKGLASS_SUBJECT", "MAX_TTL_DAYS", "Principal", "TokenAuthority", "derive_key",
           "token_ref"]

AUDIENCE = "svc-admin"
MAX_TTL_DAYS = 365
LABEL_MAX = 200
REGISTRY_FILE = "admin-tokens.json"
LEGACY_REVOKED_FILE = "admin-revoked.json"
REGISTRY_MAX = 10_000  # entries kept (the soonest to expire go first beyond it)
WRITE_INTERVAL_SECS = 1.0  # new sessions are written at most this often
BREAKGLASS_SUBJECT = "breakglass"
_INFO = b"surreal-views admin token v1"
_SALT = b"surreal-views/scheduler/admin"
_BG_LABEL = b"surreal-views break-glass fingerprint v1"


def derive_key(secret: str) -> bytes:
    """HKDF-SHA256 (extract then one expand block) of the shared secret: a key used for admin
    tokens only, so a token never helps anyone who wants the secret or another use of it."""
    prk = hmac.new(_SALT, secret.encode("utf-8"), hashlib.sha256).digest()
    return hmac.new(prk, _INFO + b"\x01", hashlib.sha256).digest()


def token_ref(token_id: str) -> str:
    """The reference a token is listed and revoked by: a digest of its id, not the id."""
    return hashlib.sha256(token_id.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class Principal:
    """Who a bearer token speaks for."""

    subject: str
    mode: str  # roster | breakglass | mcp
    scope: str  # full | read
    label: str
    kind: str  # session | minted
    token_id: str
    expires_at: int  # epoch seconds
    breakglass_fp: str = ""  # the break-glass password's fingerprint when issued

    @property
    def ref(self) -> str:
        return token_ref(self.token_id)

    def public(self) -> dict[str, Any]:
        """The ``/admin/api/me`` body."""
        return {"subject": self.subject, "label": self.label, "mode": self.mode,
                "scope": self.scope, "kind": self.kind, "id": self.ref,
                "expires_at_ms": self.expires_at * 1000}


class TokenAuthority:
    """Issues, verifies, lists and revokes tokens (see the module docstring)."""

    def __init__(self, secret: str | None, session_ttl_secs: int,
                 directory: Path | None, *, breakglass_password: str | None = None) -> None:
        self.key = derive_key(secret) if secret else None
        self.session_ttl_secs = session_ttl_secs
        # Fingerprints only need a key that outlives the tokens it vouches for.
        fp_key = self.key or secrets.token_bytes(32)
        self._bg_fp = (hmac.new(fp_key, _BG_LABEL + breakglass_password.encode("utf-8"),
                                hashlib.sha256).hexdigest()[:32]
                       if breakglass_password else "")
        self._random: dict[str, Principal] = {}
        self._logged_out: dict[str, int] = {}  # ref -> exp (memory: a restart forgets)
        # ref -> {kind, label, scope, mode, subject, created_at, expires_at, revoked_at}
        self._registry: dict[str, dict[str, Any]] = {}
        self.path = directory / REGISTRY_FILE if directory is not None else None
        self._legacy = directory / LEGACY_REVOKED_FILE if directory is not None else None
        #: set by the admin plane: may this principal still act (roster, break-glass)?
        self.standing: Callable[[Principal], Awaitable[bool]] | None = None
        self._written_at = float("-inf")
        self._dirty = False
        self._load()

    @property
    def persistent(self) -> bool:
        """Tokens survive a restart (``sessions_persistent`` in the config)."""
        return self.key is not None

    # ------------------------------------------------------------------ issue
    def issue(self, subject: str, mode: str, scope: str, label: str, kind: str,
              ttl_secs: int) -> tuple[str, Principal]:
        now = int(time.time())
        p = Principal(subject=subject, mode=mode, scope=scope, label=label, kind=kind,
                      token_id=uuid.uuid4().hex, expires_at=now + ttl_secs,
                      breakglass_fp=self._bg_fp if subject == BREAKGLASS_SUBJECT else "")
        self._registry[p.ref] = {"kind": kind, "label": label, "scope": scope, "mode": mode,
                                 "subject": subject, "created_at": now,
                                 "expires_at": p.expires_at, "revoked_at": None}
        self._write(force=kind == "minted")
        if self.key is None:
            token = "sva_" + secrets.token_urlsafe(32)
            self._random[token] = p
            return token, p
        claims: dict[str, Any] = {"sub": subject, "mode": mode, "scope": scope, "label": label,
                                  "kind": kind, "jti": p.token_id, "iat": now,
                                  "exp": p.expires_at, "aud": AUDIENCE}
        if p.breakglass_fp:
            claims["bg"] = p.breakglass_fp
        return jwt.encode(claims, self.key, algorithm="HS256"), p

    def session(self, subject: str, mode: str) -> tuple[str, Principal]:
        """A sign-in's token: scope full, the configured lifetime."""
        return self.issue(subject, mode, "full", f"{mode} session", "session",
                          self.session_ttl_secs)

    @staticmethod
    def _may_manage(by: Principal, what: str) -> None:
        if by.mode == "mcp" or by.kind == "minted":
            raise Forbidden(f"a token minted for MCP cannot {what}", code="mcp_token")
        if by.scope != "full":
            raise Forbidden(f"a read-only session cannot {what}", code="read_only")

    def mint(self, by: Principal, body: Any) -> tuple[str, Principal]:
        """``POST /admin/api/tokens``: 403 for an MCP-minted or read-only token; 400 for a
        body that is not ``{label, scope: read|full, ttl_days: 1..365 whole days}`` (``ttl_days``
        defaults to 30; the scope is required)."""
        self._may_manage(by, "mint tokens")
        if not isinstance(body, dict):
            raise Invalid("the body must be an object {label, scope, ttl_days}")
        label, scope, ttl = body.get("label"), body.get("scope"), body.get("ttl_days", 30)
        if not isinstance(label, str) or not label.strip() or len(label) > LABEL_MAX:
            raise Invalid(f"label: a non-empty string of at most {LABEL_MAX} characters")
        # The scope is never guessed: a token's power is what its minter asked for in words.
        if scope not in ("read", "full"):
            raise Invalid("scope: required, read or full")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_TTL_DAYS:
            raise Invalid(f"ttl_days: a whole number of days from 1 to {MAX_TTL_DAYS}")
        return self.issue(by.subject, "mcp", scope, label.strip(), "minted",
                          max(1, int(ttl * 86400)))

    # ------------------------------------------------------------------ verify
    def _decode(self, token: str, *, verify_exp: bool) -> Principal | None:
        if self.key is None:
            p = self._random.get(token)
            if p is None or (verify_exp and p.expires_at <= time.time()):
                return None
            return p
        try:
            c = jwt.decode(token, self.key, algorithms=["HS256"], audience=AUDIENCE,
                           options={"require": ["exp", "iat", "jti", "sub"],
                                    "verify_exp": verify_exp})
        except jwt.PyJWTError:
            return None
        try:
            p = Principal(subject=str(c["sub"]), mode=str(c.get("mode", "")),
                          scope=str(c.get("scope", "")), label=str(c.get("label", "")),
                          kind=str(c.get("kind", "")), token_id=str(c["jti"]),
                          expires_at=int(c["exp"]), breakglass_fp=str(c.get("bg", "")))
        except (KeyError, TypeError, ValueError):
            return None
        if p.mode not in ("roster", "breakglass", "mcp") or p.scope not in ("full", "read") \
                or p.kind not in ("session", "minted"):
            return None
        return p

    def _revoked(self, p: Principal) -> bool:
        ref = p.ref
        entry = self._registry.get(ref)
        return ref in self._logged_out or (entry is not None
                                           and entry.get("revoked_at") is not None)

    def verify(self, token: str) -> Principal:
        """The principal of a live token; Unauthorized when unknown, expired or revoked."""
        if len(token) > 4096:
            raise Unauthorized()
        p = self._decode(token, verify_exp=True)
        if p is None or self._revoked(p):
            raise Unauthorized()
        return p

    async def check(self, token: str) -> Principal:
        """:meth:`verify`, then the subject's standing (roster, break-glass password)."""
        p = self.verify(token)
        if self.standing is not None and not await self.standing(p):
            raise Unauthorized()
        return p

    def breakglass_current(self, p: Principal) -> bool:
        """The principal was issued under the break-glass password configured now."""
        return bool(self._bg_fp) and hmac.compare_digest(p.breakglass_fp, self._bg_fp)

    # ------------------------------------------------------------------ list and revoke
    def listing(self, by: Principal) -> list[dict[str, Any]]:
        """``GET /admin/api/tokens``: every token this scheduler issued that has not expired,
        newest first (references, never the tokens). Any token may read it (it opens
        nothing); revoking needs a full session (:meth:`revoke_ref`)."""
        self._prune()
        out = []
        for ref, e in self._registry.items():
            out.append({"id": ref, "kind": e["kind"], "label": e["label"], "scope": e["scope"],
                        "mode": e["mode"], "subject": e["subject"],
                        "created_at_ms": e["created_at"] * 1000,
                        "expires_at_ms": e["expires_at"] * 1000,
                        "revoked": e.get("revoked_at") is not None or ref in self._logged_out,
                        "current": ref == by.ref})
        out.sort(key=lambda t: -t["created_at_ms"])
        return out

    def revoke_ref(self, by: Principal, ref: str) -> None:
        """``DELETE /admin/api/tokens/{id}``: revoke a token by its reference (kept until the
        token expires, across restarts); 404 when no live token has it."""
        self._may_manage(by, "revoke tokens")
        entry = self._registry.get(ref) if isinstance(ref, str) else None
        if entry is None or entry["expires_at"] < time.time():
            raise NotFound("no live token has this id")
        if entry.get("revoked_at") is None:
            entry["revoked_at"] = int(time.time())
            log.info("admin token %s (%s, %s) revoked by %s", ref, entry["kind"],
                     entry["subject"], by.subject)
            self._write()
        for tok in [t for t, p in self._random.items() if p.ref == ref]:
            del self._random[tok]

    def revoke(self, p: Principal, token: str | None = None) -> None:
        """Revoke the token of ``p`` (a logout, or a DELETE of a minted token): a session's
        logout in memory (spec), a minted token's in the registry file."""
        if token is not None:
            self._random.pop(token, None)
        if p.kind == "minted":
            entry = self._registry.get(p.ref)
            if entry is None:  # issued before the registry existed, or pruned: remember it
                entry = self._registry[p.ref] = {
                    "kind": p.kind, "label": p.label, "scope": p.scope, "mode": p.mode,
                    "subject": p.subject, "created_at": int(time.time()),
                    "expires_at": p.expires_at, "revoked_at": None}
            entry["revoked_at"] = entry.get("revoked_at") or int(time.time())
            self._write()
        else:
            self._logged_out[p.ref] = p.expires_at
        self._prune()

    def revoke_token(self, token: str) -> bool:
        """``DELETE /admin/api/tokens {token}``: revoke a minted token (expired ones too);
        False when the text is not a minted token of this scheduler."""
        p = self._decode(token, verify_exp=False) if len(token) <= 4096 else None
        if p is None or p.kind != "minted":
            return False
        self.revoke(p, token)
        return True

    # ------------------------------------------------------------------ persistence
    def _prune(self) -> None:
        now = int(time.time())
        for ref in [r for r, exp in self._logged_out.items() if exp < now]:
            del self._logged_out[ref]
        for ref in [r for r, e in self._registry.items() if e["expires_at"] < now]:
            del self._registry[ref]
        if len(self._registry) > REGISTRY_MAX:
            # Revoked entries must outlive live ones: a dropped revocation would revive a token.
            order = sorted(self._registry, key=lambda r: (
                self._registry[r].get("revoked_at") is not None, self._registry[r]["expires_at"]))
            for ref in order[:len(self._registry) - REGISTRY_MAX]:
                del self._registry[ref]
        for tok in [t for t, p in self._random.items() if p.expires_at < now]:
            del self._random[tok]

    def _load(self) -> None:
        if self.path is None or self.key is None:
            return
        raw = read_state(self.path, "token registry", log)
        for ref, item in (raw.get("tokens", {}) if isinstance(raw, dict) else {}).items():
            if isinstance(item, dict) and isinstance(item.get("expires_at"), int):
                self._registry[str(ref)] = {
                    "kind": str(item.get("kind", "")), "label": str(item.get("label", "")),
                    "scope": str(item.get("scope", "")), "mode": str(item.get("mode", "")),
                    "subject": str(item.get("subject", "")),
                    "created_at": int(item.get("created_at") or 0),
                    "expires_at": item["expires_at"], "revoked_at": item.get("revoked_at")}
        self._load_legacy()
        self._prune()

    def _load_legacy(self) -> None:
        """``admin-revoked.json`` of an older release: revoked token ids -> expiry."""
        assert self._legacy is not None
        raw = read_state(self._legacy, "token revocations", log)
        if not isinstance(raw, dict):
            return
        for jti, exp in raw.items():
            if isinstance(exp, int) and not isinstance(exp, bool):
                ref = token_ref(str(jti))
                entry = self._registry.setdefault(ref, {
                    "kind": "minted", "label": "", "scope": "", "mode": "mcp", "subject": "",
                    "created_at": 0, "expires_at": exp, "revoked_at": None})
                entry["revoked_at"] = entry.get("revoked_at") or int(time.time())

    def flush(self) -> None:
        """Write what a debounced write left (the admin plane calls it when it stops)."""
        if self._dirty:
            self._write(force=True)

    def _write(self, *, force: bool = True) -> None:
        if self.path is None or self.key is None:
            return  # random tokens die with the process: nothing to remember
        now = time.monotonic()
        if not force and now - self._written_at < WRITE_INTERVAL_SECS:
            self._dirty = True
            return
        self._written_at = now
        self._dirty = False
        self._prune()
        try:
            replace_file(self.path, json.dumps({"version": 1, "tokens": self._registry}
                                               ).encode("utf-8"), mode=0o600)
        except OSError as e:
            # The revocation holds in memory; say loudly that a restart would forget it.
            log.error("token registry not persisted (%s): revocations hold until a restart", e)


def principal_dict(p: Principal) -> dict[str, Any]:
    return asdict(p)
