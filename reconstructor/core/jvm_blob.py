"""The JVM engine's session table blob (``RJT1``), read back for the ``state`` command.

The JVM engine (``jvm/``, ``SessionTable``) keeps a session's table in Spark's state store as
this blob, not as the Python engine's Arrow stream: a header naming its chain head and its columns
(name and type), then each row's id and values, big-endian as Java's ``DataOutputStream`` writes
them (a string as its UTF-8 length and bytes, -1 for none; a value as a null flag, then a double,
a boolean, or a long: a long column's value or a time's epoch microseconds).
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa

from reconstructor.contract.row_schema import RowSchema

MAGIC = b"RJT1"
_TYPES = {ord("s"): "string", ord("d"): "double", ord("l"): "long", ord("b"): "boolean", ord("t"): "timestamp"}


def is_jvm_blob(blob: bytes | None) -> bool:
    return blob is not None and bytes(blob[:4]) == MAGIC


class _Reader:
    def __init__(self, blob: bytes):
        self.data, self.at = memoryview(blob), 4

    def _take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def name(self) -> str:
        """A column name or a row id: a string that is never null."""
        text = self.string()
        if text is None:
            raise ValueError("a JVM blob holds a null column name or row id")
        return text

    def string(self) -> str | None:
        n = self._take(">i")
        if n < 0:
            return None
        text = bytes(self.data[self.at:self.at + n]).decode("utf-8")
        self.at += n
        return text

    def value(self, kind: str) -> Any:
        if not self._take(">b"):
            return None
        if kind == "string":
            return self.string()
        if kind == "double":
            return self._take(">d")
        if kind == "boolean":
            return bool(self._take(">b"))
        return self._take(">q")


def chain_head(blob: bytes | None) -> str | None:
    """The chain head a JVM blob carries (None: none)."""
    return None if blob is None else _Reader(bytes(blob)).string()


def read_table(blob: bytes, schema: RowSchema) -> pa.Table:
    """A JVM blob's table as Arrow in ``schema`` (``row_id`` first), as ``core.blob.read_table``
    gives the Python engine's: a column the blob lacks is null, one ``schema`` lacks is dropped."""
    r = _Reader(bytes(blob))
    r.string()  # the chain head
    stored = [(r.name(), _TYPES[r._take(">b")]) for _ in range(r._take(">i"))]
    ids: list[str] = []
    columns: dict[str, list[object]] = {name: [] for name, _ in stored}
    for _ in range(r._take(">i")):
        ids.append(r.name())
        for name, kind in stored:
            columns[name].append(r.value(kind))
    target = schema.arrow_schema()
    arrays = [pa.array(ids, pa.string())]
    for field in list(target)[1:]:
        values = columns.get(field.name, [None] * len(ids))
        if pa.types.is_timestamp(field.type):
            arrays.append(pa.array(values, pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=target)
