"""Where the engine's time goes: requests grouped by statement shape (`GET /debug/statements`).

Under a steady load the database host is the stack's bottleneck (issue 31's soak: ~127% of two
cores at 500 application writes a second), and what saturates it is a question of which
statements, from whom, cost what. This keeps, per statement shape, the requests served and the
time they spent inside the engine, so an operator (or a soak) can read the answer from a running
host instead of guessing.

- A shape is the request's method and, for `query`, its text with literals replaced: numbers by
  `0`, quoted strings by `'?'`, record ids' keys by `?`, whitespace collapsed, cut at
  `SHAPE_CHARS`. A literal in an application's text (a password in a DEFINE USER, an e-mail in a
  WHERE) never reaches the table, and `UPDATE post:17 ...` and `UPDATE post:18 ...` are one row.
- Times are wall clock inside the engine call (the host's event loop is not in them). Requests
  run concurrently on the engine's threads, so shares of the total compare shapes, and a total
  above the elapsed time means requests waited on each other inside the engine.
- Reply bytes per shape: the host's loop decodes (its own reads) or forwards (a client's)
  every byte the engine answers, so a shape that answers much costs the host, not only the
  engine (issue 31: changefeed reads that re-read a window each round).
- At most `MAX_SHAPES` shapes; later ones are counted under `(other)`. The text-to-shape cache is
  bounded too, so an application sending ever-new texts costs a bounded amount of memory.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

SHAPE_CHARS = 160
MAX_SHAPES = 500
MAX_CACHED_TEXTS = 4096
OTHER = "(other)"

_STRING = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|⟨[^⟩]*⟩""")
_RECORD_KEY = re.compile(r"(\b[A-Za-z_][A-Za-z0-9_]*):(?:`[^`]*`|[A-Za-z0-9_]+)")
_NUMBER = re.compile(r"(?<![A-Za-z_$])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[a-z]*")
_SPACE = re.compile(r"\s+")


def statement_shape(text: str) -> str:
    """The text with its literals replaced (module docstring)."""
    s = _STRING.sub("'?'", text)
    s = _RECORD_KEY.sub(r"\1:?", s)
    s = _NUMBER.sub("0", s)
    s = _SPACE.sub(" ", s).strip()
    return s[:SHAPE_CHARS]


@dataclass
class ShapeStats:
    """Requests of one shape."""

    count: int = 0
    errors: int = 0  # requests the engine call raised on (not statements answering an error)
    total_s: float = 0.0
    max_s: float = 0.0
    reply_bytes: int = 0  # what the engine answered: the host decodes or forwards all of it


class StatementStats:
    """Counters per statement shape since the host started (or the last reset)."""

    def __init__(self) -> None:
        self.since = time.time()
        self._shapes: dict[str, ShapeStats] = {}
        self._texts: dict[str, str] = {}

    def shape_of(self, method: str, text: str | None) -> str:
        """The shape a request is counted under."""
        if text is None:
            return method
        shape = self._texts.get(text)
        if shape is None:
            shape = method + " " + statement_shape(text)
            if len(self._texts) >= MAX_CACHED_TEXTS:
                self._texts.clear()  # ever-new texts: start over rather than grow
            self._texts[text] = shape
        return shape

    def record(self, shape: str, seconds: float, failed: bool = False,
               reply_bytes: int = 0) -> None:
        """Count one request of `shape` that spent `seconds` in the engine and answered
        `reply_bytes`."""
        st = self._shapes.get(shape)
        if st is None:
            if len(self._shapes) >= MAX_SHAPES:
                shape = OTHER
                st = self._shapes.get(shape)
            if st is None:
                st = self._shapes[shape] = ShapeStats()
        st.count += 1
        st.total_s += seconds
        st.reply_bytes += reply_bytes
        if seconds > st.max_s:
            st.max_s = seconds
        if failed:
            st.errors += 1

    @property
    def shape_count(self) -> int:
        """Shapes counted since the start or the last reset."""
        return len(self._shapes)

    def reset(self) -> None:
        """Start counting again (`DELETE /debug/statements`)."""
        self.since = time.time()
        self._shapes.clear()

    def report(self, limit: int = 50) -> dict[str, Any]:
        """The `limit` shapes with the most engine time, with their share of the total."""
        elapsed = max(time.time() - self.since, 1e-9)
        total = sum(s.total_s for s in self._shapes.values()) or 1e-12
        rows = sorted(self._shapes.items(), key=lambda kv: kv[1].total_s, reverse=True)
        return {
            "since": self.since,
            "elapsed_s": round(elapsed, 3),
            "requests": sum(s.count for s in self._shapes.values()),
            "engine_s": round(sum(s.total_s for s in self._shapes.values()), 3),
            "shapes": len(self._shapes),
            "statements": [{
                "shape": shape,
                "count": st.count,
                "errors": st.errors,
                "per_s": round(st.count / elapsed, 2),
                "total_ms": round(st.total_s * 1000, 1),
                "mean_ms": round(st.total_s * 1000 / st.count, 3),
                "max_ms": round(st.max_s * 1000, 1),
                "share": round(st.total_s / total, 4),
                "reply_kb_per_s": round(st.reply_bytes / 1024 / elapsed, 1),
            } for shape, st in rows[:max(0, limit)]],
        }
