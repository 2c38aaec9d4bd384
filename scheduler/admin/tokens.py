"""Admin bearer tokens: session tokens and minted (MCP) tokens, their encoding and revocation.

Two kinds share one format:

* ``session``: issued by a sign-in (roster or break-glass), scope ``full``, lifetime
  ``SVC_ADMIN_SESSION_TTL_SECS``; logout revokes it in memory (a restart forgets, spec
  Authentication 4).
* ``minted``: ``POST /admin/api/tokens {label, scope: read|full, ttl_days <= 365}``, mode
  ``mcp``; shown once. ``DELETE /admin/api/tokens {token}`` (or a logout with it) revokes it,
  and that revocation is written to ``admin-revoked.json`` beside the replica and kept until
  the token's own expiry, so a revoked token stays revoked across a scheduler restart.

Encoding: with ``SVC_AUTH_SECRET`` a token is an HS256 JWT (PyJWT) carrying ``sub, mode,
scope, label, kind, jti, iat, exp, aud`` and signed with a key derived from the secret for this
purpose only (HKDF-SHA256, RFC 5869, info ``surreal-views admin token v1``): it survives a
restart and reveals nothing about the secret. Without the secret a token is 32 random bytes
(``sva_…``) looked up in memory, lost on restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jwt

from scheduler.admin.errors import Forbidden, Invalid, Unauthorized

log = logging.getLogger("scheduler.admin.tokens")

__all__ = ["MAX_TTL_DAYS", "Principal", "TokenAuthority", "derive_key"]

AUDIENCE = "svc-admin"
MAX_TTL_DAYS = 365
LABEL_MAX = 200
REVOKED_FILE = "admin-revoked.json"
_INFO = b"surreal-views admin token v1"
_SALT = b"surreal-views/scheduler/admin"


def derive_key(secret: str) -> bytes:
    """HKDF-SHA256 (extract then one expand block) of the shared secret: a key used for admin
    tokens only, so a token never helps anyone who wants the secret or another use of it."""
    prk = hmac.new(_SALT, secret.encode("utf-8"), hashlib.sha256).digest()
    return hmac.new(prk, _INFO + b"\x01", hashlib.sha256).digest()


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

    def public(self) -> dict[str, Any]:
        """The ``/admin/api/me`` body."""
        return {"subject": self.subject, "label": self.label, "mode": self.mode,
                "scope": self.scope, "kind": self.kind,
                "expires_at_ms": self.expires_at * 1000}


class TokenAuthority:
    """Issues, verifies and revokes tokens (see the module docstring)."""

    def __init__(self, secret: str | None, session_ttl_secs: int,
                 directory: Path | None) -> None:
        self.key = derive_key(secret) if secret else None
        self.session_ttl_secs = session_ttl_secs
        self._random: dict[str, Principal] = {}
        self._session_revoked: dict[str, int] = {}  # jti -> exp (memory: a restart forgets)
        self._minted_revoked: dict[str, int] = {}  # jti -> exp (persisted until expiry)
        self.path = directory / REVOKED_FILE if directory is not None else None
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
                      token_id=uuid.uuid4().hex, expires_at=now + ttl_secs)
        if self.key is None:
            token = "sva_" + secrets.token_urlsafe(32)
            self._random[token] = p
            return token, p
        claims = {"sub": subject, "mode": mode, "scope": scope, "label": label, "kind": kind,
                  "jti": p.token_id, "iat": now, "exp": p.expires_at, "aud": AUDIENCE}
        return jwt.encode(claims, self.key, algorithm="HS256"), p

    def session(self, subject: str, mode: str) -> tuple[str, Principal]:
        """A sign-in's token: scope full, the configured lifetime."""
        return self.issue(subject, mode, "full", f"{mode} session", "session",
                          self.session_ttl_secs)

    def mint(self, by: Principal, body: Any) -> tuple[str, Principal]:
        """``POST /admin/api/tokens``: 403 for an MCP-minted or read-only token; 400 for a
        body that is not ``{label, scope: read|full, ttl_days: 1..365}``."""
        if by.mode == "mcp" or by.kind == "minted":
            raise Forbidden("a token minted for MCP cannot mint tokens", code="mcp_token")
        if by.scope != "full":
            raise Forbidden("a read-only session cannot mint tokens", code="read_only")
        if not isinstance(body, dict):
            raise Invalid("the body must be an object {label, scope, ttl_days}")
        label, scope, ttl = body.get("label"), body.get("scope", "read"), body.get("ttl_days", 30)
        if not isinstance(label, str) or not label.strip() or len(label) > LABEL_MAX:
            raise Invalid(f"label: a non-empty string of at most {LABEL_MAX} characters")
        if scope not in ("read", "full"):
            raise Invalid("scope: must be read or full")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) \
                or not 0 < ttl <= MAX_TTL_DAYS:
            raise Invalid(f"ttl_days: a number of days, more than 0 and at most {MAX_TTL_DAYS}")
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
                          expires_at=int(c["exp"]))
        except (KeyError, TypeError, ValueError):
            return None
        if p.mode not in ("roster", "breakglass", "mcp") or p.scope not in ("full", "read") \
                or p.kind not in ("session", "minted"):
            return None
        return p

    def verify(self, token: str) -> Principal:
        """The principal of a live token; Unauthorized when unknown, expired or revoked."""
        if len(token) > 4096:
            raise Unauthorized()
        p = self._decode(token, verify_exp=True)
        if p is None or p.token_id in self._session_revoked \
                or p.token_id in self._minted_revoked:
            raise Unauthorized()
        return p

    # ------------------------------------------------------------------ revoke
    def revoke(self, p: Principal, token: str | None = None) -> None:
        """Revoke the token of ``p`` (a logout, or a DELETE of a minted token)."""
        if token is not None:
            self._random.pop(token, None)
        if p.kind == "minted":
            self._minted_revoked[p.token_id] = p.expires_at
            self._write()
        else:
            self._session_revoked[p.token_id] = p.expires_at
        self._prune()

    def revoke_token(self, token: str) -> bool:
        """``DELETE /admin/api/tokens {token}``: revoke a minted token (expired ones too);
        False when the text is not a minted token of this scheduler."""
        p = self._decode(token, verify_exp=False) if len(token) <= 4096 else None
        if p is None or p.kind != "minted":
            return False
        self.revoke(p, token)
        return True

    def _prune(self) -> None:
        now = int(time.time())
        for d in (self._session_revoked, self._minted_revoked):
            for jti in [j for j, exp in d.items() if exp < now]:
                del d[jti]
        for tok in [t for t, p in self._random.items() if p.expires_at < now]:
            del self._random[tok]

    def _load(self) -> None:
        if self.path is None or self.key is None:
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.error("token revocations %s unreadable: %s", self.path, e)
            return
        if isinstance(raw, dict):
            self._minted_revoked = {str(k): int(v) for k, v in raw.items()
                                    if isinstance(v, int) and not isinstance(v, bool)}
        self._prune()

    def _write(self) -> None:
        if self.path is None or self.key is None:
            return  # random tokens die with the process: nothing to remember
        self._prune()
        tmp = self.path.with_suffix(".json.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._minted_revoked, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            # The revocation holds in memory; say loudly that a restart would forget it.
            log.error("token revocation not persisted (%s): it holds until a restart", e)


def principal_dict(p: Principal) -> dict[str, Any]:
    return asdict(p)
