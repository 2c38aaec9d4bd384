"""What the services take from the project file (issue 17, part 1): the root's `refMode` and
`sync.transport` as defaults of `SVC_SSP_REF_MODE` / `SVC_INGEST_TRANSPORT` in the SSP, the
scheduler and `svc schema apply` (one rule, `project.service`; a variable set wins), and
`${NAME}` in a backend's `auth.token` resolved from the app's own `env` sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from project.envsources import app_variables
from project.jobwiring import job_config
from project.rootconfig import ProjectInvalid, load_project
from project.service import load_service_project, setting_source, with_project_defaults
from scheduler.config import IngestTransport, SchedulerConfig
from ssp.config import SspConfig
from svccli.__main__ import main as svc_main
from svccli.settings import ConfigError, resolve_settings

DB = {"SVC_DB_URL": "ws://127.0.0.1:1", "SVC_DB_USER": "root", "SVC_DB_PASS": "root",
      "SVC_DB_NS": "n", "SVC_DB_NAME": "d"}


def _root(tmp: Path, body: str) -> Path:
    path = tmp / "project.yml"
    path.write_text(body)
    return path


# ----------------------------------------------------------------------------- the one rule


def test_the_root_settings_fill_only_unset_variables(tmp_path: Path) -> None:
    project = load_project(_root(tmp_path, "refMode: single\nsync: {transport: http}\n"))
    env = {"SVC_INGEST_TRANSPORT": "changefeed", "SVC_SSP_REF_MODE": "  ", "OTHER": "x"}
    out = with_project_defaults(env, project)
    assert out == {"SVC_INGEST_TRANSPORT": "changefeed", "SVC_SSP_REF_MODE": "single",
                   "OTHER": "x"}
    assert setting_source(env, project, "SVC_INGEST_TRANSPORT") == "SVC_INGEST_TRANSPORT"
    assert setting_source(env, project, "SVC_SSP_REF_MODE") == (
        f"project file {project.file} (refMode)")
    assert with_project_defaults(env, None) == env
    # a root file that sets neither leaves the components' own defaults
    bare = load_project(_root(tmp_path, "apps: {}\n"))
    assert with_project_defaults({}, bare) == {}
    assert setting_source({}, bare, "SVC_INGEST_TRANSPORT") == "default"
    assert load_service_project({"SVC_PROJECT_FILE": " "}) is None


def test_impersonation_enabled_in_the_root_file_turns_the_routes_on_unless_the_variable_says(
        tmp_path: Path) -> None:
    on = _root(tmp_path, "impersonation: {enabled: true}\n")
    assert SspConfig.from_env({**DB, "SVC_PROJECT_FILE": str(on)}).impersonation is True
    assert SchedulerConfig.load(None, {**DB, "SVC_PROJECT_FILE": str(on)}).impersonation is True
    project = load_project(on)
    assert setting_source({}, project, "SVC_IMPERSONATION") == (
        f"project file {project.file} (impersonation.enabled)")
    # the variable wins, either way
    assert SspConfig.from_env({**DB, "SVC_PROJECT_FILE": str(on),
                               "SVC_IMPERSONATION": "off"}).impersonation is False
    off = tmp_path / "off"
    off.mkdir()
    off_file = _root(off, "impersonation: {enabled: false}\n")
    assert SchedulerConfig.load(None, {**DB, "SVC_PROJECT_FILE": str(off_file),
                                       "SVC_IMPERSONATION": "on"}).impersonation is True
    assert SspConfig.from_env({**DB, "SVC_PROJECT_FILE": str(off_file)}).impersonation is False
    # a file that does not name it leaves the variable's own default (off)
    assert "SVC_IMPERSONATION" not in with_project_defaults({}, load_project(
        _root(off, "refMode: single\n")))


def test_the_ssp_takes_ref_mode_and_transport_from_the_project_file(tmp_path: Path) -> None:
    root = _root(tmp_path, "refMode: single\nsync: {transport: changefeed}\n")
    cfg = SspConfig.from_env({**DB, "SVC_PROJECT_FILE": str(root)})
    assert (cfg.ref_mode, cfg.ingest_transport) == ("single", "changefeed")
    cfg = SspConfig.from_env({**DB, "SVC_PROJECT_FILE": str(root),
                              "SVC_SSP_REF_MODE": "dedicated", "SVC_INGEST_TRANSPORT": "http"})
    assert (cfg.ref_mode, cfg.ingest_transport) == ("dedicated", "http")
    # without a project file (or with one that says nothing): the SSP's own defaults
    assert (SspConfig.from_env(DB).ref_mode, SspConfig.from_env(DB).ingest_transport) == (
        "dedicated", "http")


def test_the_scheduler_takes_the_transport_from_the_project_file(tmp_path: Path) -> None:
    root = _root(tmp_path, "refMode: single\nsync: {transport: changefeed}\n")
    cfg = SchedulerConfig.load(None, {**DB, "SVC_PROJECT_FILE": str(root)})
    assert cfg.ingest_transport is IngestTransport.CHANGEFEED
    cfg = SchedulerConfig.load(None, {**DB, "SVC_PROJECT_FILE": str(root),
                                      "SVC_INGEST_TRANSPORT": "http"})
    assert cfg.ingest_transport is IngestTransport.HTTP
    # without a file: the one default of every component (ipc.transport), the spec's http
    assert SchedulerConfig.load(None, DB).ingest_transport is IngestTransport.HTTP


def _settings(env: dict[str, str], cwd: Path, project: str | None = None):  # type: ignore[no-untyped-def]
    return resolve_settings({**DB, **env}, transport_flag=None, project_flag=project,
                            ingest_url_flag=None, retention_flag=None, cwd=cwd)


def test_schema_apply_finds_the_project_file_named_by_svc_project_file(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    root = _root(tmp_path / "elsewhere", "sync: {transport: changefeed}\n")
    s = _settings({"SVC_PROJECT_FILE": str(root)}, tmp_path)
    assert s.transport == "changefeed" and s.project is not None
    assert s.transport_source == f"project file {root} (sync.transport)"
    with pytest.raises(ConfigError, match="does not exist"):
        _settings({"SVC_PROJECT_FILE": str(tmp_path / "missing.yml")}, tmp_path)
    # the flag names another file than the variable: the flag wins
    other = _root(tmp_path, "sync: {transport: http}\n")
    s = _settings({"SVC_PROJECT_FILE": str(root), "SVC_INGEST_URL": "http://h:1/ingest"},
                  tmp_path, project=str(other))
    assert s.transport == "http"


def test_svc_view_watch_takes_the_ref_mode_from_the_project_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from svccli import __main__ as cli

    seen: list[str] = []

    async def fake_watch(cfg: object, view_id: str, *, ref_mode: str,
                         seconds: float | None) -> None:
        seen.append(ref_mode)
    monkeypatch.setattr("svccli.tools.watch_view", fake_watch)
    for k, v in DB.items():
        monkeypatch.setenv(k, v)
    root = _root(tmp_path, "refMode: single\n")
    monkeypatch.setenv("SVC_PROJECT_FILE", str(root))
    monkeypatch.delenv("SVC_SSP_REF_MODE", raising=False)
    assert cli.main(["view", "watch", "query:x", "--seconds", "0"]) == 0
    monkeypatch.setenv("SVC_SSP_REF_MODE", "dedicated")
    assert cli.main(["view", "watch", "query:x", "--seconds", "0"]) == 0
    assert cli.main(["view", "watch", "query:x", "--ref-mode", "single"]) == 0
    assert seen == ["single", "dedicated", "single"]


# ----------------------------------------------------------------------------- token sources

TOKEN = "tok-from-dotenv-81f3a2"
INLINE = "tok-inline-4b7c9d"


def _backend(tmp: Path, env_yaml: str, token: str = "${API_TOKEN}") -> Path:
    (tmp / "openapi.yml").write_text("openapi: 3.0.3\n")
    (tmp / "jobs.surql").write_text("DEFINE TABLE api_job SCHEMALESS;\n")
    (tmp / "api.yml").write_text(
        "type: backend\nspec: openapi.yml\n"
        f"auth: {{type: token, token: 'Bearer-{token}'}}\n"
        "method: {type: outbox, schema: jobs.surql}\n" + env_yaml)
    return _root(tmp, "apps: {api: {path: api.yml}}\n")


def _token(root: Path, env: dict[str, str]) -> str:
    return str(job_config(load_project(root), env)["job_tables"]["api"]["auth_token"])


def test_a_token_reference_resolves_from_a_dotenv_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"# local secrets\nexport API_TOKEN='{TOKEN}'\nOTHER=1\n")
    root = _backend(tmp_path, "env: .env\n")
    assert _token(root, {}) == f"Bearer-{TOKEN}"
    # the process environment wins over the app's sources
    assert _token(root, {"API_TOKEN": "from-process"}) == "Bearer-from-process"


def test_later_sources_override_earlier_ones_and_only_the_dev_side_counts(
        tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"API_TOKEN={TOKEN}\n")
    (tmp_path / "cloud.env").write_text("API_TOKEN=cloud-only\n")
    root = _backend(tmp_path, "env:\n  - .env\n  - {API_TOKEN: " + INLINE + "}\n"
                    "  - {cloud: cloud.env}\n")
    assert _token(root, {}) == f"Bearer-{INLINE}"
    root = _backend(tmp_path, "env:\n  - {API_TOKEN: " + INLINE + "}\n"
                    "  - {dev: [vault, .env], cloud: cloud.env}\n")
    assert _token(root, {}) == f"Bearer-{TOKEN}"
    # ${PROJECT_DIR} in a dotenv path; a dotenv file that is missing gives nothing
    root = _backend(tmp_path, "env: [missing.env, '${PROJECT_DIR}/.env']\n")
    assert _token(root, {}) == f"Bearer-{TOKEN}"
    variables = app_variables(load_project(root).apps["api"].config.env, tmp_path, tmp_path)
    assert TOKEN not in repr(variables) and variables["API_TOKEN"].source == "${PROJECT_DIR}/.env"


def test_a_reference_found_nowhere_is_refused_without_printing_values(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".env").write_text(f"OTHER={TOKEN}\n")
    root = _backend(tmp_path, "env: [.env, {dev: {vault: [API_TOKEN]}}]\n")
    with pytest.raises(ProjectInvalid) as e:
        job_config(load_project(root), {})
    assert [(i.path, i.reason) for i in e.value.issues] == [
        ("auth.token", "references ${API_TOKEN}, which is not set (in the environment or the "
                       "app's env sources)")]
    assert TOKEN not in str(e.value)


def test_the_ssp_gets_the_token_from_the_apps_sources_and_show_masks_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _backend(tmp_path, "env: {dev: {API_TOKEN: " + INLINE + "}}\n")
    cfg = SspConfig.from_env({**DB, "SVC_PROJECT_FILE": str(root)})
    [job] = cfg.job_tables
    assert job.auth_token == f"Bearer-{INLINE}" and INLINE not in repr(cfg)
    monkeypatch.delenv("API_TOKEN", raising=False)
    assert svc_main(["project", "show", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert INLINE not in out
    doc = json.loads(out)
    assert doc["apps"]["api"]["auth"]["references"] == {"API_TOKEN": "set (inline)"}
    assert doc["ssp_job_config"]["job_tables"]["api"]["auth_token"] == "***"
