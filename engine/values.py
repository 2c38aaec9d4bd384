"""SurrealDB value semantics, reproduced exactly for the incremental engine.

Every rule here was discovered empirically against SurrealDB core 3.2.4 (the embedded engine
from ``surrealdb-embedded``) and is pinned by differential tests in ``tests/unit/test_values*.py``
that ask SurrealDB for the answer and compare. Values are what the official SDK returns for a
row: ``None`` is NULL, the :data:`NONE` sentinel (or an absent key) is NONE, ``surrealdb.RecordID``
is a record link, ``datetime`` (tz-aware), ``Decimal``, ``surrealdb.Duration``, ``uuid.UUID``,
``bytes``, int, float, str, bool, lists and dicts.

Facts (3.2.4) this module encodes:

* Total order used by ``ORDER BY`` and by ``< <= > >=`` across kinds, by kind rank::

      NONE < NULL < bool < number < string < duration < datetime < uuid < array < object
           < bytes < record id

  Numbers compare by value whatever their storage (``1 = 1.0f = 1dec``). Strings compare by
  code point (== UTF-8 byte order; ``'B' < 'a'``). Arrays compare element-wise, a prefix first.
  Objects compare as their sorted ``(key, value)`` sequences. Record ids compare by table, then
  key (number < string < uuid < array < object).
* ``ORDER BY ... LIMIT n START s`` with ``s + n <= 1000`` breaks ties in scan order (record-id
  key order, :func:`sort_key` of the id) in both ASC and DESC; DESC is therefore *not* the
  exact reverse of ASC for ties. Without LIMIT, or when ``s + n > 1000``, SurrealDB sorts with
  an unstable sort and the order of ties (so membership at a tied LIMIT cut) is unspecified.
* Numbers: int/int, int/float, int/decimal compare exactly; float/decimal goes through
  SurrealDB's own fraction walk (:func:`_float_vs_decimal`), so ``0.1f = 0.1dec`` but
  ``1.1f > 1.1dec``. NaN equals NaN and sorts above +inf. ``-0.0 = 0``.
* ``=``/``==`` is equality in that order (``'1' != 1``, ``NULL != NONE``, a record id never
  equals its text). ``<`` etc. compare across kinds by rank (``NONE < 1``).
* ``CONTAINS``: array membership by ``=``; string substring (string operand only); object has
  the key; uuid text substring. ``CONTAINSALL/ANY/NONE`` with an array operand test each
  element against arrays (membership) and strings (substring, and a string only answers an
  array of strings), nothing else; with a string operand they are substring tests on a string.
  ``CONTAINSALL []`` is true for anything, ``CONTAINSANY []`` false. ``INSIDE``/``IN`` and the
  ``*INSIDE`` forms are the mirrored operators.
* Truthiness (``WHERE v``): NONE, NULL, false, 0 (any number type), '' , [], {} and a zero
  duration are false; NaN, datetimes, uuids, bytes (non-empty) and record ids are true.
* Field paths: a missing field or a field of a non-object is NONE; a field of an array maps over
  its elements (``tags.name`` gives ``['a', NONE]``).
* ``<string> id`` prints escaped record-id parts with backticks in 3.x (``user:`a-b` ``), not
  the ``⟨⟩`` of 2.x; :func:`parse_record_id` accepts both. A string key is escaped when it is
  empty, has a character outside ``[A-Za-z0-9_]``, is only digits/underscores, or is ``NaN`` /
  ``Infinity``. Values print as SurrealQL (``1.5f``, ``1.5dec``, ``d'...'``, ``u'...'``,
  ``b"HEX"``, objects with sorted keys).

The code lives in one module per section, re-exported here (import from ``engine.values``):
``value_types`` (NONE, record-id builder), ``value_order`` (kind ranks, sort and equality keys),
``value_ops`` (operators, truthiness, field paths), ``value_text`` (SurrealQL text of record ids
and literals), ``value_bytes`` (canonical row bytes).

Known limits: the SDK decodes datetimes to microseconds, so two datetimes that differ only in
their nanoseconds compare equal here. Geometry and range values are ordered after every other
kind but their internal order is not verified.
"""

from __future__ import annotations

from surrealdb import Duration, RecordID

from engine.value_bytes import (
    EXT_DATETIME,
    EXT_DECIMAL,
    EXT_DURATION,
    EXT_NONE,
    EXT_RECORD_ID,
    EXT_UUID,
    canonical_bytes,
    ext_value,
    pack_value,
    pack_wire,
    unpack_value,
)
from engine.value_ops import (
    all_inside,
    any_inside,
    contains,
    contains_all,
    contains_any,
    contains_none,
    contains_not,
    equals,
    get_path,
    greater,
    greater_equal,
    inside,
    less,
    less_equal,
    none_inside,
    not_equals,
    not_inside,
    truthy,
)
from engine.value_order import (
    compare,
    eq_key,
    kind_rank,
    sort_key,
)
from engine.value_text import (
    format_value,
    parse_record_id,
    parse_value,
    record_id_text,
)
from engine.value_types import (
    NONE,
    NoneType,
    ValueSyntaxError,
    make_record_id,
)

__all__ = [
    "EXT_DATETIME",
    "EXT_DECIMAL",
    "EXT_DURATION",
    "EXT_NONE",
    "EXT_RECORD_ID",
    "EXT_UUID",
    "NONE",
    "Duration",
    "NoneType",
    "RecordID",
    "ValueSyntaxError",
    "all_inside",
    "any_inside",
    "canonical_bytes",
    "compare",
    "contains",
    "contains_all",
    "contains_any",
    "contains_none",
    "contains_not",
    "eq_key",
    "equals",
    "ext_value",
    "format_value",
    "get_path",
    "greater",
    "greater_equal",
    "inside",
    "kind_rank",
    "less",
    "less_equal",
    "make_record_id",
    "none_inside",
    "not_equals",
    "not_inside",
    "pack_value",
    "pack_wire",
    "parse_record_id",
    "parse_value",
    "record_id_text",
    "sort_key",
    "truthy",
    "unpack_value",
]
