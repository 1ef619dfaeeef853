"""An existing output table against the columns the row schema wants: what to add, or why not.

Delta keeps a table's schema as it was created (``createIfNotExists`` leaves an existing table
alone), so a column added to the row schema file has to be added to the table as well.  Adding a
nullable column loses nothing: the rows written before read null in it.  A column the table holds
and the file no longer lists, or one whose type changed, would lose or reinterpret data already
written, so it is refused, naming the column and the table.  Every type change is refused: among
the row schema's types none widens to another without loss (a ``long`` above 2^53 is not a
``double``) in a way Delta supports on an existing table without rewriting it.

No Spark here: columns are (name, Spark SQL type, nullable) as Delta reports them.

``spark.evolution`` applies the decision to the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import ROW_VALUES

_NOT_NULL = " NOT NULL"


@dataclass(frozen=True)
class TableColumn:
    """One column of a table: its name, its Spark SQL type as ``simpleString`` spells it
    (``bigint``, ``double``, ...) and whether it may hold null."""

    name: str
    type: str
    nullable: bool = True

    @classmethod
    def from_ddl(cls, name: str, ddl: str) -> TableColumn:
        """A column from the output's field text (``"BIGINT NOT NULL"``)."""
        nullable = not ddl.upper().endswith(_NOT_NULL)
        type_ = ddl[:len(ddl) - len(_NOT_NULL)] if not nullable else ddl
        return cls(name, type_.strip().lower(), nullable)

    @property
    def ddl(self) -> str:
        return f"`{self.name}` {self.type.upper()}" + ("" if self.nullable else _NOT_NULL)


def wanted_columns(fields: Any, schema: RowSchema) -> tuple[TableColumn, ...]:
    """The columns of an output field list (``reconstructor.contract.tables``), the row schema's in place of
    ``ROW_VALUES``."""
    out: list[TableColumn] = []
    for field in fields:
        if field is ROW_VALUES:
            out += [TableColumn.from_ddl(c.name, c.spark_ddl) for c in schema.columns]
        else:
            out.append(TableColumn.from_ddl(*field))
    return tuple(out)


@dataclass(frozen=True)
class AddedColumn:
    """A column to add, and the column it goes after (where the table's DDL puts it)."""

    column: TableColumn
    after: str | None  # None: first

    @property
    def ddl(self) -> str:
        return self.column.ddl + (" FIRST" if self.after is None else f" AFTER `{self.after}`")


@dataclass(frozen=True)
class TableEvolution:
    """What an existing table needs to take the wanted columns: ``added``, or a ``refusal``."""

    table: str
    added: tuple[AddedColumn, ...] = ()
    refusal: str | None = None

    @property
    def needed(self) -> bool:
        return bool(self.added) and self.refusal is None

    def alter_sql(self, table_ref: str) -> str:
        """The one ``ALTER TABLE`` that adds every column, in a single Delta commit."""
        return f"ALTER TABLE {table_ref} ADD COLUMNS ({', '.join(a.ddl for a in self.added)})"


def plan_evolution(table: str, existing: Any, wanted: Any) -> TableEvolution:
    """Compare ``existing`` (the table's columns as Delta holds them) with ``wanted`` (in the
    order the DDL gives them).

    Names are matched ignoring case, as Delta does.  The order of columns the table already has
    does not matter: every write names its columns.
    """
    have = {c.name.lower(): c for c in existing}
    want = {c.name.lower() for c in wanted}
    for column in existing:
        if column.name.lower() not in want:
            return TableEvolution(table, refusal=(
                f"the row schema drops column {column.name!r}, which table {table} holds: dropping it "
                "would lose its data (keep it in the row schema file, or write to a new --output)"))
    added: list[AddedColumn] = []
    previous: str | None = None
    for column in wanted:
        old = have.get(column.name.lower())
        if old is None:
            if not column.nullable:
                return TableEvolution(table, refusal=(
                    f"table {table} has no column {column.name!r}, which is NOT NULL and cannot be "
                    "added to a table that holds rows (write to a new --output)"))
            added.append(AddedColumn(column, previous))
        elif old.name != column.name:
            return TableEvolution(table, refusal=(
                f"the row schema spells column {old.name!r} of table {table} as {column.name!r}: "
                "Delta names are not case sensitive, so this is no new column (keep the table's spelling)"))
        elif old.type != column.type:
            return TableEvolution(table, refusal=(
                f"the row schema changes column {column.name!r} of table {table} from {old.type} to "
                f"{column.type}: the rows written would not keep their values (add a column of the "
                "new type under a new name, or write to a new --output)"))
        previous = column.name
    return TableEvolution(table, tuple(added))
