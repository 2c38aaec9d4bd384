"""The root `project.yml` and loading a whole project (the root plus every app's file).

The root lists apps by `apps.<name>.path` (a directory holding the app's `project.yml`, or the
app file itself, relative to the root file's directory) and carries the keys the spec names:
`sync.transport`, `refMode`, `impersonation.enabled`, `job_tables`. `workflows` and
`schedules` are accepted here as opaque values: their models live in `project.workflows`.

:func:`check_project` returns every problem found, each with the file, the property path and
the reason, so `svc project validate` can print them all at once; :func:`load_project` raises
:class:`ProjectInvalid` with the same list. Nothing here reads the environment: callers pass
the variables `${NAME}` references may use.
"""

from __future__ import annotations

import graphlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from project.appconfig import UNION_TAGS_PREFIX, AppConfig, AppName, TableName, app_rules

__all__ = [
    "Issue",
    "LoadedApp",
    "Project",
    "ProjectInvalid",
    "RootConfig",
    "check_app_file",
    "check_project",
    "load_project",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class AppRef(_Model):
    path: str = Field(min_length=1, description="the app's directory (holding project.yml) "
                      "or its file, relative to this file")


class Sync(_Model):
    transport: Literal["http", "changefeed"] | None = None


class Impersonation(_Model):
    enabled: bool = False


def _opaque(v: Any) -> Any:
    if not isinstance(v, (dict, list)):
        raise PydanticCustomError("section", "must be a mapping or a list")
    return v


# `workflows` and `schedules`: checked by project.workflows (`svc workflows apply`), whose
# models own these sections; here only their container shape
Opaque = Annotated[Any, BeforeValidator(_opaque),
                   WithJsonSchema({"type": ["object", "array"],
                                   "description": "validated by `svc workflows apply`"})]


class RootConfig(_Model):
    """The root project file."""

    apps: dict[AppName, AppRef] = Field(default_factory=dict)
    sync: Sync = Field(default_factory=Sync)
    refMode: Literal["dedicated", "single"] | None = None
    impersonation: Impersonation = Field(default_factory=Impersonation)
    job_tables: list[TableName] = Field(
        default_factory=list, description="more job tables for the scheduler (names, as in "
        "the scheduler's job_tables); the apps' outbox tables are added to them")
    workflows: Opaque | None = None
    schedules: Opaque | None = None


@dataclass(frozen=True)
class Issue:
    """One problem: the file, the property path in it (`(root)` for the whole file), why."""

    file: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.reason}"


class ProjectInvalid(ValueError):
    """The project has problems; `issues` lists every one."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        shown = "; ".join(str(i) for i in issues[:5])
        more = f" (and {len(issues) - 5} more)" if len(issues) > 5 else ""
        super().__init__(f"invalid project: {shown}{more}")


@dataclass(frozen=True)
class LoadedApp:
    """One app: its name in the root, its file, and the validated model."""

    name: str
    file: Path
    config: AppConfig
    #: the outbox table (`method.table`, else the one table `method.schema` defines)
    outbox_table: str | None = None

    @property
    def dir(self) -> Path:
        return self.file.parent


@dataclass(frozen=True)
class Project:
    file: Path
    root: RootConfig
    apps: dict[str, LoadedApp] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.file.parent


def format_loc(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a property path: `deploy.resources.memory`, `ports[2]`."""
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith(UNION_TAGS_PREFIX):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (the name)"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def _reason(err: Mapping[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown property"
    if err["type"] == "missing":
        return "required"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return msg.replace("Input should be", "must be", 1)


def _issues(err: ValidationError, file: str) -> list[Issue]:
    return [Issue(file, format_loc(tuple(e["loc"])), _reason(e)) for e in err.errors()]


class _Loader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently, which would hide a property as surely as a misspelt one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path, shown: str) -> tuple[Any, list[Issue]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        return None, [Issue(shown, "(root)", f"cannot read: {e.strerror or e}")]
    try:
        doc = yaml.load(text, Loader=_Loader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "syntax error"
        return None, [Issue(shown, "(root)", f"not valid YAML{where}: {problem}")]
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        return None, [Issue(shown, "(root)", "must be a mapping of properties")]
    return doc, []


_DEFINE_TABLE = re.compile(r"\bDEFINE\s+TABLE\s+(?:OVERWRITE\s+|IF\s+NOT\s+EXISTS\s+)?"
                           r"`?([A-Za-z_][A-Za-z0-9_]*)`?", re.IGNORECASE)


def _outbox_table(app: AppConfig, app_dir: Path, shown: str) -> tuple[str | None, list[Issue]]:
    """The job table of the app's outbox; the schema file must exist and, without
    `method.table`, define exactly one table."""
    if app.method is None:
        return None, []
    schema = app_dir / app.method.schema_
    try:
        text = schema.read_text(encoding="utf-8")
    except OSError as e:
        return None, [Issue(shown, "method.schema",
                            f"cannot read {app.method.schema_}: {e.strerror or e}")]
    defined = list(dict.fromkeys(_DEFINE_TABLE.findall(text)))
    if app.method.table is not None:
        if app.method.table not in defined:
            return None, [Issue(shown, "method.table", f"{app.method.schema_} does not define "
                                f"table {app.method.table}")]
        return app.method.table, []
    if len(defined) != 1:
        return None, [Issue(shown, "method.table", f"required: {app.method.schema_} defines "
                            f"{len(defined)} tables ({', '.join(defined[:5]) or 'none'})")]
    return defined[0], []


def _rules_of_the_rest(doc: dict[str, Any], err: ValidationError, shown: str) -> list[Issue]:
    """The rules between properties, checked on the properties that are valid on their own:
    a file with a wrong type and a missing `baseUrl` gets both lines, not only the first."""
    bad = {e["loc"][0] for e in err.errors() if e["loc"]}
    rest = {k: v for k, v in doc.items() if k not in bad}
    try:
        app = AppConfig.model_validate(rest)
    except ValidationError:
        return []  # what is left still fails (a required property): the errors above say why
    return [Issue(shown, p, r) for p, r in app_rules(app) if p.split(".")[0] not in bad]


def _check_app_doc(doc: dict[str, Any], file: Path, shown: str
                   ) -> tuple[AppConfig | None, str | None, list[Issue]]:
    try:
        app = AppConfig.model_validate(doc)
    except ValidationError as e:
        return None, None, _issues(e, shown) + _rules_of_the_rest(doc, e, shown)
    issues = [Issue(shown, p, r) for p, r in app_rules(app)]
    if app.spec is not None and not (file.parent / app.spec).is_file():
        issues.append(Issue(shown, "spec", f"{app.spec} is not a file"))
    table, more = _outbox_table(app, file.parent, shown)
    return app, table, issues + more


def check_app_file(path: Path) -> list[Issue]:
    """Every problem of one app file on its own (rules between apps need the root)."""
    doc, issues = _read_yaml(path, str(path))
    if doc is None:
        return issues
    return _check_app_doc(doc, path, str(path))[2]


def _app_file(root_dir: Path, ref: str) -> Path:
    p = root_dir / ref
    return p / "project.yml" if p.is_dir() else p


def _dependency_issues(apps: dict[str, LoadedApp]) -> list[Issue]:
    issues: list[Issue] = []
    graph: dict[str, set[str]] = {}
    for name, app in apps.items():
        deps = app.config.dependsOn or []
        shown = str(app.file)
        for i, dep in enumerate(deps):
            where = f"dependsOn[{i}]"
            if dep == name:
                issues.append(Issue(shown, where, f"{name} cannot depend on itself"))
            elif dep not in apps:
                issues.append(Issue(shown, where, f"unknown app {dep!r} (apps: "
                                    f"{', '.join(sorted(apps)) or 'none'})"))
            elif apps[dep].config.type != "container":
                issues.append(Issue(shown, where, f"{dep} is a {apps[dep].config.type}; only "
                                    "container apps can be waited for"))
            else:
                graph.setdefault(name, set()).add(dep)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        # graphlib lists each node before the one depending on it; shown the other way
        # round, starting at the first app of the root so the report is stable
        ring = list(reversed(e.args[1][:-1]))
        order = list(apps)
        start = min(range(len(ring)), key=lambda i: order.index(ring[i]))
        ring = ring[start:] + ring[:start]
        issues.append(Issue(str(apps[ring[0]].file), "dependsOn",
                            "dependency cycle: " + " -> ".join([*ring, ring[0]])))
    return issues


def check_project(path: Path) -> tuple[Project | None, list[Issue]]:
    """Read and check the root file at `path` and every app it lists. Returns the project
    (None when anything is wrong) and every issue found."""
    shown = str(path)
    doc, issues = _read_yaml(path, shown)
    if doc is None:
        return None, issues
    try:
        root = RootConfig.model_validate(doc)
    except ValidationError as e:
        return None, _issues(e, shown)
    apps: dict[str, LoadedApp] = {}
    tables: dict[str, str] = {}
    for name, ref in root.apps.items():
        file = _app_file(path.parent, ref.path)
        app_shown = str(file)
        if not file.is_file():
            issues.append(Issue(shown, f"apps.{name}.path", f"{ref.path}: no such file, nor a "
                                "directory holding project.yml"))
            continue
        app_doc, problems = _read_yaml(file, app_shown)
        if app_doc is None:
            issues += problems
            continue
        app, table, problems = _check_app_doc(app_doc, file, app_shown)
        issues += problems
        if app is None:
            continue
        if table is not None:
            if table in tables:
                issues.append(Issue(app_shown, "method.table", f"table {table} is already the "
                                    f"outbox of app {tables[table]}"))
            tables.setdefault(table, name)
        apps[name] = LoadedApp(name, file, app, table)
    if len(apps) == len(root.apps):
        issues += _dependency_issues(apps)
    if issues:
        return None, issues
    return Project(path, root, apps), []


def load_project(path: Path) -> Project:
    """The validated project at `path`; :class:`ProjectInvalid` lists every problem."""
    project, issues = check_project(path)
    if project is None:
        raise ProjectInvalid(issues)
    return project
