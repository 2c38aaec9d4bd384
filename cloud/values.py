"""Environment variables and vault secrets of a project: one store, two kinds.

* ``env``: variables per project, environment (``production`` by default) and app (``""``:
  every app of the project).
* ``vault``: secrets per project and environment; an app takes them through its
  ``project.yml`` ``env`` (``vault`` for all of them, ``{vault: [KEYS]}`` for some:
  ``cloud.envresolve``).

Both are encrypted at rest (``cloud.crypto``: the tenant's data key, associated data binding
tenant, project, kind, environment, app, key and version) and leave this module only as
:class:`cloud.secret.Secret` values, so they are redacted unless the caller may reveal them.
The plaintext never reaches the database, so no database error or log line can carry it.

Writes merge: the keys given are set (``null`` removes one), others stay; ``replace`` is the
explicit way to drop every key not given. A value equal to the current one (same keyed
fingerprint) is left alone. Every change is a new version of its key (a removal is a
tombstone version), kept in ``value_version``; a concurrent change of the same key between
this request's read and its write aborts the whole write with 409 rather than losing either.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Mapping
from typing import Any

from cloud.crypto import decrypt, encrypt, value_aad
from cloud.errors import BadRequest, NotFound
from cloud.keys import DataKeys
from cloud.secret import Fingerprinter, Secret
from cloud.store import Store, guard, limit_guard, now, rid

__all__ = ["APP", "ENVIRONMENT", "KEY", "MAX_VALUE_BYTES", "Values", "check_scope"]

ENVIRONMENT = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
APP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_VALUE_BYTES = 32 * 1024
MAX_KEYS_PER_WRITE = 200
CHARSETS = {"alnum": string.ascii_letters + string.digits, "hex": "0123456789abcdef",
            "base64url": string.ascii_letters + string.digits + "-_"}
_LIMIT = {"env": "env_vars_per_project", "vault": "vault_secrets_per_project"}


def check_scope(environment: Any, app: Any, kind: str) -> tuple[str, str]:
    """``(environment, app)`` validated; the defaults ``production`` and ``""``."""
    env = "production" if environment is None else environment
    if not isinstance(env, str) or not ENVIRONMENT.match(env):
        raise BadRequest("environment: 1 to 32 lowercase letters, digits or hyphens, starting "
                         "with a letter (default production)")
    if app in (None, ""):
        return env, ""
    if kind == "vault":
        raise BadRequest("app: vault secrets belong to the project's environment; an app "
                         "picks them with env: vault or {vault: [KEYS]} in its project.yml")
    if not isinstance(app, str) or not APP.match(app):
        raise BadRequest("app: an app name of the project (letters, digits, _ or -)")
    return env, app


def check_key(key: Any, field: str = "key") -> str:
    if not isinstance(key, str) or not KEY.match(key):
        raise BadRequest(f"{field}: a variable name (letters, digits, underscore; not starting "
                         "with a digit; at most 128)")
    return key


def _value_id(project: str, kind: str, environment: str, app: str, key: str) -> str:
    return f"{project}.{kind}.{environment}.{app or '*'}.{key}"


class Values:
    def __init__(self, store: Store, keys: DataKeys, fingerprints: Fingerprinter,
                 limits: Mapping[str, int]) -> None:
        self.store = store
        self.keys = keys
        self.fp = fingerprints
        self.limits = limits

    def _secret(self, dek: bytes, row: Mapping[str, Any]) -> Secret:
        aad = value_aad(row["tenant"], row["project"], row["kind"], row["environment"],
                        row["app"], row["key"], int(row["version"]))
        return Secret(decrypt(dek, aad, row["ct"]), row["fp"])

    def _item(self, dek: bytes, row: Mapping[str, Any]) -> dict[str, Any]:
        out = {"key": row["key"], "value": self._secret(dek, row), "version": row["version"],
               "environment": row["environment"], "updated_at": row.get("updated_at"),
               "updated_by": row.get("updated_by")}
        if row["kind"] == "env":
            out["app"] = row["app"] or None
        else:
            out["generated"] = bool(row.get("generated"))
        return out

    async def listing(self, project: Mapping[str, Any], kind: str, environment: str, app: str,
                   after: str | None, limit: int) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.store.one(
            "SELECT * FROM value WHERE project = $p AND kind = $k AND environment = $e "
            "AND app = $a AND deleted = false AND key > $after ORDER BY key LIMIT $n",
            {"p": project["id"], "k": kind, "e": environment, "a": app, "after": after or "",
             "n": limit + 1}, read=True) or []
        dek = await self.keys.get(project["tenant"])
        items = [self._item(dek, r) for r in rows[:limit]]
        return items, (rows[limit - 1]["key"] if len(rows) > limit else None)

    async def get(self, project: Mapping[str, Any], kind: str, environment: str, app: str,
                  key: str) -> dict[str, Any]:
        row = await self.store.get("value", _value_id(project["id"], kind, environment, app,
                                                      key))
        if row is None or row.get("deleted"):
            where = f"{environment}" + (f"/{app}" if app else "")
            raise NotFound(f"no {kind} key {key} in {project['slug']} ({where})")
        return self._item(await self.keys.get(project["tenant"]), row)

    async def versions(self, project: Mapping[str, Any], kind: str, environment: str,
                       app: str, key: str, before: int | None, limit: int
                       ) -> tuple[list[dict[str, Any]], int | None]:
        vid = _value_id(project["id"], kind, environment, app, key)
        rows = await self.store.one(
            "SELECT * FROM value_version WHERE value = $v AND version < $before "
            "ORDER BY version DESC LIMIT $n",
            {"v": vid, "before": before or 2**62, "n": limit + 1}, read=True) or []
        if not rows and before is None:
            raise NotFound(f"no {kind} key {key} in {project['slug']} has ever been set")
        dek = await self.keys.get(project["tenant"])
        items = [{"version": r["version"], "at": r.get("at"), "by": r.get("by"),
                  "deleted": bool(r.get("deleted")),
                  "value": None if r.get("deleted") else self._secret(dek, r)}
                 for r in rows[:limit]]
        return items, (rows[limit - 1]["version"] if len(rows) > limit else None)

    async def set(self, project: Mapping[str, Any], kind: str, environment: str, app: str,
                  vars: Any, *, replace: bool, actor: str, generated: bool = False,
                  extra: list[tuple[str, dict[str, Any]]] | None = None) -> dict[str, Any]:
        """Merge ``vars`` (``{KEY: value | null}``) into the scope; see module doc."""
        if not isinstance(vars, dict):
            raise BadRequest("vars: an object of variable names to string values (null "
                             "removes a variable)")
        if len(vars) > MAX_KEYS_PER_WRITE:
            raise BadRequest(f"vars: at most {MAX_KEYS_PER_WRITE} variables per write")
        if not vars and not replace:
            raise BadRequest("vars: nothing to set (give variables, or replace: true to "
                             "clear the scope)")
        for k, v in vars.items():
            check_key(k, f"vars.{k[:130]}" if isinstance(k, str) else "vars")
            if v is not None and not isinstance(v, str):
                raise BadRequest(f"vars.{k}: a string (or null to remove it)")
            if v is not None and len(v.encode()) > MAX_VALUE_BYTES:
                raise BadRequest(f"vars.{k}: at most {MAX_VALUE_BYTES} bytes")
        tenant, pid = project["tenant"], project["id"]
        current = {r["key"]: r for r in await self.store.one(
            "SELECT key, version, fp, deleted FROM value WHERE project = $p AND kind = $k "
            "AND environment = $e AND app = $a", {"p": pid, "k": kind, "e": environment,
                                                  "a": app}, read=True) or []}
        targets: dict[str, str | None] = dict(vars)
        if replace:
            for k, r in current.items():
                if k not in targets and not r.get("deleted"):
                    targets[k] = None
        dek = await self.keys.get(tenant)
        at = now()
        stmts: list[tuple[str, dict[str, Any]]] = []
        changed, removed, unchanged = [], [], []
        versions: dict[str, int] = {}
        for k, v in targets.items():
            row = current.get(k)
            live = row is not None and not row.get("deleted")
            prev = int(row["version"]) if row else 0
            if v is None:
                if not live:
                    continue
                fields: dict[str, Any] = {"ct": None, "fp": None, "deleted": True}
                removed.append(k)
            else:
                fp = self.fp.of(tenant, v)
                if live and row is not None and row.get("fp") == fp:
                    unchanged.append(k)
                    continue
                aad = value_aad(tenant, pid, kind, environment, app, k, prev + 1)
                fields = {"ct": encrypt(dek, aad, v), "fp": fp, "deleted": False,
                          "size": len(v.encode())}
                changed.append(k)
            vid = _value_id(pid, kind, environment, app, k)
            version = prev + 1
            versions[k] = version
            stmts.append((guard("((SELECT VALUE version FROM ONLY $id) ?? 0) != $prev", 409,
                                f"{k} changed while this request ran: read it again and "
                                "retry"), {"id": rid("value", vid), "prev": prev}))
            stmts.append(("UPSERT $id CONTENT $c RETURN NONE", {"id": rid("value", vid), "c": {
                "tenant": tenant, "project": pid, "kind": kind, "environment": environment,
                "app": app, "key": k, "version": version, "updated_at": at,
                "updated_by": actor, "generated": generated, **fields}}))
            stmts.append(("CREATE $id CONTENT $c RETURN NONE", {
                "id": rid("value_version", f"{vid}.v{version}"), "c": {
                    "value": vid, "tenant": tenant, "project": pid, "kind": kind,
                    "environment": environment, "app": app, "key": k, "version": version,
                    "at": at, "by": actor, "ct": fields["ct"], "fp": fields["fp"],
                    "deleted": fields["deleted"]}}))
        if stmts:
            stmts.append(limit_guard(
                "array::len(SELECT VALUE id FROM value WHERE project = $p AND kind = $k AND "
                "deleted = false)", _LIMIT[kind], self.limits[_LIMIT[kind]], tenant,
                {"p": pid, "k": kind}))
            await self.store.tx(stmts + (extra or []))
        return {"environment": environment, **({"app": app or None} if kind == "env" else {}),
                "changed": sorted(changed), "removed": sorted(removed),
                "unchanged": sorted(unchanged), "versions": versions}

    @staticmethod
    def generate(length: Any, charset: Any) -> str:
        """A new random value made here, so the caller never holds it."""
        n = 32 if length is None else length
        if isinstance(n, bool) or not isinstance(n, int) or not 16 <= n <= 256:
            raise BadRequest("length: an integer from 16 to 256 (default 32)")
        cs = "alnum" if charset is None else charset
        if cs not in CHARSETS:
            raise BadRequest(f"charset: one of {', '.join(CHARSETS)} (default alnum)")
        alphabet = CHARSETS[cs]
        return "".join(secrets.choice(alphabet) for _ in range(n))

    async def scope_values(self, project: Mapping[str, Any], kind: str, environment: str
                           ) -> dict[str, dict[str, Secret]]:
        """Every live value of a kind in an environment: ``{app or "": {KEY: Secret}}``."""
        rows = await self.store.one(
            "SELECT * FROM value WHERE project = $p AND kind = $k AND environment = $e "
            "AND deleted = false", {"p": project["id"], "k": kind, "e": environment},
            read=True) or []
        dek = await self.keys.get(project["tenant"])
        out: dict[str, dict[str, Secret]] = {}
        for r in rows:
            out.setdefault(r["app"], {})[r["key"]] = self._secret(dek, r)
        return out

    async def pinned(self, project: Mapping[str, Any], environment: str
                     ) -> tuple[dict[str, dict[str, dict[str, Secret]]], list[str]]:
        """Every live env and vault value of an environment (``{"env"|"vault": {app or "":
        {KEY: Secret}}}``) and the ids of the versions they are: a deployment records those
        ids (never the values), so a rollback runs with exactly these values again."""
        rows = await self.store.one(
            "SELECT * FROM value WHERE project = $p AND environment = $e AND deleted = false "
            "AND kind IN ['env', 'vault']", {"p": project["id"], "e": environment},
            read=True) or []
        return await self._grouped(project, rows), sorted(
            f"{_value_id(project['id'], r['kind'], environment, r['app'], r['key'])}"
            f".v{int(r['version'])}" for r in rows)

    async def at_versions(self, project: Mapping[str, Any], refs: list[str]
                          ) -> dict[str, dict[str, dict[str, Secret]]]:
        """The values of the versions ``pinned`` named (same shape); a version that is gone
        (the project was purged meanwhile) is left out."""
        ids = [rid("value_version", r) for r in refs if isinstance(r, str)]
        rows = await self.store.one("SELECT * FROM $ids", {"ids": ids}, read=True) or []
        return await self._grouped(project, [
            r for r in rows if isinstance(r, dict) and r.get("project") == project["id"]
            and not r.get("deleted")])

    async def _grouped(self, project: Mapping[str, Any], rows: list[Any]
                       ) -> dict[str, dict[str, dict[str, Secret]]]:
        out: dict[str, dict[str, dict[str, Secret]]] = {"env": {}, "vault": {}}
        if not rows:
            return out
        dek = await self.keys.get(project["tenant"])
        for r in rows:
            out[r["kind"]].setdefault(r["app"], {})[r["key"]] = self._secret(dek, r)
        return out

    async def rekey_statements(self, project: Mapping[str, Any], new_tenant: str
                               ) -> list[tuple[str, dict[str, Any]]]:
        """Statements moving every value and version of ``project`` to ``new_tenant``:
        decrypted under the old tenant's key and place, encrypted under the new ones."""
        old = project["tenant"]
        old_dek = await self.keys.get(old)
        new_dek = await self.keys.get(new_tenant)
        out: list[tuple[str, dict[str, Any]]] = []
        for table in ("value", "value_version"):
            rows = await self.store.one(f"SELECT * FROM {table} WHERE project = $p",
                                        {"p": project["id"]}, read=True) or []
            for r in rows:
                fields: dict[str, Any] = {"tenant": new_tenant}
                if r.get("ct"):
                    plain = self._secret(old_dek, r).reveal()
                    aad = value_aad(new_tenant, r["project"], r["kind"], r["environment"],
                                    r["app"], r["key"], int(r["version"]))
                    fields["ct"] = encrypt(new_dek, aad, plain)
                    fields["fp"] = self.fp.of(new_tenant, plain)
                out.append(("UPDATE $id MERGE $c RETURN NONE", {"id": r["id"], "c": fields}))
        return out

    async def stored_bytes(self) -> dict[str, int]:
        """Plaintext bytes of live values per project (the usage sampler's storage figure)."""
        rows = await self.store.one(
            "SELECT project, math::sum(size) AS b FROM value WHERE deleted = false "
            "GROUP BY project", read=True) or []
        return {r["project"]: int(r.get("b") or 0) for r in rows}
