"""Who a view belongs to, and what its parameters may be: the rules a registration is
checked against before anything held is touched (ssp/README.md, "View identity")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from engine.errors import QueryRejected
from engine.parser import MAX_DEPTH, Query, parse_cached
from engine.shape import normalise
from ssp.naming import auth_record
from ssp.permissions import Effective, PermissionRefused

if TYPE_CHECKING:
    from ssp.hub.state import HubState, ViewState


def claimed_auth(params: dict[str, Any] | None) -> RecordID | None:
    """The identity a registration names (`params.auth_id`, else `params.auth.id`)."""
    if not params:
        return None
    raw = params.get("auth_id")
    if raw is None and isinstance(params.get("auth"), dict):
        raw = params["auth"].get("id")
    if raw is None:
        return None
    if isinstance(raw, RecordID):
        return raw
    if not isinstance(raw, str):
        raise ValueError(  # noqa: TRY004 - reported as a 400 like every other bad value
            "params.auth_id must be a record id text such as user:alice")
    try:
        return auth_record(raw)
    except ValueError:
        raise ValueError(f"params.auth_id {raw[:80]!r} is not a record id") from None


def check_params(params: dict[str, Any] | None) -> None:
    """ValueError when the registration's params nest deeper than the engine's MAX_DEPTH
    (they become slot values that the engine and the wire encoding walk recursively)."""
    stack: list[tuple[Any, int]] = [(params, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ValueError(f"params nest deeper than the limit of {MAX_DEPTH} levels")
        stack.extend((c, depth + 1) for c in children)


def engine_params(params: dict[str, Any] | None, auth: RecordID | None,
                  auth_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The params the engine evaluates the view with: `$auth.id` is the view's identity, and
    `auth_fields` (its record as the database holds it, read for a select permission that
    names `$auth.<field>`: ssp.permissions) win over fields the registration gave."""
    out = {k: v for k, v in (params or {}).items() if k != "auth_id"}
    if auth is not None:
        given = out.get("auth")
        base: dict[str, Any] = given if isinstance(given, dict) else {}
        if auth_fields is not None:
            base = {**base, **auth_fields}
        out["auth"] = {**base, "id": auth}
    return out


async def effective_query(state: HubState, surql: str, query: Query, auth: RecordID | None,
                          params: dict[str, Any] | None) -> Effective:
    """What the engine runs for the view: its query with the owner's select permissions in
    it (`ssp.permissions`), checked by the engine as the query itself was; PermissionRefused
    (a 400 `rejected`) otherwise."""
    eff = await state.permissions.effective(surql, query, auth)
    if eff.surql != surql or eff.auth_fields is not None:
        try:
            normalise(parse_cached(eff.surql), engine_params(params, auth, eff.auth_fields))
        except QueryRejected as e:
            raise PermissionRefused(f"with the tables' select permissions in it the query is "
                                    f"refused: {e}") from None
    return eff


def kept(vid: str, held: ViewState | None) -> str:
    """What a refusal adds when the id is held: its view is exactly as it was."""
    return (f"; view {vid} keeps its previous query and is still maintained"
            if held is not None else "")
