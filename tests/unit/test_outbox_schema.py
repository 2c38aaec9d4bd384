"""A backend's outbox schema file (`method.schema`) as `svc schema apply` runs it: definitions
only, each made safe to run again (the database side is in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from project.rootconfig import load_project
from svccli.outbox import idempotent_statement, outbox_schemas, read_outbox, strip_comments
from svccli.settings import ConfigError


@pytest.mark.parametrize(("stmt", "out"), [
    ("DEFINE TABLE job SCHEMALESS", "DEFINE TABLE IF NOT EXISTS job SCHEMALESS"),
    ("define index by_status ON job FIELDS status",
     "define index IF NOT EXISTS by_status ON job FIELDS status"),
    ("DEFINE FIELD status ON job TYPE string", "DEFINE FIELD OVERWRITE status ON job TYPE string"),
    ("DEFINE EVENT e ON TABLE job THEN { CREATE log; UPDATE x }",
     "DEFINE EVENT OVERWRITE e ON TABLE job THEN { CREATE log; UPDATE x }"),
    # an explicit clause is kept as written
    ("DEFINE TABLE OVERWRITE job SCHEMAFULL", "DEFINE TABLE OVERWRITE job SCHEMAFULL"),
    ("DEFINE FIELD IF  NOT EXISTS f ON job", "DEFINE FIELD IF  NOT EXISTS f ON job"),
])
def test_definitions_get_the_clause_that_makes_them_idempotent(stmt: str, out: str) -> None:
    assert idempotent_statement(stmt) == out


@pytest.mark.parametrize("stmt", ["CREATE job:1 SET status = 'pending'", "USE NS x DB y",
                                  "REMOVE TABLE job", "DEFINED"])
def test_other_statements_are_refused(stmt: str) -> None:
    with pytest.raises(ValueError, match="is not a DEFINE statement"):
        idempotent_statement(stmt)


def test_comments_go_and_strings_stay() -> None:
    text = ("-- the jobs\nDEFINE TABLE job; # trailing\n/* block ; */ DEFINE FIELD s ON job "
            "VALUE '-- not a comment; #' // end\n")
    assert strip_comments(text).split() == [
        "DEFINE", "TABLE", "job;", "DEFINE", "FIELD", "s", "ON", "job", "VALUE",
        "'--", "not", "a", "comment;", "#'"]


def test_a_schema_file_is_read_with_its_tables(tmp_path: Path) -> None:
    path = tmp_path / "jobs.surql"
    path.write_text("-- outbox\nDEFINE TABLE api_job SCHEMALESS;\n"
                    "DEFINE FIELD status ON api_job TYPE string DEFAULT 'pending';\n"
                    "DEFINE INDEX by_status ON TABLE audit FIELDS status;\n"
                    "DEFINE ACCESS svc ON DATABASE TYPE JWT ALGORITHM HS256 KEY 'k';\n"
                    "DEFINE EVENT notify ON api_job WHEN $event = 'CREATE' THEN {\n"
                    "  CREATE audit SET at = time::now(); };\n")
    schema = read_outbox("api", path)
    assert schema.tables == ("api_job", "audit")
    assert len(schema.statements) == 5
    assert schema.statements[0] == "DEFINE TABLE IF NOT EXISTS api_job SCHEMALESS"


def test_a_file_with_data_changes_or_nothing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.surql"
    path.write_text("DEFINE TABLE api_job;\nCREATE api_job:seed SET status = 'done';\n")
    with pytest.raises(ConfigError, match=r"app api: method.schema .*jobs.surql: statement 2: "
                       r"CREATE is not a DEFINE statement"):
        read_outbox("api", path)
    path.write_text("-- nothing yet\n")
    with pytest.raises(ConfigError, match="no statements"):
        read_outbox("api", path)


def test_every_backend_with_an_outbox_is_applied_in_the_root_order(tmp_path: Path) -> None:
    (tmp_path / "openapi.yml").write_text("openapi: 3.0.3\n")
    for name in ("b", "a"):
        (tmp_path / f"{name}.surql").write_text(f"DEFINE TABLE {name}_job;\n")
        (tmp_path / f"{name}.yml").write_text(
            f"type: backend\nspec: openapi.yml\nmethod: {{type: outbox, schema: {name}.surql}}\n")
    (tmp_path / "web.yml").write_text("type: frontend\n")
    (tmp_path / "project.yml").write_text(
        "apps: {b: {path: b.yml}, web: {path: web.yml}, a: {path: a.yml}}\n")
    schemas = outbox_schemas(load_project(tmp_path / "project.yml"))
    assert [(s.app, s.tables) for s in schemas] == [("b", ("b_job",)), ("a", ("a_job",))]
