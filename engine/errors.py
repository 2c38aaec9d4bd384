"""Exceptions raised by the engine."""

from __future__ import annotations


class QueryRejected(ValueError):
    """A view query uses something the engine does not support; the message names it."""
