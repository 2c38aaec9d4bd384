"""The view's query turned into a read of its members, so the client asks SurrealDB for the
rows it already knows are in the view, and SurrealDB itself applies projections, links and
ORDER BY.

The service's edges say which records are in the view; reading them back by running the
whole query again would defeat the service. Instead the query's top-level `FROM <target>`
becomes `FROM $__members` and its top-level `START`/`LIMIT` are dropped (the members already
are the window: a `START 5` over them would cut five members away). Everything else (the
projection with its subqueries and `$parent` links, WHERE, ORDER BY, FETCH) is kept, so the
rows come back exactly as SurrealDB would shape and order them.
"""

from __future__ import annotations

import re

MEMBERS_PARAM = "__members"

_WORD = re.compile(r"[A-Za-z_]+")
_CLAUSES = {"WHERE", "SPLIT", "GROUP", "ORDER", "LIMIT", "START", "FETCH", "TIMEOUT",
            "PARALLEL", "EXPLAIN", "WITH", "TEMPFILES", "VERSION"}


class UnsupportedQuery(ValueError):
    """The query is not a single SELECT the client can turn into a members read."""


def _top_level_words(text: str) -> list[tuple[int, int, str]]:
    """(start, end, upper-cased word) of every word outside brackets, strings and comments."""
    out: list[tuple[int, int, str]] = []
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "⟨":
            j = text.find("⟩", i + 1)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("--", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and (c.isalpha() or c == "_") and (i == 0 or not (
                text[i - 1].isalnum() or text[i - 1] in "_:$.")):
            m = _WORD.match(text, i)
            assert m is not None
            out.append((i, m.end(), m.group(0).upper()))
            i = m.end()
            continue
        i += 1
    return out


def members_query(surql: str) -> str:
    """The view's query reading `$__members` instead of its table, without START/LIMIT."""
    text = surql.strip().rstrip(";").strip()
    words = _top_level_words(text)
    if not words or words[0][2] != "SELECT":
        raise UnsupportedQuery("a view is one SELECT statement")
    froms = [w for w in words if w[2] == "FROM"]
    if not froms:
        raise UnsupportedQuery("the query has no FROM")
    f_start, f_end, _ = froms[0]
    after = [w for w in words if w[0] > f_end and w[2] in _CLAUSES]
    target_end = after[0][0] if after else len(text)
    head = text[:f_start] + f"FROM ${MEMBERS_PARAM} "
    rest = text[target_end:]
    # Drop `START [AT] x` and `LIMIT [BY] x`: each runs to the next top-level clause.
    rest_words = [w for w in _top_level_words(rest) if w[2] in _CLAUSES]
    keep: list[str] = []
    for k, (s, _e, word) in enumerate(rest_words):
        end = rest_words[k + 1][0] if k + 1 < len(rest_words) else len(rest)
        if word not in ("START", "LIMIT"):
            keep.append(rest[s:end].strip())
    if rest_words and rest_words[0][0] > 0:
        keep.insert(0, rest[:rest_words[0][0]].strip())
    return (head + " ".join(k for k in keep if k)).strip()
