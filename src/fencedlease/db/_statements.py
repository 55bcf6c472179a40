"""SQL text for [`fencedlease.db`][]: checked and quoted names, placeholders in the connection's
paramstyle, and the ``WHERE`` pieces every fenced statement shares."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from fencedlease._core.errors import ValidationError

# Every name put into SQL text passes quote_table or quote_column first (hence the S608 noqas);
# every value is bound.
_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_COLUMN_RE: Final = re.compile(rf"\A{_NAME}\Z")
_TABLE_RE: Final = re.compile(rf"\A{_NAME}(?:\.{_NAME})?\Z")


# --- names ------------------------------------------------------------------------------------


def quote_table(name: object, argument: str) -> str:
    if not isinstance(name, str) or not _TABLE_RE.match(name):
        raise ValidationError(
            argument,
            f"{argument} must match {_NAME} (optionally schema.table), got {name!r}",
        )
    return ".".join(f'"{part}"' for part in name.split("."))


def quote_column(name: object, argument: str) -> str:
    if not isinstance(name, str) or not _COLUMN_RE.match(name):
        raise ValidationError(argument, f"{argument} column names must match {_NAME}, got {name!r}")
    return f'"{name}"'


def columns_of(mapping: object, argument: str, *, allow_empty: bool = False) -> Mapping[str, Any]:
    if not isinstance(mapping, Mapping):
        raise ValidationError(argument, f"{argument} must be a mapping of column name to value")
    if not mapping and not allow_empty:
        raise ValidationError(argument, f"{argument} must name at least one column")
    for column in mapping:
        quote_column(column, argument)
    return mapping


# --- statements -------------------------------------------------------------------------------


@attrs.define
class Statement:
    """SQL text with placeholders in the connection's style, and the values bound to them."""

    style: str
    parts: list[str] = attrs.field(factory=list)
    positional: list[Any] = attrs.field(factory=list)
    named: dict[str, Any] = attrs.field(factory=dict)

    def sql(self, text: str) -> Statement:
        self.parts.append(text)
        return self

    def bind(self, value: Any) -> Statement:
        index = len(self.positional) + len(self.named)
        if self.style == "qmark":
            self.positional.append(value)
            self.parts.append("?")
        elif self.style == "format":
            self.positional.append(value)
            self.parts.append("%s")
        elif self.style == "numeric":
            self.positional.append(value)
            self.parts.append(f":{index + 1}")
        elif self.style == "pyformat":
            self.named[f"p{index}"] = value
            self.parts.append(f"%(p{index})s")
        else:  # "named", and SQLAlchemy's text()
            self.named[f"p{index}"] = value
            self.parts.append(f":p{index}")
        return self

    def text(self) -> str:
        return "".join(self.parts)

    def params(self) -> Sequence[Any] | Mapping[str, Any]:
        return self.named if self.style in ("pyformat", "named", "sqlalchemy") else self.positional


def where_clause(stmt: Statement, where: Mapping[str, Any]) -> None:
    for i, (column, value) in enumerate(where.items()):
        if i:
            stmt.sql(" AND ")
        if value is None:
            stmt.sql(f"{quote_column(column, 'where')} IS NULL")
        else:
            stmt.sql(f"{quote_column(column, 'where')} = ").bind(value)


def token_condition(stmt: Statement, token_col: str, token: int, strict: bool) -> None:
    """``(col IS NULL OR CAST(col AS BIGINT) <= t)``: numeric whatever the column's declared type
    (``CAST(... AS BIGINT)`` is standard SQL, and in SQLite gives INTEGER affinity)."""
    stmt.sql(f"({token_col} IS NULL OR CAST({token_col} AS BIGINT) {'<' if strict else '<='} ")
    stmt.bind(token).sql(")")


def key_condition(
    stmt: Statement, key_col: str, lease_key: str, legacy_key: str | None = None
) -> None:
    stmt.sql(f"({key_col} IS NULL OR {key_col} = ").bind(lease_key)
    if legacy_key is not None:  # a bare key recorded by the earlier shape (_fencing)
        stmt.sql(f" OR {key_col} = ").bind(legacy_key)
    stmt.sql(")")
