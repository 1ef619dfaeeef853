"""The output tables read with delta-rs (the ``deltalake`` package): no Spark, no JVM.

A reader independent of the engine that wrote the tables, that runs wherever they are readable.
``row_changes`` is read an ``hour`` partition at a time, so the change log is never whole in
memory; the other tables are read whole (they are the live tables' size).
"""

from __future__ import annotations

from typing import Iterator
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from reconstructor.config import S3Config
from reconstructor.errors import ReconstructorError
from reconstructor.output import table_path


def delta_uri(uri: str) -> str:
    """An output URI as delta-rs names it: ``s3a://`` (Hadoop's scheme) is ``s3://``."""
    return "s3://" + uri[len("s3a://"):] if uri.startswith("s3a://") else uri


def storage_options(s3: S3Config, uri: str) -> dict[str, str]:
    """The project's ``[s3]`` settings as delta-rs storage options (none for a local path)."""
    if urlsplit(delta_uri(uri)).scheme != "s3":
        return {}
    options = {"AWS_REGION": s3.region or "us-east-1"}
    if s3.endpoint:
        endpoint = s3.endpoint if "://" in s3.endpoint else f"https://{s3.endpoint}"
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if s3.access_key:
        options["AWS_ACCESS_KEY_ID"] = s3.access_key
    if s3.secret_key:
        options["AWS_SECRET_ACCESS_KEY"] = s3.secret_key
    options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if s3.path_style else "true"
    return options


class OutputTables:
    """The tables under one output root."""

    def __init__(self, output: str, s3: S3Config):
        self.output = output
        self._options = storage_options(s3, output)

    def table(self, name: str) -> DeltaTable:
        uri = delta_uri(table_path(self.output, name))
        try:
            return DeltaTable(uri, storage_options=self._options)
        except TableNotFoundError as exc:
            raise ReconstructorError(f"no Delta table {name} under {self.output}") from exc

    def read(self, name: str) -> pa.Table:
        """A whole table (the small ones: sessions, violations, current_rows)."""
        return self.table(name).to_pyarrow_table()

    def columns(self, name: str) -> list[str]:
        return list(self.table(name).to_pyarrow_dataset().schema.names)

    def hours(self, name: str) -> Iterator[pa.Table]:
        """The table an ``hour`` partition at a time, in hour order."""
        table = self.table(name)
        hours = sorted({p["hour"] for p in table.partitions()})
        dataset = table.to_pyarrow_dataset()
        for hour in hours:
            yield dataset.to_table(filter=ds.field("hour") == hour)

    def session_rows(self, name: str, topic: str, session: str) -> pa.Table:
        """The rows of one session (parquet statistics skip the files that cannot hold it)."""
        dataset = self.table(name).to_pyarrow_dataset()
        return dataset.to_table(filter=(ds.field("topic") == topic) & (ds.field("session") == session))
