"""The filter grammar gives the same rows as the equivalent pyarrow compute expression."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lamina.errors import InvalidFilter
from lamina.filter import parse_filter
from tests.lamina.helpers import SCHEMA, rows

DATA = rows(0, 500)
TS = lambda s: pa.scalar(np.datetime64(s, "us"))  # noqa: E731

CASES = [
    ("id < 100", pc.field("id") < 100),
    ("id <= 100 AND category = 'a'", (pc.field("id") <= 100) & (pc.field("category") == "a")),
    ("id > 450 OR category == 'b'", (pc.field("id") > 450) | (pc.field("category") == "b")),
    ("NOT (id >= 10)", ~(pc.field("id") >= 10)),
    ("id != 3 and id <> 4 and id < 6", (pc.field("id") != 3) & (pc.field("id") != 4) & (pc.field("id") < 6)),
    ("id IN (1, 2, 3, 999)", pc.field("id").isin([1, 2, 3, 999])),
    ("id NOT IN (1, 2)", ~pc.field("id").isin([1, 2])),
    ("id BETWEEN 10 AND 20", (pc.field("id") >= 10) & (pc.field("id") <= 20)),
    ("id NOT BETWEEN 10 AND 490", ~((pc.field("id") >= 10) & (pc.field("id") <= 490))),
    ("category IS NULL", pc.field("category").is_null()),
    ("category IS NOT NULL AND score > 0.5", pc.field("category").is_valid() & (pc.field("score") > 0.5)),
    ("meta.a = 5", pc.field(("meta", "a")) == 5),
    ("meta.b LIKE 'b1%'", pc.match_like(pc.field(("meta", "b")), "b1%")),
    ("ts >= '2024-01-01 00:05:00'", pc.field("ts") >= TS("2024-01-01T00:05:00")),
    ("ts < TIMESTAMP '2024-01-01T00:00:10'", pc.field("ts") < TS("2024-01-01T00:00:10")),
    ('"id" = 7', pc.field("id") == 7),
    ("`category` = 'it''s'", pc.field("category") == "it's"),
    ("5 > id", pc.field("id") < 5),
    ("score >= 1e-1 AND id < -1 OR id = 0", ((pc.field("score") >= 0.1) & (pc.field("id") < -1)) | (pc.field("id") == 0)),
    ("TRUE", pc.scalar(True)),
]


@pytest.mark.parametrize("text,expr", CASES, ids=[c[0] for c in CASES])
def test_grammar_matches_pyarrow(text, expr):
    flt = parse_filter(text, SCHEMA)
    assert DATA.filter(flt.expression).equals(DATA.filter(expr))


def test_columns_are_reported():
    assert parse_filter("id < 3 AND meta.a = 1", SCHEMA).columns == frozenset({"id", "meta"})
    assert parse_filter(pc.field("id") < 3, SCHEMA).columns is None


@pytest.mark.parametrize("text,message", [
    ("", "empty filter"),
    ("id <", "unexpected end"),
    ("id = 1 AND", "unexpected end"),
    ("(id = 1", r"expected \)"),
    ("id ~ 1", "cannot parse"),
    ("nope = 1", "column 'nope'"),
    ("meta.zz = 1", "'meta.zz' is not a field"),
    ("id = 'x'", "cannot be compared"),
    ("ts > TIMESTAMP 'yesterday'", "not an ISO-8601"),
    ("id LIKE 5", "LIKE needs a string"),
    ("1 IN (1)", "left side of IN must be a column"),
])
def test_bad_filters(text, message):
    with pytest.raises(InvalidFilter, match=message):
        parse_filter(text, SCHEMA)


def test_non_filter_type():
    with pytest.raises(InvalidFilter, match="not int"):
        parse_filter(5, SCHEMA)
