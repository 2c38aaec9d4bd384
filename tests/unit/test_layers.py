"""The layering of our packages, read from the source (ast: nothing is imported).

Fails on any import cycle among our modules or among our packages, and on the imports that run
the wrong way (README, "Layout"). Imports under `if TYPE_CHECKING:` count like any other:
a type-only cycle still ties the modules together for a reader.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "timetext", "ipc", "dbclient", "maintenance", "jobs", "backup", "dbhost", "ssp", "scheduler",
            "gateway", "stack", "svccli", "project", "cloud", "viewclient", "apps")

# package -> the packages of ours it must never import (directly).
FORBIDDEN: dict[str, set[str]] = {
    "engine": set(PACKAGES) - {"engine"},
    # duration and date-time text: read by every process, it imports none of ours
    "timetext": set(PACKAGES) - {"timetext"},
    "ipc": set(PACKAGES) - {"ipc", "timetext"},
    "dbclient": {"ipc", "backup", "ssp", "scheduler", "gateway", "dbhost", "stack", "svccli",
                 "project", "apps"},
    # the project files' models: read by the services and the CLI, they import none of ours
    "project": set(PACKAGES) - {"project"},
    "maintenance": set(PACKAGES) - {"maintenance", "ipc", "dbclient", "timetext"},
    # outbox jobs (rows, claim, lease, retry, kill, policy): shared by the SSP's runner, the
    # pools and workflows, which it never imports
    "jobs": set(PACKAGES) - {"jobs", "ipc", "maintenance", "timetext", "dbclient"},
    # backups and restores (ssp and scheduler own the targets): the database client, and the
    # state files of ipc.statefile
    "backup": set(PACKAGES) - {"backup", "dbclient", "ipc", "timetext"},
    "gateway": {"ssp", "scheduler", "maintenance", "backup", "stack", "svccli", "apps"},
    "scheduler": {"ssp", "gateway", "stack", "svccli", "apps"},
    # the hosted platform's control plane: its own process over the database client, the
    # shared HTTP helpers and the project files' models; no part of the cluster it hosts.
    # It may import the launcher (stack): its local executor starts a deployed stack with the
    # same children as ops/run (stack itself imports none of cloud)
    "cloud": {"engine", "maintenance", "backup", "dbhost", "ssp", "scheduler", "gateway",
              "svccli"},
    # a project's apps as supervised processes: used by `svc dev` and the platform's local
    # executor, so it knows neither of them nor the cluster
    "apps": set(PACKAGES) - {"apps", "project", "ipc", "timetext", "dbclient"},
    # the app client: an app installs it beside the SDK alone, so it imports none of ours
    "viewclient": set(PACKAGES) - {"viewclient"},
    # the launcher: starts the database host, scheduler, SSPs (and the platform) as processes
    # by module name, never importing them; the platform's local executor imports it
    "stack": {"engine", "ssp", "scheduler", "gateway", "dbhost", "cloud", "svccli", "jobs",
              "viewclient"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[module_name(path)] = path
    return out


def imported(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """Our modules `path` imports (a `from pkg import name` naming a submodule counts as
    importing the submodule)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _ours(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                if not is_pkg:
                    anchor = anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found = False
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    found = True
                    yield sub
            if not found:
                yield from _ours(base, known)


def _ours(name: str, known: set[str]) -> Iterator[str]:
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in known:
            yield cand
            return
        parts.pop()


@functools.cache  # the source does not change during a run; each test reads it
def graph() -> dict[str, set[str]]:
    """Module -> our modules it imports (a fresh copy: callers may edit it)."""
    return {name: set(deps) for name, deps in _graph().items()}


@functools.lru_cache(maxsize=1)
def _graph() -> dict[str, frozenset[str]]:
    # parsed once per run: every test of this module reads the same tree
    mods = modules()
    known = set(mods)
    return {name: frozenset(m for m in imported(path, name, known) if m != name)
            for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package_of(module: str) -> str:
    return module.split(".")[0]


def test_the_parser_sees_imports() -> None:
    g = graph()
    assert "engine.write" in g["engine.core"]
    assert "engine.values" in g["engine.write"]
    assert "ssp.hub.root" in g["ssp.hub"]
    assert any(m.startswith("dbclient") for m in g["ssp.hub.state"])


def test_no_import_cycle_among_our_modules() -> None:
    # A package importing its own submodules (`ssp.hub` -> `ssp.hub.root`) while they import
    # their siblings through the package is a cycle too: siblings import siblings directly.
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_among_our_packages() -> None:
    edges: dict[str, set[str]] = {}
    for mod, deps in graph().items():
        src = package_of(mod)
        edges.setdefault(src, set()).update(package_of(d) for d in deps if package_of(d) != src)
    found = cycles(edges)
    assert not found, f"package cycles: {found}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_runs_the_wrong_way(package: str) -> None:
    wrong = sorted(f"{mod} -> {dep}" for mod, deps in graph().items()
                   if package_of(mod) == package
                   for dep in deps if package_of(dep) in FORBIDDEN[package])
    assert not wrong, "imports that run the wrong way:\n" + "\n".join(wrong)


# The scheduler process's parts (scheduler/README.md, "Layout"): the coordinator (the modules
# directly in scheduler/), the admin plane, workflows and machine pools. The composition roots
# build and wire them all; a part's typed configuration (`<part>.config`) is read with the
# process's (config is read once, in one place per process).
SCHEDULER_PARTS = ("admin", "workflows", "pools")
SCHEDULER_ROOTS = {"scheduler.__main__", "scheduler.app"}
# part -> the parts it must never import
SCHEDULER_FORBIDDEN: dict[str, set[str]] = {
    # the coordinator is what the others stand on: it never reaches up into them
    "coordinator": set(SCHEDULER_PARTS),
    # workflows and pools run beside each other on the coordinator's job plane, and the admin
    # plane shows and acts on them; neither knows the admin plane or the other
    "workflows": {"admin", "pools"},
    "pools": {"admin", "workflows"},
    "admin": set(),
}


def scheduler_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "scheduler":
        return None
    if len(parts) > 1 and parts[1] in SCHEDULER_PARTS:
        return parts[1]
    return "coordinator"


def scheduler_wrong(g: dict[str, set[str]], part: str) -> list[str]:
    return sorted(f"{mod} -> {dep}" for mod, deps in g.items()
                  if scheduler_part(mod) == part and mod not in SCHEDULER_ROOTS
                  for dep in deps
                  if scheduler_part(dep) in SCHEDULER_FORBIDDEN[part]
                  and not dep.endswith(".config"))


@pytest.mark.parametrize("part", sorted(SCHEDULER_FORBIDDEN))
def test_no_scheduler_part_imports_the_wrong_way(part: str) -> None:
    wrong = scheduler_wrong(graph(), part)
    assert not wrong, "imports that run the wrong way:\n" + "\n".join(wrong)


def test_the_scheduler_layer_check_sees_a_wrong_import() -> None:
    # the import this layering removed (the core used the incident store of the admin plane)
    # fails it; a root and a part's config may import a part
    g = {"scheduler.core": {"scheduler.admin.incidents", "scheduler.incidents"},
         "scheduler.app": {"scheduler.workflows.wiring"},
         "scheduler.config": {"scheduler.workflows.config"},
         "scheduler.workflows.engine": {"scheduler.admin.errors"}}
    assert scheduler_wrong(g, "coordinator") == ["scheduler.core -> scheduler.admin.incidents"]
    assert scheduler_wrong(g, "workflows") == ["scheduler.workflows.engine -> scheduler.admin.errors"]


# Inside a part: components, lowest first. A module may import only modules of lower layers
# (never one of its own layer: peers are handed to a component above them, not called), so
# that no component calls back up into another (scheduler/README.md, "Workflows" and
# "Machine pools"). Modules not listed (the part's roots and readers: wiring, views, app,
# run, agent) may import any.
PART_LAYERS: dict[str, list[set[str]]] = {
    "scheduler.workflows": [
        {"config", "ids", "errors", "clock", "runs", "rollups", "tables"},  # rules and records
        {"state"},  # Memory: the one store every component is handed
        {"commits", "jobcalls", "quarantine"},
        {"endings"},  # step and fire endings: recorded by run states, firing and following
        {"runstate"},
        {"firing", "following"},
        {"loading"},
        {"settle"},
        {"actions", "loop"},
        {"engine"},  # the composition root
    ],
    "scheduler.pools": [
        {"config", "store"},
        {"provider"},
        {"fleet"},  # the machines both halves change
        {"sizing"},  # the clock-driven half
        {"service"},  # the request-driven half and the composition of the two
    ],
}


def part_layer_wrong(g: dict[str, set[str]], part: str) -> list[str]:
    rank = {f"{part}.{m}": i for i, layer in enumerate(PART_LAYERS[part]) for m in layer}
    return sorted(f"{mod} -> {dep}" for mod, deps in g.items() if mod in rank
                  for dep in deps if dep in rank and rank[dep] >= rank[mod])


@pytest.mark.parametrize("part", sorted(PART_LAYERS))
def test_a_parts_components_import_only_lower_layers(part: str) -> None:
    g = graph()
    listed = {f"{part}.{m}" for layer in PART_LAYERS[part] for m in layer}
    assert listed <= set(g), f"layers name modules that do not exist: {sorted(listed - set(g))}"
    wrong = part_layer_wrong(g, part)
    assert not wrong, "imports that run the wrong way:\n" + "\n".join(wrong)


def test_the_part_layer_check_sees_a_call_back_up() -> None:
    # the loop the mixins had (a run's end needs the fire's end, a fire starts a run), and a
    # peer import, both fail it; importing a lower layer passes
    g = {"scheduler.workflows.runstate": {"scheduler.workflows.firing",
                                          "scheduler.workflows.endings"},
         "scheduler.workflows.firing": {"scheduler.workflows.runstate",
                                        "scheduler.workflows.following"}}
    assert part_layer_wrong(g, "scheduler.workflows") == [
        "scheduler.workflows.firing -> scheduler.workflows.following",
        "scheduler.workflows.runstate -> scheduler.workflows.firing"]
