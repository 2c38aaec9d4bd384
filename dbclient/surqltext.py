"""Where a SurrealQL text's strings, quoted names and comments are: what a scanner must pass
over before it looks for `;`, brackets or keywords (the database host's LIVE/KILL split,
`svc`'s outbox schema files).

Strings are `'...'`, `"..."` and `` `...` `` (a backslash escapes the next character), quoted
names `⟨...⟩`; comments `--`, `//` and `#` to the end of the line, `/* ... */`. An unclosed one
runs to the end of the text."""

from __future__ import annotations

from typing import Literal

SpanKind = Literal["quoted", "line_comment", "block_comment"]


def skipped_span(text: str, i: int) -> tuple[SpanKind, int] | None:
    """The string, quoted name or comment that starts at ``text[i]``, as (its kind, the index
    just past it); None when ``text[i]`` is code."""
    c = text[i]
    n = len(text)
    if c in "'\"`":
        j = i + 1
        while j < n and text[j] != c:
            j += 2 if text[j] == "\\" else 1
        return "quoted", min(j + 1, n)
    if c == "⟨":
        j = text.find("⟩", i + 1)
        return "quoted", n if j < 0 else j + 1
    if c == "#" or c == "-" and text.startswith("--", i) or c == "/" and text.startswith("//", i):
        j = text.find("\n", i)
        return "line_comment", n if j < 0 else j + 1
    if c == "/" and text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return "block_comment", n if j < 0 else j + 2
    return None
