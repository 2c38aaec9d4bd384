"""The JSON Schemas of the project files, generated from the pydantic models, for editors.

`python -m project.schemagen` rewrites `project/schema/app.schema.json` (an app's
`project.yml`) and `project/schema/project.schema.json` (the root file); a test fails when the
committed files differ from what the models generate. The rules between properties that the
models check in code (`app_rules`) are added as `if`/`then` clauses so editors show them too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from project.appconfig import AppConfig
from project.rootconfig import RootConfig

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
FILES = {"app.schema.json": "app", "project.schema.json": "root"}
_ID = "https://surreal-views.invalid/schema/"  # no network lookup: editors map the file


def _app_rules() -> list[dict[str, Any]]:
    return [
        {"if": {"properties": {"type": {"const": "container"}}, "required": ["type"]},
         "then": {"required": ["image"]}},
        {"if": {"properties": {"type": {"const": "backend"},
                               "scope": {"not": {"const": "devOnly"}}},
                "required": ["type"]},
         "then": {"required": ["spec", "method"]}},
        {"if": {"properties": {"hosting": {"const": "external"}}, "required": ["hosting"]},
         "then": {"required": ["baseUrl"]}},
    ]


def build() -> dict[str, dict[str, Any]]:
    """File name -> schema document."""
    app = AppConfig.model_json_schema(by_alias=True)
    app["allOf"] = _app_rules()
    root = RootConfig.model_json_schema(by_alias=True)
    out = {}
    for name, doc, title in (("app.schema.json", app, "App project.yml"),
                             ("project.schema.json", root, "Root project.yml")):
        out[name] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                     "$id": _ID + name, **doc, "title": title}
    return out


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def main() -> int:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, doc in build().items():
        (SCHEMA_DIR / name).write_text(render(doc), encoding="utf-8")
        print(f"wrote {SCHEMA_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
