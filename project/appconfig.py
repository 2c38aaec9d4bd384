"""The per-app `project.yml` (the spec's "App configuration file" table), as pydantic v2 models.

The models check shape, types and bounds of every property; rules that relate properties to
each other (`image` required for a container, `spec` and `method` required for a backend,
`baseUrl` for external hosting, backend-only `deploy` keys, ...) need the whole app and are in
:func:`app_rules`, which returns issues with the exact property path instead of one error at
the app's root. Rules that need the other apps (`dependsOn`) or the file system (`spec` and
`method.schema` exist) are in :mod:`project.rootconfig`.

Unknown properties are rejected everywhere (`extra="forbid"`), and values are not coerced
(`strict`): `port: "8080"` is an error, not 8080.

Where the spec leaves a choice open, the decision is documented on the model and in the README
("Project file").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "ENV_NAME",
    "PORT_TEXT",
    "UNION_TAGS_PREFIX",
    "VAR_REF",
    "AppConfig",
    "Auth",
    "Deploy",
    "Method",
    "app_rules",
    "parse_port",
    "substitute",
]

ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: `${NAME}` in `auth.token` (and `${PROJECT_DIR}` in volumes and env values)
VAR_REF = re.compile(r"\$\{(" + ENV_NAME + r")\}")
#: `7880`, `8080:80`, either with `/udp`
PORT_TEXT = r"^[0-9]{1,5}(:[0-9]{1,5})?(/udp)?$"
TABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: properties that describe a prebuilt image; on another type they would be ignored, so they
#: are rejected there (our decision: the spec lists them under `container`)
CONTAINER_ONLY = ("image", "ports", "args", "volumes", "workdir", "healthcheck")
#: `deploy` keys the spec marks "backend only"
DEPLOY_BACKEND_ONLY = ("grpc_port", "healthcheck", "timeout", "timeoutOverridable")
DEFAULT_DEPLOY_PORT = {"backend": 8080, "frontend": 3000}

#: the tags of the callable discriminators below start with this; they appear in pydantic's
#: error locations and are dropped when a location is printed as a property path
UNION_TAGS_PREFIX = "~"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


def _err(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)


# ----------------------------------------------------------------------------- ports


def parse_port(spec: int | str) -> tuple[int, int, str]:
    """A published port as (host, container, protocol): `7880` -> (7880, 7880, 'tcp'),
    `'8080:80/udp'` -> (8080, 80, 'udp'). ValueError when out of range or malformed."""
    if isinstance(spec, int):
        host = container = spec
        proto = "tcp"
    else:
        m = re.fullmatch(PORT_TEXT, spec)
        if m is None:
            raise ValueError("must be PORT, HOST:CONTAINER, optionally with /udp (e.g. 7880, "
                             "8080:80, 5000/udp)")
        body, _, suffix = spec.partition("/")
        proto = suffix or "tcp"
        first, _, second = body.partition(":")
        host = int(first)
        container = int(second) if second else host
    for p in (host, container):
        if not 1 <= p <= 65535:
            raise ValueError(f"port {p} is outside 1-65535")
    return host, container, proto


def _check_port_text(v: str) -> str:
    try:
        parse_port(v)
    except ValueError as e:
        raise _err("port", str(e)) from None
    return v


def _matching(pattern: str, message: str) -> AfterValidator:
    """A check of a string against `pattern` with our own message (pydantic's names the
    regular expression); pair it with `_pattern_schema` so editors still see the pattern."""
    compiled = re.compile(pattern)

    def check(v: str) -> str:
        if not compiled.fullmatch(v):
            raise _err("pattern", message)
        return v
    return AfterValidator(check)


def _pattern_schema(pattern: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "pattern": pattern})


PortNumber = Annotated[int, Field(ge=1, le=65535)]
PortText = Annotated[str, AfterValidator(_check_port_text),
                     WithJsonSchema({"type": "string", "pattern": PORT_TEXT})]


def _port_tag(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return "~number"
    if isinstance(v, str):
        return "~text"
    return None


PortSpec = Annotated[
    Annotated[PortNumber, Tag("~number")] | Annotated[PortText, Tag("~text")],
    Discriminator(_port_tag, custom_error_type="port",
                  custom_error_message="a port is an integer (7880) or a string "
                  "('8080:80', '5000/udp')"),
]
HOST_CONTAINER = r"^[0-9]{1,5}:[0-9]{1,5}$"
HostContainer = Annotated[str, _matching(HOST_CONTAINER, "must be HOST:CONTAINER, e.g. 8080:80"),
                          AfterValidator(_check_port_text), _pattern_schema(HOST_CONTAINER)]


# ----------------------------------------------------------------------------- strings


def _nonempty(v: str) -> str:
    if not v.strip():
        raise _err("empty", "must not be empty")
    return v


Text = Annotated[str, AfterValidator(_nonempty)]
HTTP_PATH = r"^/\S*$"
HttpPath = Annotated[str, _matching(HTTP_PATH, "must be an HTTP path starting with /"),
                     _pattern_schema(HTTP_PATH)]
#: the spec's only health-check form; `tcp`, `command` and the like (compose's and other tools'
#: shapes people carry over) are refused with what is allowed, not pydantic's "valid string"
_HEALTH_FORMS = ("must be an HTTP path starting with / (e.g. /health), polled until it "
                 "answers 200: the only health check project.yml has (no tcp, command or "
                 "other forms)")


def _health_path(v: Any) -> Any:
    if not isinstance(v, str) or not re.fullmatch(HTTP_PATH, v):
        raise _err("healthcheck", _HEALTH_FORMS)
    return v


HealthPath = Annotated[str, BeforeValidator(_health_path), _pattern_schema(HTTP_PATH)]
TableName = Annotated[str, _matching(TABLE_NAME, "must be a table name (letters, digits, "
                                     "underscore)"), _pattern_schema(TABLE_NAME)]
APP_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
AppName = Annotated[str, _matching(APP_NAME, "must be an app name (letters, digits, - and _)"),
                    _pattern_schema(APP_NAME)]


def _check_refs(v: str) -> str:
    """Every `$` that opens a reference must be a complete `${NAME}`."""
    rest = VAR_REF.sub("", v)
    if "${" in rest:
        raise _err("reference", "a reference must be ${NAME} (letters, digits, underscore)")
    return v


WithRefs = Annotated[str, AfterValidator(_check_refs)]


def substitute(text: str, lookup: Callable[[str], str | None]) -> tuple[str, list[str]]:
    """`${NAME}` references in `text` replaced by `lookup(NAME)`; returns the text and the
    names `lookup` did not know (left as written)."""
    missing: list[str] = []

    def one(m: re.Match[str]) -> str:
        value = lookup(m.group(1))
        if value is None:
            missing.append(m.group(1))
            return m.group(0)
        return value
    return VAR_REF.sub(one, text), missing


def _check_url(v: str) -> str:
    if not re.fullmatch(r"https?://[^/\s:@]+(:[0-9]{1,5})?(/\S*)?", v):
        raise _err("url", "must be an http:// or https:// URL with a host and no credentials")
    return v


HttpUrl = Annotated[str, AfterValidator(_check_url),
                    WithJsonSchema({"type": "string", "pattern": "^https?://"})]


def _check_volume(v: str) -> str:
    parts = v.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise _err("volume", "a mount is HOST:CONTAINER or HOST:CONTAINER:ro|rw")
    if not parts[1].startswith("/"):
        raise _err("volume", "the container path must be absolute")
    if len(parts) == 3 and parts[2] not in ("ro", "rw"):
        raise _err("volume", "the mount mode must be ro or rw")
    for name in VAR_REF.findall(parts[0]):
        if name != "PROJECT_DIR":
            raise _err("volume", f"only ${{PROJECT_DIR}} is expanded in a mount, not ${{{name}}}")
    if "$" in parts[1]:
        raise _err("volume", "${PROJECT_DIR} is expanded in the host part only")
    return v


Volume = Annotated[str, AfterValidator(_check_volume),
                   WithJsonSchema({"type": "string", "pattern": "^[^:]+:/[^:]*(:(ro|rw))?$"})]


# ----------------------------------------------------------------------------- env


def _env_value(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)):
        return v
    raise _err("env_value", "an environment value is a string, number or boolean")


EnvValue = Annotated[Any, BeforeValidator(_env_value),
                     WithJsonSchema({"type": ["string", "number", "boolean"]})]
EnvName = Annotated[str, _matching("^" + ENV_NAME + "$", "must be a variable name (letters, "
                                   "digits, underscore)"), _pattern_schema("^" + ENV_NAME + "$")]


class VaultWhitelist(_Model):
    """`{vault: [KEYS]}`: only these vault variables."""

    vault: list[EnvName] = Field(min_length=1)


InlineEnv = dict[EnvName, EnvValue]


def _leaf_tag(v: Any) -> str | None:
    # also called with the validated value when a model is serialized
    if isinstance(v, VaultWhitelist):
        return "~whitelist"
    if isinstance(v, str):
        return "~text"
    if isinstance(v, dict):
        if set(v) == {"vault"} and isinstance(v["vault"], list):
            return "~whitelist"
        if v and set(v) <= {"dev", "cloud"}:
            return None  # a split where only a plain source may stand
        return "~inline"
    return None


_SOURCE_FORMS = ("'vault', a dotenv file path, {vault: [KEYS]} or a map of variables")
# `vault` (a string) is every vault variable; any other string is a dotenv file path
EnvText = Annotated[str, AfterValidator(_nonempty)]
EnvLeaf = Annotated[
    Annotated[EnvText, Tag("~text")]
    | Annotated[VaultWhitelist, Tag("~whitelist")]
    | Annotated[InlineEnv, Tag("~inline")],
    Discriminator(_leaf_tag, custom_error_type="env_source",
                  custom_error_message="an env source here is " + _SOURCE_FORMS),
]


def _side_tag(v: Any) -> str | None:
    return "~list" if isinstance(v, list) else _leaf_tag(v) and "~inline"


EnvSide = Annotated[
    Annotated[list[EnvLeaf], Tag("~list")] | Annotated[EnvLeaf, Tag("~inline")],
    Discriminator(_side_tag, custom_error_type="env_source",
                  custom_error_message="the dev or cloud side is " + _SOURCE_FORMS
                  + ", or an array of those"),
]


class EnvSplit(_Model):
    """`{dev: <source>, cloud: <source>}`: local development and cloud use different sources."""

    dev: EnvSide | None = None
    cloud: EnvSide | None = None


def _item_tag(v: Any) -> str | None:
    if isinstance(v, EnvSplit):
        return "~split"
    if isinstance(v, dict) and v and set(v) <= {"dev", "cloud"}:
        return "~split"
    return "~object" if _leaf_tag(v) else None


EnvItem = Annotated[
    Annotated[EnvSplit, Tag("~split")] | Annotated[EnvLeaf, Tag("~object")],
    Discriminator(_item_tag, custom_error_type="env_source",
                  custom_error_message="an env source is " + _SOURCE_FORMS
                  + " or {dev: ..., cloud: ...}"),
]


def _env_tag(v: Any) -> str | None:
    return "~list" if isinstance(v, list) else "~object" if _item_tag(v) else None


Env = Annotated[
    Annotated[list[EnvItem], Tag("~list")] | Annotated[EnvItem, Tag("~object")],
    Discriminator(_env_tag, custom_error_type="env_source",
                  custom_error_message="env is " + _SOURCE_FORMS
                  + ", {dev: ..., cloud: ...}, or an array of those merged in order"),
]


# ----------------------------------------------------------------------------- sections


class Auth(_Model):
    """`{type: token, token}`: the bearer token sent to the backend; `${NAME}` references are
    replaced from the environment of the process that reads the file."""

    type: Literal["token"]
    token: WithRefs | None = None


class Method(_Model):
    """The backend's outbox: a job table the SSP executes against the backend."""

    type: Literal["outbox"]
    schema_: Text = Field(alias="schema", description="path to the job table's schema file")
    table: TableName | None = Field(
        default=None, description="the outbox table; default: the one table the schema "
        "file defines")
    concurrency: int = Field(default=1, ge=1)


class DevNode(_Model):
    type: Literal["node"]
    script: Text
    workdir: str | None = None


class DevPython(_Model):
    type: Literal["python"]
    script: Text
    workdir: str | None = None


class DevContainer(_Model):
    type: Literal["container"]
    file: Text
    workdir: str | None = None
    port: HostContainer | None = None
    ports: list[PortSpec] | None = None
    platform: str | None = None


def _dev_tag(v: Any) -> str | None:
    if isinstance(v, str):
        return "~text"
    return "~object" if isinstance(v, (dict, BaseModel)) else None


def _dev_type_tag(v: Any) -> str | None:
    kind = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return f"~{kind}" if kind in ("node", "container", "python") else None


DevObject = Annotated[
    Annotated[DevNode, Tag("~node")] | Annotated[DevContainer, Tag("~container")]
    | Annotated[DevPython, Tag("~python")],
    Discriminator(_dev_type_tag, custom_error_type="dev",
                  custom_error_message="dev.type must be node, container or python"),
]
Dev = Annotated[
    Annotated[Text, Tag("~text")] | Annotated[DevObject, Tag("~object")],
    Discriminator(_dev_tag, custom_error_type="dev",
                  custom_error_message="dev is a shell command or an object with type node, "
                  "container or python"),
]


class Resources(_Model):
    vcpus: int = Field(default=1, ge=1)
    memory: int = Field(default=512, ge=128, description="MB")
    disk: int = Field(default=5, ge=1, description="GB")


class Static(_Model):
    """Static site hosting instead of an image."""

    build: str | None = None
    dir: Text = "dist"


class Deploy(_Model):
    containerfile: str | None = None
    context: str | None = Field(default=None, description="default: the project root")
    port: PortNumber | None = Field(default=None,
                                    description="default 8080 backend, 3000 frontend")
    ports: list[PortText] | None = None
    grpc_port: PortNumber | None = None
    expose: bool = False
    resources: Resources = Field(default_factory=Resources)
    healthcheck: HealthPath | None = None
    timeout: int = Field(default=10, ge=1, le=3600, description="seconds")
    timeoutOverridable: bool = False
    cmd: str | None = None
    build_args: Env | None = Field(default=None, description="build time only")
    static: Static | None = None


class AppConfig(_Model):
    """One app's `project.yml`."""

    type: Literal["backend", "frontend", "container"]
    scope: Literal["all", "devOnly", "cloudOnly"] = "all"
    image: Text | None = None
    ports: list[PortSpec] | None = None
    args: list[str] | None = None
    volumes: list[Volume] | None = None
    workdir: str | None = None
    dependsOn: list[AppName] | None = None
    healthcheck: HealthPath | None = None
    hosting: Literal["cloud", "external"] = "cloud"
    spec: Text | None = None
    baseUrl: HttpUrl | None = None
    auth: Auth | None = None
    method: Method | None = None
    dev: Dev | None = None
    deploy: Deploy | None = None
    env: Env | None = None

    def deploy_port(self) -> int | None:
        """The primary port: `deploy.port`, else the type's default (none for a container)."""
        if self.deploy is not None and self.deploy.port is not None:
            return self.deploy.port
        return DEFAULT_DEPLOY_PORT.get(self.type)


def app_rules(app: AppConfig) -> list[tuple[str, str]]:
    """The rules between properties of one app, as (path, reason) pairs."""
    out: list[tuple[str, str]] = []
    is_backend = app.type == "backend"
    if app.type == "container":
        if app.image is None:
            out.append(("image", "required for type container"))
    else:
        for key in CONTAINER_ONLY:
            if key in app.model_fields_set:
                out.append((key, f"only for type container (this app is a {app.type})"))
    if is_backend and app.scope != "devOnly":
        if app.spec is None:
            out.append(("spec", "required for type backend (the OpenAPI file)"))
        if app.method is None:
            out.append(("method", "required for type backend ({type: outbox, schema, ...})"))
    if not is_backend and app.method is not None:
        out.append(("method", f"only for type backend (this app is a {app.type})"))
    if app.hosting == "external" and app.baseUrl is None:
        out.append(("baseUrl", "required when hosting is external"))
    if app.healthcheck is not None and not app.ports:
        out.append(("healthcheck", "needs ports: it is polled on the first published host port"))
    if app.deploy is not None:
        if not is_backend:
            for key in DEPLOY_BACKEND_ONLY:
                if key in app.deploy.model_fields_set:
                    out.append((f"deploy.{key}", f"backend only (this app is a {app.type})"))
        if app.deploy.ports and app.deploy_port() is None:
            out.append(("deploy.port", ("required with deploy.ports: the primary port is "
                        "still used for routing")))
        if app.deploy.static is not None and app.deploy.containerfile:
            out.append(("deploy.static", "static site hosting is instead of an image: not "
                        "with deploy.containerfile"))
    return out
