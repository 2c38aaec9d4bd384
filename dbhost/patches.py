"""JSON Patch (RFC 6902) for LIVE queries: undo a changefeed patch, and diff two rows."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """A patch that does not apply to the document."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    if not path.startswith("/"):
        raise PatchError(f"bad path {path!r}")
    tokens = [_unescape(t) for t in path[1:].split("/")]
    node = doc
    for t in tokens[:-1]:
        if isinstance(node, list):
            node = node[int(t)]
        elif isinstance(node, dict):
            node = node[t]
        else:
            raise PatchError(f"path {path!r} goes through a scalar")
    return node, tokens[-1]


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """A copy of `doc` with the add/remove/replace/copy/move/test operations applied."""
    out = copy.deepcopy(doc)
    try:
        for op in ops:
            kind, path = op.get("op"), op.get("path", "")
            if path == "" and kind in ("add", "replace"):
                out = copy.deepcopy(op.get("value"))
                continue
            if kind in ("move", "copy"):
                src_parent, src_key = _parent(out, op["from"])
                value = (src_parent[int(src_key)] if isinstance(src_parent, list)
                         else src_parent[src_key])
                if kind == "move":
                    out = apply_patch(out, [{"op": "remove", "path": op["from"]}])
                out = apply_patch(out, [{"op": "add", "path": path, "value": value}])
                continue
            if kind == "test":
                continue
            parent, key = _parent(out, path)
            if isinstance(parent, list):
                idx = len(parent) if key == "-" else int(key)
                if kind == "add":
                    parent.insert(idx, copy.deepcopy(op.get("value")))
                elif kind == "replace":
                    parent[idx] = copy.deepcopy(op.get("value"))
                elif kind == "remove":
                    del parent[idx]
                else:
                    raise PatchError(f"unknown op {kind!r}")
            elif isinstance(parent, dict):
                if kind in ("add", "replace"):
                    parent[key] = copy.deepcopy(op.get("value"))
                elif kind == "remove":
                    parent.pop(key, None)
                else:
                    raise PatchError(f"unknown op {kind!r}")
            else:
                raise PatchError(f"path {path!r} does not name a container")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise PatchError(str(exc)) from None
    return out


def make_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """JSON Patch operations turning `before` into `after` (objects recursively, arrays and
    scalars replaced whole)."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_escape(str(key))}"})
        for key, value in after.items():
            sub = f"{path}/{_escape(str(key))}"
            if key not in before:
                ops.append({"op": "add", "path": sub, "value": value})
            elif not _same(before[key], value):
                ops.extend(make_diff(before[key], value, sub))
        return ops
    if _same(before, after):
        return []
    return [{"op": "replace", "path": path, "value": after}]


def _same(a: Any, b: Any) -> bool:
    # bool is an int in Python; SurrealDB keeps them apart.
    return type(a) is type(b) and a == b
