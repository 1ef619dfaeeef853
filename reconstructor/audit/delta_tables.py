"""The output tables read with delta-rs (the ``deltalake`` package): no Spark, no JVM.

A reader independent of the engine that wrote the tables, that runs wherever they are readable.
``row_changes`` is read an ``hour`` partition at a time, so the change log is never whole in
memory; the other tables are read whole (they are the live tables' size).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from pyarrow.fs import FileType

from reconstructor.contract.fleet_history import SealedState, changes_data, sealed_state
from reconstructor.contract.tables import table_path
from reconstructor.contract.writer import FLEET_LOOKBACK, newest_first
from reconstructor.errors import ReconstructorError
from reconstructor.settings import S3Settings


def delta_uri(uri: str) -> str:
    """An output URI as delta-rs names it: ``s3a://`` (Hadoop's scheme) is ``s3://``."""
    return "s3://" + uri[len("s3a://"):] if uri.startswith("s3a://") else uri


def storage_options(s3: S3Settings, uri: str) -> dict[str, str]:
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

    def __init__(self, output: str, s3: S3Settings):
        self.output = output
        self._options = storage_options(s3, output)

    def table(self, name: str) -> DeltaTable:
        uri = delta_uri(table_path(self.output, name))
        try:
            return DeltaTable(uri, storage_options=self._options)
        except TableNotFoundError as exc:
            raise ReconstructorError(f"no Delta table {name} under {self.output}") from exc

    def read(self, name: str, where: str = "") -> pa.Table:
        """A table, or its rows that ``where`` (SQL) selects.

        Read by delta-rs's own engine (DataFusion), not by a pyarrow dataset over delta-rs's
        file system: pyarrow's reader threads outlive the file system at interpreter exit, and
        the process may abort after its work is done.
        """
        query = QueryBuilder().register("t", self.table(name))
        return plain_strings(pa.table(query.execute(f"SELECT * FROM t {where}")))

    def properties(self, name: str) -> dict[str, str]:
        """The table's properties (its metadata's configuration)."""
        return dict(self.table(name).metadata().configuration)

    def fleet_state(self, name: str) -> SealedState:
        """The fleet seal in force in the table's log (``contract.fleet_history``), and the newest
        commit after it that changed data without one."""
        table = self.table(name)
        store = DeltaStorageHandler(table.table_uri, self._options)

        def data_changed(version: int) -> bool | None:
            path = f"_delta_log/{version:020d}.json"
            if store.get_file_info([path])[0].type == FileType.NotFound:
                return None
            commit = store.open_input_file(path)
            try:
                return changes_data(commit.read().decode("utf-8", errors="replace"))
            finally:
                commit.close()

        commits = newest_first(table.history, FLEET_LOOKBACK)
        return sealed_state(((int(c["version"]), c.get("userMetadata")) for c in commits), data_changed)

    def columns(self, name: str) -> list[str]:
        return [f.name for f in self.table(name).schema().fields]

    def hours(self, name: str) -> Iterator[pa.Table]:
        """The table an ``hour`` partition at a time, in hour order."""
        for hour in sorted({p["hour"] for p in self.table(name).partitions()}):
            yield self.read(name, f"WHERE hour = {sql_text(hour)}")

    def session_rows(self, name: str, topic: str, session: str) -> pa.Table:
        """The rows of one session (file statistics skip the files that cannot hold it)."""
        return self.read(name, f"WHERE topic = {sql_text(topic)} AND session = {sql_text(session)}")


def plain_strings(table: pa.Table) -> pa.Table:
    """String views (DataFusion's) as plain strings, which every Arrow kernel takes."""
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f for f in table.schema])
    return table if schema == table.schema else table.cast(schema)


def sql_text(value: str) -> str:
    """A string as a SQL literal."""
    return "'" + value.replace("'", "''") + "'"
