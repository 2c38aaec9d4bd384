"""The project files (spec "App configuration file"): a corpus with one file per rule under
`tests/project_corpus/`, run through the validator and through `svc project validate`; the
published JSON Schemas; `svc project show` masking secrets; the job wiring into the SSP and the
scheduler configuration.

Corpus files start with `# valid` or with one `# expect: [FILE ::] PATH :: REASON` line per
problem the file must produce (exactly those: a file tests its one rule). App files are checked
where they lie; a root case lists `files` to write under a fresh directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from project import schemagen
from project.jobwiring import job_config, scheduler_job_tables
from project.rootconfig import Issue, ProjectInvalid, check_app_file, check_project, load_project
from scheduler.config import ConfigError as SchedulerConfigError
from scheduler.config import SchedulerConfig
from ssp.config import ConfigError as SspConfigError
from ssp.config import SspConfig
from svccli.__main__ import main as svc_main

CORPUS = Path(__file__).resolve().parent.parent / "project_corpus"
APPS = CORPUS / "apps"
ROOTS = CORPUS / "roots"
SUPPORT = ("openapi.yml", "jobs.surql", "two_tables.surql")


def _cases(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.yml") if p.read_text().startswith("# "))


def _expectations(path: Path) -> list[tuple[str | None, str, str]]:
    """(file or None, property path, reason substring) per `# expect:` line."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("# expect: "):
            parts = line.removeprefix("# expect: ").split(" :: ")
            file = parts[0] if len(parts) == 3 else None
            out.append((file, parts[-2], parts[-1]))
    return out


def _matches(issues: list[Issue], expected: list[tuple[str | None, str, str]]) -> None:
    shown = "\n".join(str(i) for i in issues)
    assert len(issues) == len(expected), f"expected {expected}, got:\n{shown}"
    for file, path, reason in expected:
        assert any(i.path == path and reason in i.reason
                   and (file is None or Path(i.file).name == file) for i in issues), (
            f"no issue {file}: {path}: {reason!r} in:\n{shown}")


def _materialize(case: Path, into: Path) -> Path:
    for name in SUPPORT:
        shutil.copy(APPS / name, into / name)
    files = yaml.safe_load(case.read_text())["files"]
    for rel, text in files.items():
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return into / "project.yml"


def test_corpus_has_one_file_per_rule_in_each_area() -> None:
    apps, roots = _cases(APPS), _cases(ROOTS)
    assert len([p for p in apps if not _expectations(p)]) >= 5
    assert len([p for p in apps if _expectations(p)]) >= 80
    assert len([p for p in roots if _expectations(p)]) >= 20


@pytest.mark.parametrize("case", _cases(APPS), ids=lambda p: p.stem)
def test_app_corpus_through_the_validator(case: Path) -> None:
    _matches(check_app_file(case), _expectations(case))


@pytest.mark.parametrize("case", _cases(APPS), ids=lambda p: p.stem)
def test_app_corpus_through_the_cli(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = svc_main(["project", "validate", "--project", str(case)])
    out, err = capsys.readouterr()
    expected = _expectations(case)
    if not expected:
        assert code == 0, err
        assert "valid app file" in out
        return
    assert code == 2
    for _file, path, reason in expected:
        assert any(line.startswith(f"{case}: {path}: ") and reason in line
                   for line in err.splitlines()), err
    assert f"{len(expected)} problem" in err


@pytest.mark.parametrize("case", _cases(ROOTS), ids=lambda p: p.stem)
def test_root_corpus_through_the_validator(case: Path, tmp_path: Path) -> None:
    project, issues = check_project(_materialize(case, tmp_path))
    _matches(issues, _expectations(case))
    assert (project is None) == bool(issues)


@pytest.mark.parametrize("case", _cases(ROOTS), ids=lambda p: p.stem)
def test_root_corpus_through_the_cli(case: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    root = _materialize(case, tmp_path)
    code = svc_main(["project", "validate", "--project", str(root)])
    out, err = capsys.readouterr()
    expected = _expectations(case)
    assert code == (2 if expected else 0), out + err
    for file, path, reason in expected:
        assert any(f"{file}: {path}: " in line and reason in line
                   for line in err.splitlines()), err


def test_validate_reports_every_problem_of_every_file_at_once(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    (tmp_path / "project.yml").write_text("apps: {a: {path: a.yml}, b: {path: b.yml}}\n"
                                          "refMode: shared\n")
    code = svc_main(["project", "validate", "--project", str(tmp_path / "project.yml")])
    assert code == 2
    assert "refMode: must be" in capsys.readouterr().err
    (tmp_path / "project.yml").write_text("apps: {a: {path: a.yml}, b: {path: b.yml}}\n")
    (tmp_path / "a.yml").write_text("type: container\nports: [0]\ncolour: red\n")
    (tmp_path / "b.yml").write_text("type: frontend\nmethod: {type: outbox, schema: s}\n"
                                    "deploy: {timeout: 5}\n")
    code = svc_main(["project", "validate", "--project", str(tmp_path / "project.yml")])
    err = capsys.readouterr().err
    assert code == 2
    for expected in (f"{tmp_path / 'a.yml'}: ports[0]: ", f"{tmp_path / 'a.yml'}: colour: ",
                     f"{tmp_path / 'b.yml'}: method: only for type backend",
                     f"{tmp_path / 'b.yml'}: deploy.timeout: backend only"):
        assert expected in err, err
    # the rules between properties still run when other properties are wrong on their own
    (tmp_path / "a.yml").write_text("type: backend\nscope: devOnly\ncolour: red\n"
                                    "deploy: {port: eighty}\nhosting: external\n")
    code = svc_main(["project", "validate", "--project", str(tmp_path / "project.yml")])
    err = capsys.readouterr().err
    assert code == 2
    for expected in (f"{tmp_path / 'a.yml'}: colour: ", f"{tmp_path / 'a.yml'}: deploy.port: ",
                     f"{tmp_path / 'a.yml'}: baseUrl: required when hosting is external"):
        assert expected in err, err


def test_cli_finds_the_file_from_svc_project_file_then_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "elsewhere.yml").write_text("refMode: shared\n")
    (tmp_path / "project.yml").write_text("refMode: single\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SVC_PROJECT_FILE", raising=False)
    assert svc_main(["project", "validate"]) == 0
    monkeypatch.setenv("SVC_PROJECT_FILE", str(tmp_path / "elsewhere.yml"))
    assert svc_main(["project", "validate"]) == 2
    assert "elsewhere.yml: refMode" in capsys.readouterr().err
    monkeypatch.delenv("SVC_PROJECT_FILE")
    (tmp_path / "project.yml").unlink()
    assert svc_main(["project", "validate"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_svc_console_command_exits_non_zero_on_a_bad_file(tmp_path: Path) -> None:
    (tmp_path / "project.yml").write_text("apps: {x: {path: x.yml}}\n")
    (tmp_path / "x.yml").write_text("type: container\nimage: i\ndependsOn: [x]\n")
    run = subprocess.run([sys.executable, "-m", "svccli", "project", "validate", "--project",
                          str(tmp_path / "project.yml")], capture_output=True, text=True, check=False,
                         timeout=120)
    assert run.returncode == 2
    assert f"{tmp_path / 'x.yml'}: dependsOn[0]: x cannot depend on itself" in run.stderr


# ----------------------------------------------------------------------------- JSON Schema


def test_published_json_schemas_are_current() -> None:
    for name, doc in schemagen.build().items():
        committed = (schemagen.SCHEMA_DIR / name).read_text(encoding="utf-8")
        assert committed == schemagen.render(doc), (
            f"project/schema/{name} is stale: run python -m project.schemagen")


def _schema(name: str) -> jsonschema.protocols.Validator:
    doc = json.loads((schemagen.SCHEMA_DIR / name).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    return cls(doc)


def test_json_schema_accepts_every_valid_corpus_file(tmp_path: Path) -> None:
    app = _schema("app.schema.json")
    for case in _cases(APPS):
        if not _expectations(case):
            errors = [e.message for e in app.iter_errors(yaml.safe_load(case.read_text()))]
            assert not errors, (case.name, errors)
    root = _schema("project.schema.json")
    for case in _cases(ROOTS):
        if not _expectations(case):
            doc = yaml.safe_load(yaml.safe_load(case.read_text())["files"]["project.yml"])
            assert not list(root.iter_errors(doc or {})), case.name


@pytest.mark.parametrize("name", [
    "unknown_property", "unknown_nested_property", "type_unknown", "container_without_image",
    "backend_without_spec", "backend_without_method", "external_without_base_url",
    "port_number_too_high", "port_text_malformed", "deploy_timeout_too_long",
    "deploy_memory_too_small", "method_concurrency_zero", "env_vault_whitelist_empty",
    "auth_without_type", "dev_node_without_script",
])
def test_json_schema_rejects_what_editors_can_see(name: str) -> None:
    doc = yaml.safe_load((APPS / f"{name}.yml").read_text())
    assert list(_schema("app.schema.json").iter_errors(doc)), name


# ----------------------------------------------------------------------------- show and wiring

TOKEN = "tok-5f1e2d3c4b5a6978"
INLINE_SECRET = "inline-secret-0a9b8c"
DOTENV_SECRET = "dotenv-secret-7d6e5f"


def _project(tmp: Path, api_extra: str = "", root_extra: str = "") -> Path:
    for name in SUPPORT:
        shutil.copy(APPS / name, tmp / name)
    (tmp / "project.yml").write_text("apps:\n  api: {path: api.yml}\n  ext: {path: ext.yml}\n"
                                     "job_tables: [legacy_job]\n" + root_extra)
    (tmp / "api.yml").write_text(
        "type: backend\nspec: openapi.yml\n"
        "auth: {type: token, token: 'Tk-${API_TOKEN}'}\n"
        "method: {type: outbox, schema: jobs.surql, concurrency: 3}\n"
        "deploy: {port: 9001, timeout: 42, build_args: {NPM_TOKEN: " + INLINE_SECRET + "}}\n"
        "env: [.env, {SECRET_KEY: " + INLINE_SECRET + "}, {dev: {vault: [DB_URL]}}]\n"
        + api_extra)
    (tmp / ".env").write_text(f"# local\nexport DOTENV_KEY={DOTENV_SECRET}\n"
                              f"SECRET_KEY={DOTENV_SECRET}\n")
    (tmp / "ext.yml").write_text(
        "type: backend\nspec: openapi.yml\nhosting: external\n"
        "baseUrl: https://jobs.example.invalid/base/\n"
        "method: {type: outbox, schema: two_tables.surql, table: job_b}\n")
    return tmp / "project.yml"


def test_show_prints_the_resolved_project_with_secrets_masked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    monkeypatch.setenv("API_TOKEN", TOKEN)
    assert svc_main(["project", "show", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    for secret in (TOKEN, INLINE_SECRET, DOTENV_SECRET):
        assert secret not in out
    doc = json.loads(out)
    api = doc["apps"]["api"]
    assert api["auth"] == {"type": "token", "token": "***", "references": {"API_TOKEN": "set (environment)"}}
    assert api["scope"] == "all" and api["hosting"] == "cloud"
    assert api["deploy"]["port"] == 9001 and api["deploy"]["resources"] == {
        "vcpus": 1, "memory": 512, "disk": 5}
    assert api["deploy"]["context"] == str(tmp_path)
    assert api["method"] == {"type": "outbox", "schema": "jobs.surql", "table": "job_x",
                             "concurrency": 3}
    # merged in order: the inline map after .env overrides its SECRET_KEY
    assert api["env"]["dev"]["vars"] == {"DOTENV_KEY": "*** (.env)", "SECRET_KEY": "*** (inline)"}
    assert api["env"]["cloud"]["vars"] == api["env"]["dev"]["vars"]
    assert api["env"]["dev"]["vault"] == ["DB_URL"] and api["env"]["cloud"]["vault"] is None
    assert doc["job_tables"] == ["legacy_job", "job_x", "job_b"]
    jobs = doc["ssp_job_config"]["job_tables"]
    assert jobs["api"] == {"name": "job_x", "base_url": "http://127.0.0.1:9001",
                           "auth_token": "***", "concurrency": 3, "timeout_secs": 42}
    assert jobs["ext"]["base_url"] == "https://jobs.example.invalid/base"
    assert jobs["ext"]["auth_token"] == "" and jobs["ext"]["timeout_secs"] == 10
    monkeypatch.delenv("API_TOKEN")
    assert svc_main(["project", "show", "--project", str(root)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ssp_job_config"]["job_tables"]["api"]["auth_token"] == "(not set: ${API_TOKEN})"


def test_show_masks_the_shell_commands_people_put_credentials_in(tmp_path: Path) -> None:
    """Issue 32 (low): `svc project show` printed `dev` and `deploy.cmd` verbatim. Run as the
    console command an operator types (its output is what lands in a terminal or a CI log)."""
    root = _project(tmp_path, api_extra=f"dev: 'API_KEY={INLINE_SECRET} node server.js'\n")
    text = (tmp_path / "api.yml").read_text().replace(
        "deploy: {port: 9001,", f"deploy: {{cmd: 'run --token {INLINE_SECRET}', port: 9001,")
    (tmp_path / "api.yml").write_text(text)
    run = subprocess.run([sys.executable, "-m", "svccli", "project", "show", "--project",
                          str(root)], capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert INLINE_SECRET not in run.stderr
    assert INLINE_SECRET not in out
    api = json.loads(out)["apps"]["api"]
    assert api["dev"].startswith("*** (shell command") and api["deploy"]["cmd"].startswith("***")


def test_job_config_substitutes_the_token_and_refuses_an_unset_reference(tmp_path: Path) -> None:
    project = load_project(_project(tmp_path))
    cfg = job_config(project, {"API_TOKEN": TOKEN})
    assert cfg["job_tables"]["api"]["auth_token"] == f"Tk-{TOKEN}"
    assert scheduler_job_tables(project) == ["legacy_job", "job_x", "job_b"]
    with pytest.raises(ProjectInvalid) as e:
        job_config(project, {})
    assert [(i.path, i.reason) for i in e.value.issues] == [
        ("auth.token", "references ${API_TOKEN}, which is not set (in the environment or the "
                       "app's env sources)")]


def _ssp_env(**extra: str) -> dict[str, str]:
    return {"SVC_DB_URL": "ws://127.0.0.1:1", "SVC_DB_USER": "root", "SVC_DB_PASS": "root",
            "SVC_DB_NS": "n", "SVC_DB_NAME": "d", **extra}


def test_ssp_reads_the_job_tables_of_the_project_file(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cfg = SspConfig.from_env(_ssp_env(SVC_PROJECT_FILE=str(root), API_TOKEN=TOKEN))
    tables = {t.key: t for t in cfg.job_tables}
    assert set(tables) == {"api", "ext"}
    api = tables["api"]
    assert (api.name, api.base_url, api.auth_token, api.concurrency, api.timeout_secs) == (
        "job_x", "http://127.0.0.1:9001", f"Tk-{TOKEN}", 3, 42.0)
    assert TOKEN not in repr(cfg)
    # an SVC_JOB_CONFIG entry with an app's key replaces it; other entries are added
    override = json.dumps({"job_tables": {
        "api": {"name": "job_x", "base_url": "http://10.0.0.1:1", "auth_token": "t"},
        "other": {"name": "job_other", "base_url": "http://10.0.0.2:1", "auth_token": "u"}}})
    cfg = SspConfig.from_env(_ssp_env(SVC_PROJECT_FILE=str(root), API_TOKEN=TOKEN,
                                      SVC_JOB_CONFIG=override))
    tables = {t.key: t for t in cfg.job_tables}
    assert set(tables) == {"api", "ext", "other"}
    assert tables["api"].base_url == "http://10.0.0.1:1"


def test_ssp_refuses_a_bad_project_file_or_a_table_configured_twice(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with pytest.raises(SspConfigError, match=r"api\.yml: auth\.token: references"):
        SspConfig.from_env(_ssp_env(SVC_PROJECT_FILE=str(root)))
    twice = json.dumps({"job_tables": {"mine": {"name": "job_b", "base_url": "http://h:1"}}})
    with pytest.raises(SspConfigError, match="job table job_b is configured twice"):
        SspConfig.from_env(_ssp_env(SVC_PROJECT_FILE=str(root), API_TOKEN=TOKEN,
                                    SVC_JOB_CONFIG=twice))
    (tmp_path / "ext.yml").write_text("type: backend\nport: 1\n")
    with pytest.raises(SspConfigError, match=r"ext\.yml: port: unknown property"):
        SspConfig.from_env(_ssp_env(SVC_PROJECT_FILE=str(root), API_TOKEN=TOKEN))


def test_scheduler_job_tables_include_the_project_outboxes(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (tmp_path / "sched.yml").write_text("job_tables: [job_b, own_job]\n")
    env = _ssp_env()
    cfg = SchedulerConfig.load(tmp_path / "sched.yml", {**env, "SVC_PROJECT_FILE": str(root)})
    assert cfg.job_tables == ("job_b", "own_job", "legacy_job", "job_x")
    assert SchedulerConfig.load(None, env).job_tables == ()
    (tmp_path / "api.yml").write_text("type: backend\n")
    with pytest.raises(SchedulerConfigError, match=r"api\.yml: spec: required"):
        SchedulerConfig.load(None, {**env, "SVC_PROJECT_FILE": str(root)})


def test_problems_never_echo_the_values_they_refuse(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    secret = "hunter2-value-9z8y"
    (tmp_path / "project.yml").write_text("apps: {api: {path: api.yml}}\n")
    (tmp_path / "api.yml").write_text(
        "type: backend\nspec: openapi.yml\nhosting: external\n"
        f"baseUrl: 'https://user:{secret}@api.invalid'\n"
        f"auth: {{type: token, token: '{secret}${{BROKEN'}}\n"
        f"method: {{type: outbox, schema: jobs.surql, concurrency: '{secret}'}}\n"
        f"env: {{KEY: {{nested: {secret}}}, 'BAD NAME': {secret}}}\n"
        f"deploy: {{timeout: '{secret}', static: {{dir: 5}}}}\n")
    assert svc_main(["project", "validate", "--project", str(tmp_path / "project.yml")]) == 2
    out, err = capsys.readouterr()
    assert err.count(str(tmp_path / "api.yml")) >= 6, err
    assert secret not in out + err
