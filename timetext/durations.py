"""Duration text as SurrealDB writes it (`30s`, `1h30m`): the one duration parser, and a
view's ttl."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Final

_DURATION_PART = re.compile(r"(\d+)(ns|us|µs|ms|s|m|h|d|w|y)")
_DURATION_NS: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 86_400 * 1_000_000_000,
    "w": 7 * 86_400 * 1_000_000_000,
    "y": 365 * 86_400 * 1_000_000_000,
}
#: Longest accepted ttl: 10 years (a bigger one is a mistake, and overflows datetimes later).
MAX_DURATION_MS: Final = 10 * 365 * 86_400 * 1000


def parse_duration_ns(text: str) -> int:
    """Duration text as SurrealDB writes it (`30s`, `10m`, `1h30m`, `500ms`) -> nanoseconds:
    the one duration parser (ttl, changefeed retention, settings).

    Units: ns, us/µs, ms, s, m, h, d, w, y; parts may repeat in any order and add up. The
    total must be positive. ValueError says what is wrong.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("must be duration text such as 30s, 10m or 1h30m, got an empty string")
    pos = 0
    total_ns = 0
    for m in _DURATION_PART.finditer(stripped):
        if m.start() != pos:
            break
        if len(m.group(1)) > 20:
            raise ValueError(f"duration {text!r} is too large")
        total_ns += int(m.group(1)) * _DURATION_NS[m.group(2)]
        pos = m.end()
    if pos != len(stripped) or pos == 0:
        raise ValueError(f"must be duration text such as 30s, 10m or 1h30m, got {text!r}")
    if total_ns <= 0:
        raise ValueError(f"must be a positive duration, got {text!r}")
    return total_ns


def parse_duration_ms(text: str) -> int:
    """`parse_duration_ns` in milliseconds (at least 1), at most 10 years (a ttl)."""
    total_ms = parse_duration_ns(text) // 1_000_000
    if total_ms > MAX_DURATION_MS:
        raise ValueError(f"must be at most 10 years, got {text!r}")
    return max(total_ms, 1)


#: A `_00_query` row's ttl when it has none (or an unreadable one): the client default, 10m.
DEFAULT_TTL_MS: Final = 600_000


def ttl_ms(value: Any) -> int:
    """A `_00_query.ttl` (a SurrealDB duration or its text) in ms; DEFAULT_TTL_MS otherwise."""
    elapsed = getattr(value, "elapsed", None)  # surrealdb's Duration (ns), without importing it
    if isinstance(elapsed, int) and not isinstance(value, (str, bytes)):
        return max(1, elapsed // 1_000_000)
    if isinstance(value, str):
        return _text_ttl_ms(value)
    return DEFAULT_TTL_MS


@lru_cache(maxsize=256)
def _text_ttl_ms(text: str) -> int:
    # The TTL sweep reads every `_00_query` row each minute, and clients send a few ttl texts
    # many times: parsing 10,000 of them took 0.4 s of the hub's CPU per sweep (cProfile,
    # loadtests/bench_ssp.py's 10,000 views); a dictionary hit costs nothing.
    try:
        return parse_duration_ms(text)
    except ValueError:
        return DEFAULT_TTL_MS
