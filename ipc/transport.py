"""The ingest transport: one rule for the scheduler, the SSP and the CLI.

Spec ("What the service does" 5): `http` (the default) means the database's generated events
call `/ingest` inside the writing transaction; `changefeed` means synced tables carry a
changefeed and the scheduler (or a standalone SSP) tails it. Every component reads
`SVC_INGEST_TRANSPORT` through `ingest_transport` (case and surrounding blanks ignored, empty
or unset = `DEFAULT_TRANSPORT`); the CLI's `--transport` flag and the project file's
`sync.transport` come before the default there, through `parse_transport`.
"""

from __future__ import annotations

from collections.abc import Mapping

TRANSPORTS = ("http", "changefeed")
DEFAULT_TRANSPORT = "http"
ENV_VAR = "SVC_INGEST_TRANSPORT"


class TransportError(ValueError):
    """A transport name that is neither `http` nor `changefeed`."""


def parse_transport(text: str, source: str) -> str:
    """`text` as a transport name; TransportError naming `source` otherwise."""
    value = text.strip().lower()
    if value not in TRANSPORTS:
        raise TransportError(f"ingest transport {text.strip()[:40]!r} (from {source}) must be "
                             f"one of {', '.join(TRANSPORTS)}")
    return value


def ingest_transport(env: Mapping[str, str]) -> str:
    """`SVC_INGEST_TRANSPORT`, or the spec's default `http` when unset or empty."""
    raw = env.get(ENV_VAR, "")
    return parse_transport(raw, ENV_VAR) if raw.strip() else DEFAULT_TRANSPORT


__all__ = ["DEFAULT_TRANSPORT", "ENV_VAR", "TRANSPORTS", "TransportError", "ingest_transport",
           "parse_transport"]
