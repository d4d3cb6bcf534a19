"""The field table's vocabulary for Thrift's compact protocol (``compact.py``): field kinds, wire
types, and structs as fields by id."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BINARY", "BOOL", "BYTE", "DOUBLE", "I16", "I32", "I64", "LIST", "STRING", "Field", "ListOf",
           "StructSpec", "wire_of"]

#: wire types of the compact protocol
WIRE_TRUE, WIRE_FALSE, WIRE_BYTE, WIRE_I16, WIRE_I32, WIRE_I64, WIRE_DOUBLE, WIRE_BINARY, WIRE_LIST = range(1, 10)
WIRE_STRUCT = 12

#: field kinds of the table: the wire type, except strings (binary read as UTF-8) and bools
BOOL, BYTE, I16, I32, I64, DOUBLE, BINARY, STRING, LIST = "bool", "i8", "i16", "i32", "i64", "double", "binary", \
    "string", "list"
_WIRE = {BOOL: WIRE_TRUE, BYTE: WIRE_BYTE, I16: WIRE_I16, I32: WIRE_I32, I64: WIRE_I64, DOUBLE: WIRE_DOUBLE,
         BINARY: WIRE_BINARY, STRING: WIRE_BINARY}


@dataclass(frozen=True)
class ListOf:
    """A list field's elements: a kind, or a struct."""

    element: "str | StructSpec"


@dataclass
class Field:
    """One field of a struct: its name and kind (a kind name, a struct, or a list)."""

    name: str
    kind: "str | StructSpec | ListOf"
    #: kept encoded until read: for fields most footer work never reads (statistics, histograms)
    lazy: bool = False
    wire: int = 0
    element_wire: int = 0

    def __post_init__(self) -> None:
        self.wire = wire_of(self.kind)
        if isinstance(self.kind, ListOf):
            self.element_wire = wire_of(self.kind.element)


def wire_of(kind: "str | StructSpec | ListOf") -> int:
    """The wire type a field of ``kind`` is sent as."""
    if isinstance(kind, StructSpec):
        return WIRE_STRUCT
    if isinstance(kind, ListOf):
        return WIRE_LIST
    return _WIRE[kind]


@dataclass
class StructSpec:
    """A struct (or union) of the field table: its fields by id."""

    name: str
    fields: dict[int, Field] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ids = {f.name: fid for fid, f in self.fields.items()}
