"""Partition predicates: a small SQL-like filter over partition columns.

Grammar: ``expr := or``; ``or := and (OR and)*``; ``and := not (AND not)*``;
``not := NOT not | '(' expr ')' | cmp``; ``cmp := col op literal | col [NOT] IN (lit, ...) |
col IS [NOT] NULL``; ``op`` one of ``= == != <> < <= > >=``. Literals: 'quoted strings'
(with '' for a quote), numbers, TRUE/FALSE, NULL. Columns may be `back-quoted`.
Comparisons follow SQL: anything compared with NULL is not true.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from airflow_delta_maint.delta.errors import InvalidArgumentError

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<str>'(?:[^']|'')*')
    | (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<op><=|>=|<>|!=|==|=|<|>)
    | (?P<punct>[(),])
    | (?P<bq>`(?:[^`]|``)+`)
    | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""", re.VERBOSE)

_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"}


@dataclass(frozen=True)
class Cmp:
    column: str
    op: str
    value: Any


@dataclass(frozen=True)
class In:
    column: str
    values: tuple
    negated: bool


@dataclass(frozen=True)
class IsNull:
    column: str
    negated: bool


@dataclass(frozen=True)
class BoolOp:
    op: str  # AND | OR
    parts: tuple


@dataclass(frozen=True)
class Not:
    part: Any


Expr = Cmp | In | IsNull | BoolOp | Not


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise InvalidArgumentError(f"invalid predicate {text!r}: cannot parse at {text[pos:pos + 20]!r}")
            kind = m.lastgroup or ""
            value = m.group(kind)
            if kind == "word" and value.upper() in _KEYWORDS:
                kind, value = "kw", value.upper()
            self.tokens.append((kind, value))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str | None = None, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (kind and tok[0] != kind) or (value and tok[1] != value):
            want = value or kind or "more input"
            got = tok[1] if tok else "end of input"
            raise InvalidArgumentError(f"invalid predicate {self.text!r}: expected {want}, found {got!r}")
        self.i += 1
        return tok

    def accept(self, kind: str, value: str | None = None) -> bool:
        tok = self.peek()
        if tok and tok[0] == kind and (value is None or tok[1] == value):
            self.i += 1
            return True
        return False

    def parse(self) -> Expr:
        expr = self.parse_or()
        rest = self.peek()
        if rest is not None:
            raise InvalidArgumentError(f"invalid predicate {self.text!r}: unexpected {rest[1]!r}")
        return expr

    def parse_or(self) -> Expr:
        parts = [self.parse_and()]
        while self.accept("kw", "OR"):
            parts.append(self.parse_and())
        return parts[0] if len(parts) == 1 else BoolOp("OR", tuple(parts))

    def parse_and(self) -> Expr:
        parts = [self.parse_not()]
        while self.accept("kw", "AND"):
            parts.append(self.parse_not())
        return parts[0] if len(parts) == 1 else BoolOp("AND", tuple(parts))

    def parse_not(self) -> Expr:
        if self.accept("kw", "NOT"):
            return Not(self.parse_not())
        if self.accept("punct", "("):
            expr = self.parse_or()
            self.take("punct", ")")
            return expr
        return self.parse_cmp()

    def literal(self) -> Any:
        kind, value = self.take()
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return float(value) if any(c in value for c in ".eE") else int(value)
        if kind == "kw" and value in ("TRUE", "FALSE"):
            return value == "TRUE"
        if kind == "kw" and value == "NULL":
            return None
        raise InvalidArgumentError(f"invalid predicate {self.text!r}: expected a literal, found {value!r}")

    def parse_cmp(self) -> Expr:
        kind, value = self.take()
        if kind == "bq":
            column = value[1:-1].replace("``", "`")
        elif kind == "word":
            column = value
        else:
            raise InvalidArgumentError(f"invalid predicate {self.text!r}: expected a column name, found {value!r}")
        if self.accept("kw", "IS"):
            negated = self.accept("kw", "NOT")
            self.take("kw", "NULL")
            return IsNull(column, negated)
        negated = self.accept("kw", "NOT")
        if self.accept("kw", "IN"):
            self.take("punct", "(")
            values = [self.literal()]
            while self.accept("punct", ","):
                values.append(self.literal())
            self.take("punct", ")")
            return In(column, tuple(values), negated)
        if negated:
            raise InvalidArgumentError(f"invalid predicate {self.text!r}: NOT must precede IN here")
        _, op = self.take("op")
        return Cmp(column, {"==": "=", "<>": "!="}.get(op, op), self.literal())


def parse_predicate(text: str) -> Expr:
    """Parse a partition predicate; raises InvalidArgumentError with the position of the problem."""
    if not text or not text.strip():
        raise InvalidArgumentError("invalid predicate: it is empty")
    return _Parser(text).parse()


def columns_of(expr: Expr) -> set[str]:
    if isinstance(expr, (Cmp, In, IsNull)):
        return {expr.column}
    if isinstance(expr, Not):
        return columns_of(expr.part)
    return set().union(*(columns_of(p) for p in expr.parts))


def check_partition_columns(expr: Expr, partition_columns: Sequence[str]) -> dict[str, str]:
    """Map the predicate's column names to partition columns (case-insensitively, as Spark).

    Raises InvalidArgumentError naming any column that is not a partition column.
    """
    lookup = {c.lower(): c for c in partition_columns}
    bad = sorted(c for c in columns_of(expr) if c.lower() not in lookup)
    if bad:
        raise InvalidArgumentError(
            f"predicate may only use partition columns ({', '.join(partition_columns) or 'the table has none'});"
            f" not a partition column: {', '.join(bad)}")
    return {c: lookup[c.lower()] for c in columns_of(expr)}


def _compare(left: Any, op: str, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    try:
        if op == "=":
            return left == right
        if op == "!=":
            return left != right
        if op == "<":
            return left < right
        if op == "<=":
            return left <= right
        if op == ">":
            return left > right
        return left >= right
    except TypeError:
        raise InvalidArgumentError(f"cannot compare {left!r} with {right!r}") from None


def evaluate(expr: Expr, row: Mapping[str, Any], coerce: Callable[[str, Any], Any] = lambda c, v: v) -> bool | None:
    """Three-valued evaluation over one partition's (typed) values; ``coerce(column, literal)``
    converts a literal to the column's type."""
    if isinstance(expr, Cmp):
        return _compare(row.get(expr.column), expr.op, coerce(expr.column, expr.value))
    if isinstance(expr, IsNull):
        return (row.get(expr.column) is not None) if expr.negated else (row.get(expr.column) is None)
    if isinstance(expr, In):
        value = row.get(expr.column)
        if value is None:
            return None
        hit = any(value == coerce(expr.column, v) for v in expr.values if v is not None)
        if not hit and any(v is None for v in expr.values):
            return None
        return (not hit) if expr.negated else hit
    if isinstance(expr, Not):
        inner = evaluate(expr.part, row, coerce)
        return None if inner is None else not inner
    results = [evaluate(p, row, coerce) for p in expr.parts]
    if expr.op == "AND":
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False
