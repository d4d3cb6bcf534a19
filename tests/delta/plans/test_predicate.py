"""Partition predicates: parsing, errors, three-valued evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.plans.predicate import (
    BoolOp, Cmp, In, IsNull, Not, check_partition_columns, columns_of, evaluate, parse_predicate,
)


@pytest.mark.parametrize("text,expected", [
    ("a = 1", Cmp("a", "=", 1)),
    ("a == 1", Cmp("a", "=", 1)),
    ("a <> 'x'", Cmp("a", "!=", "x")),
    ("a >= -2.5", Cmp("a", ">=", -2.5)),
    ("a < 1e3", Cmp("a", "<", 1000.0)),
    ("`my col` = 'it''s'", Cmp("my col", "=", "it's")),
    ("a = TRUE", Cmp("a", "=", True)),
    ("a IS NULL", IsNull("a", False)),
    ("a is not null", IsNull("a", True)),
    ("a IN (1, 2)", In("a", (1, 2), False)),
    ("a NOT IN ('x')", In("a", ("x",), True)),
    ("a = 1 AND b = 2 OR c = 3", BoolOp("OR", (BoolOp("AND", (Cmp("a", "=", 1), Cmp("b", "=", 2))), Cmp("c", "=", 3)))),
    ("a = 1 AND (b = 2 OR c = 3)", BoolOp("AND", (Cmp("a", "=", 1), BoolOp("OR", (Cmp("b", "=", 2), Cmp("c", "=", 3)))))),
    ("NOT a = 1", Not(Cmp("a", "=", 1))),
])
def test_parse(text, expected) -> None:
    assert parse_predicate(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "a =", "a = 1 AND", "= 1", "a = 'open", "a IN ()", "a IN (1",
                                  "(a = 1", "a = 1)", "a NOT = 1", "a === 1", "a = 1 b = 2", "a IS 1", "a ~ 1"])
def test_malformed(text) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid predicate"):
        parse_predicate(text)


def test_partition_columns_case_insensitive() -> None:
    expr = parse_predicate("Year = 1 AND P = 'a'")
    assert columns_of(expr) == {"Year", "P"}
    assert check_partition_columns(expr, ["year", "p"]) == {"Year": "year", "P": "p"}
    with pytest.raises(InvalidArgumentError, match="not a partition column: x"):
        check_partition_columns(parse_predicate("x = 1 OR year = 2"), ["year"])
    with pytest.raises(InvalidArgumentError, match="the table has none"):
        check_partition_columns(parse_predicate("x = 1"), [])


@pytest.mark.parametrize("text,row,expected", [
    ("a = 1", {"a": 1}, True),
    ("a = 1", {"a": None}, None),
    ("a != 1", {"a": None}, None),
    ("a IS NULL", {"a": None}, True),
    ("a IN (1, NULL)", {"a": 2}, None),
    ("a IN (1, NULL)", {"a": 1}, True),
    ("a NOT IN (1, NULL)", {"a": 2}, None),
    ("a = 1 OR b = 1", {"a": None, "b": 1}, True),
    ("a = 1 AND b = 1", {"a": None, "b": 2}, False),
    ("a = 1 AND b = 1", {"a": None, "b": 1}, None),
    ("NOT a = 1", {"a": None}, None),
    ("NOT a = 1", {"a": 2}, True),
])
def test_three_valued_logic(text, row, expected) -> None:
    assert evaluate(parse_predicate(text), row) is expected


def test_incomparable_types_are_a_clear_error() -> None:
    with pytest.raises(InvalidArgumentError, match="cannot compare"):
        evaluate(parse_predicate("a < 'x'"), {"a": 1})


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(-1000, 1000), st.integers(-1000, 1000), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
def test_comparisons_match_python(value, literal, op) -> None:
    python = {"=": value == literal, "!=": value != literal, "<": value < literal, "<=": value <= literal,
              ">": value > literal, ">=": value >= literal}[op]
    assert evaluate(parse_predicate(f"c {op} {literal}"), {"c": value}) is python
    assert evaluate(parse_predicate(f"NOT (c {op} {literal})"), {"c": value}) is (not python)


@settings(max_examples=examples(100), deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20))
def test_string_literals_round_trip(text) -> None:
    quoted = "'" + text.replace("'", "''") + "'"
    assert parse_predicate(f"s = {quoted}") == Cmp("s", "=", text)
