"""Who a view belongs to, and what its parameters may be: the rules a registration is
checked against before anything held is touched (ssp/README.md, "View identity")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from engine.parser import MAX_DEPTH
from ssp.naming import auth_record

if TYPE_CHECKING:
    from ssp.hub.state import ViewState


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


def engine_params(params: dict[str, Any] | None, auth: RecordID | None) -> dict[str, Any]:
    """The params the engine evaluates the view with: `$auth.id` is the view's identity."""
    out = {k: v for k, v in (params or {}).items() if k != "auth_id"}
    if auth is not None:
        given = out.get("auth")
        base: dict[str, Any] = given if isinstance(given, dict) else {}
        out["auth"] = {**base, "id": auth}
    return out


def kept(vid: str, held: ViewState | None) -> str:
    """What a refusal adds when the id is held: its view is exactly as it was."""
    return (f"; view {vid} keeps its previous query and is still maintained"
            if held is not None else "")
