"""The control plane's API as one table of operations, and the one runner every call goes
through, from REST and from MCP alike.

An :class:`Op` is a tool and a route at once: its name (the MCP tool name, ``noun_verb``),
the one scope it needs, the least tenant role, its kind (``read``, ``write``,
``destructive``), its REST method and path, its arguments as a JSON schema, and its handler.
:meth:`Api.run` applies the same checks in the same order whichever door a call came in by:

1. the credential holds the op's scope (403 ``missing_scope``);
2. the arguments match the schema (400 naming the argument and the rule, never its value);
3. the tenant: ``tenant_id`` (id or slug) or the default (the API key's tenant, else the
   personal one); a member with at least the op's role (403 ``tenant_forbidden`` naming the
   tenants the credential may use, or ``role``);
4. the project (slug or id) inside that tenant (404 naming the tenants, ``wrong_tenant`` when
   it is in another tenant of the caller);
5. destructive ops: ``confirm`` equal to the target's slug, id or name (400 ``confirm``);
6. the handler; writes are one transaction with their audit entry;
7. lists: ``limit`` (default 20, at most 100) and ``cursor`` (``cloud.paging``);
8. the answer names the tenant (and project) it acted in; a reveal of secret values is
   audited before the values leave (``cloud.secret.render`` is where they are redacted).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from cloud.audit import entry
from cloud.errors import BadRequest, Forbidden
from cloud.identity import Membership, Principal
from cloud.paging import DEFAULT_LIMIT, MAX_LIMIT
from cloud.scopes import role_at_least
from cloud.secret import revealed_keys
from cloud.tenants import resolve_tenant, tenant_ref

__all__ = ["Ctx", "Op", "run_op"]

Handler = Callable[["Ctx", dict[str, Any]], Awaitable[dict[str, Any]]]
Stmt = tuple[str, dict[str, Any]]

TENANT_ARG = {"type": "string", "minLength": 1, "maxLength": 60,
              "description": "tenant id or slug (default: your personal tenant)"}
PROJECT_ARG = {"type": "string", "minLength": 1, "maxLength": 60,
               "description": "project slug or id"}
LIMIT_ARG = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
             "description": f"page size (default {DEFAULT_LIMIT})"}
CURSOR_ARG = {"type": "string", "maxLength": 1000, "description": "next_cursor of the "
              "previous page"}
CONFIRM_ARG = {"type": "string", "maxLength": 300}


@dataclass(frozen=True)
class Op:
    name: str
    description: str
    scope: str
    kind: str  # read | write | destructive
    method: str
    path: str
    handler: Handler
    props: dict[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    role: str = "viewer"
    tenant: bool = True  # acts in a tenant (takes tenant_id)
    project: str = ""  # "" none, "required", "optional", "deleted" (a deleted project)
    confirm: str = ""  # what confirm must equal: project | tenant | <an argument name>
    paged: bool = False
    reveal: bool = True  # False: values are never shown, whatever the credential

    @property
    def title(self) -> str:
        return self.name.replace("_", " ").capitalize()

    @property
    def read_only(self) -> bool:
        return self.kind == "read"

    def input_schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        if self.tenant:
            props["tenant_id"] = TENANT_ARG
        if self.project:
            props["project"] = PROJECT_ARG
        props.update(self.props)
        if self.paged:
            props["limit"] = LIMIT_ARG
            props["cursor"] = CURSOR_ARG
        required = list(self.required)
        if self.project in ("required", "deleted"):
            required.insert(0, "project")
        if self.confirm:
            props["confirm"] = {**CONFIRM_ARG, "description": _CONFIRM_TEXT.get(
                self.confirm, f"must equal {self.confirm}")}
            required.append("confirm")
        schema: dict[str, Any] = {"type": "object", "properties": props,
                                  "additionalProperties": False}
        if required:
            schema["required"] = required
        return schema


_CONFIRM_TEXT = {"project": "must equal the project's slug or id",
                 "tenant": "must equal the tenant's slug or id"}


@dataclass
class Ctx:
    """What a handler gets: the caller, where it acts, and the services."""

    op: Op
    principal: Principal
    services: Any
    tenant: Membership | None = None
    project: dict[str, Any] | None = None
    list_id: str = ""
    after: Any = None
    limit: int = DEFAULT_LIMIT

    def audit(self, action: str | None = None, target: str | None = None,
              detail: dict[str, Any] | None = None) -> list[Stmt]:
        """The audit statement of this write, to commit with it."""
        assert self.tenant is not None
        return [entry(self.principal, self.tenant.tenant_id, action or self.op.name,
                      project=self.project["id"] if self.project else None, target=target,
                      detail=detail)]

    def page(self, items: list[Any], position: Any, **extra: Any) -> dict[str, Any]:
        nxt = None if position is None else self.services.cursors.encode(self.list_id,
                                                                          position)
        return {**extra, "items": items, "next_cursor": nxt}


def _schema_error(e: jsonschema.ValidationError) -> BadRequest:
    where = "/".join(str(p) for p in e.absolute_path) or "arguments"
    rule = e.validator
    if rule == "additionalProperties":
        extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
        return BadRequest(f"{extra[0][:60] if extra else where}: unknown argument")
    if rule == "required":
        missing = [r for r in e.validator_value if r not in e.instance]
        return BadRequest(f"{missing[0] if missing else where}: is required")
    if rule == "type":
        return BadRequest(f"{where}: must be of type {e.validator_value}")
    if rule == "enum":
        return BadRequest(f"{where}: one of {', '.join(map(str, e.validator_value))}")
    # the rule and its bound, never the value that broke it (it may be a secret)
    return BadRequest(f"{where}: violates {rule} {e.validator_value!r}"[:300])


_VALIDATORS: dict[str, Any] = {}


def validate(op: Op, args: dict[str, Any]) -> None:
    v = _VALIDATORS.get(op.name)
    if v is None:
        v = _VALIDATORS[op.name] = jsonschema.Draft202012Validator(op.input_schema())
    err = jsonschema.exceptions.best_match(v.iter_errors(args))
    if err is not None:
        raise _schema_error(err)


def _confirm(op: Op, ctx: Ctx, args: dict[str, Any]) -> None:
    given = args.get("confirm")
    if op.confirm == "project":
        assert ctx.project is not None
        want = {ctx.project["slug"], ctx.project["id"]}
        what = f"the project's slug ({ctx.project['slug']}) or id"
    elif op.confirm == "tenant":
        assert ctx.tenant is not None
        want = {ctx.tenant.slug, ctx.tenant.tenant_id}
        what = f"the tenant's slug ({ctx.tenant.slug}) or id"
    else:
        want = {str(args.get(op.confirm))}
        what = f"{op.confirm} ({str(args.get(op.confirm))[:100]})"
    if given not in want:
        raise BadRequest(f"confirm: {op.name} is destructive; pass confirm equal to {what}",
                         code="confirm")


async def run_op(op: Op, p: Principal, args: dict[str, Any], services: Any
                 ) -> tuple[dict[str, Any], bool]:
    """Run ``op`` for ``p``; returns the answer and whether secret values may be shown."""
    if not p.may(op.scope):
        raise Forbidden(f"this credential lacks the scope {op.scope} that {op.name} needs",
                        code="missing_scope")
    validate(op, args)
    ctx = Ctx(op, p, services)
    if op.tenant:
        ctx.tenant = resolve_tenant(p, args.get("tenant_id"), op.role)
    if op.project and (op.project != "optional" or args.get("project") is not None):
        assert ctx.tenant is not None
        ctx.project = await services.projects.resolve(p, ctx.tenant, args["project"],
                                                      deleted=op.project == "deleted")
    if op.confirm:
        _confirm(op, ctx, args)
    if op.paged:
        ctx.limit = int(args.get("limit", DEFAULT_LIMIT))
        filters = {k: v for k, v in sorted(args.items()) if k not in ("limit", "cursor")}
        ctx.list_id = f"{op.name}|{ctx.tenant.tenant_id if ctx.tenant else p.user_id}|{filters}"
        if args.get("cursor") is not None:
            ctx.after = services.cursors.decode(ctx.list_id, args["cursor"])
    result = await op.handler(ctx, args)
    out: dict[str, Any] = {}
    if ctx.tenant is not None:
        out["tenant"] = tenant_ref(ctx.tenant)
        services.meter.count(ctx.tenant.tenant_id, ctx.project["id"] if ctx.project else None)
    if ctx.project is not None and "project" not in result:
        out["project"] = {"id": ctx.project["id"], "slug": ctx.project["slug"]}
    out.update(result)
    reveal = (op.reveal and p.reveal and ctx.tenant is not None
              and role_at_least(ctx.tenant.role, "member"))
    if reveal:
        keys = revealed_keys(out)
        if keys is not None:
            assert ctx.tenant is not None
            # no entry, no values: a failed write here fails the read
            await services.store.run(*entry(
                p, ctx.tenant.tenant_id, "secrets.reveal",
                project=ctx.project["id"] if ctx.project else None,
                detail={"op": op.name, "keys": keys[:100]}))
    return out, reveal
