"""The output tables follow the row schema file: a column added to it is added to ``row_changes``
and ``current_rows`` on the next run from the same checkpoint (old rows read null in it); a column
dropped from it or a type changed is refused (exit 2, one line) before any table is touched."""

from __future__ import annotations

import json
import os

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import CURRENT_ROWS_FIELDS, ROW_CHANGES_FIELDS, column_names
from reconstructor.spark.compaction import Compactor, compact_live_tables

# The CLI in this process, over the suite's SparkSession: the process boundary is not their subject.
from tests.support.cli import cli_in_process as cli
from tests.support.cli import refusal_line
from tests.support.kafka import create_topics, send
from tests.support.pipeline import current_tables, read_table, table_versions

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("spark")]

V1 = [("temperature", "double"), ("status", "string")]
# humidity between two existing columns, reading_count last.
V2 = [("temperature", "double"), ("humidity", "double"), ("status", "string"), ("reading_count", "long")]


def _write_schema(path, columns) -> RowSchema:
    data = {"name": "evolving_sensor", "columns": [{"name": n, "type": t} for n, t in columns]}
    path.write_text(json.dumps(data))
    return RowSchema.load(path)


def _row(rid, **values) -> dict:
    return {"id": rid, "values": values}


@pytest.mark.parametrize("engine", ["python", "jvm"])
def test_a_new_column_evolves_the_tables_and_a_lossy_change_is_refused(stack, spark, run_id, tmp_path, engine):
    """Under either engine: each keeps the session tables in its state in the schema they were
    written in, and reads them in the new one."""
    bootstrap, topic = stack.bootstrap_servers(), f"evolve{run_id}{engine}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    schema_file = tmp_path / "sensor.json"
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def run():
        return cli("run", "--bootstrap-servers", bootstrap, "--topic-pattern", topic, "--output", out,
                   "--checkpoint", chk, "--row-schema", str(schema_file), "--compact-every", "off",
                   "--engine", engine)

    _write_schema(schema_file, V1)
    send(bootstrap, topic, "s-1", [
        {"seq": 1, "type": "snapshot", "rows": [_row("a", temperature=1.5, status="ok"),
                                                _row("b", temperature=2.5, status="ok")]},
        {"seq": 2, "type": "update", "rows": [_row("a", temperature=1.6, status="warm")]},
    ])
    first = run()
    assert first.returncode == 0, first.stderr[-3000:]

    # The operator adds two columns to the file; the next messages carry them.
    v2 = _write_schema(schema_file, V2)
    send(bootstrap, topic, "s-1", [
        {"seq": 3, "type": "update", "rows": [_row("b", temperature=2.6, humidity=40.0, status="ok",
                                                   reading_count=7)]}])
    send(bootstrap, topic, "s-2", [
        {"seq": 1, "type": "snapshot", "rows": [_row("c", temperature=3.0, humidity=50.5, status="new",
                                                     reading_count=1)]}])
    second = run()  # same checkpoint and output: the stateful step's output gained two columns
    assert second.returncode == 0, second.stderr[-3000:]

    changes = read_table(spark, out, "row_changes")
    assert changes.columns == column_names(ROW_CHANGES_FIELDS, v2)  # where the DDL puts them
    assert read_table(spark, out, "current_rows").columns == column_names(CURRENT_ROWS_FIELDS, v2)
    logged = {(r.session, r.seq, r.row_id): (r.temperature, r.humidity, r.status, r.reading_count)
              for r in changes.collect()}
    assert logged == {
        ("s-1", 1, "a"): (1.5, None, "ok", None), ("s-1", 1, "b"): (2.5, None, "ok", None),
        ("s-1", 2, "a"): (1.6, None, "warm", None),
        ("s-1", 3, "b"): (2.6, 40.0, "ok", 7), ("s-2", 1, "c"): (3.0, 50.5, "new", 1),
    }
    expected = {
        (topic, "s-1"): {"a": {"temperature": 1.6, "humidity": None, "status": "warm", "reading_count": None},
                         "b": {"temperature": 2.6, "humidity": 40.0, "status": "ok", "reading_count": 7}},
        (topic, "s-2"): {"c": {"temperature": 3.0, "humidity": 50.5, "status": "new", "reading_count": 1}},
    }
    assert current_tables(spark, out, v2.names) == expected

    # The state the checkpoint holds (written under the old schema for row a) reads in the new one.
    shown = cli("state", "--checkpoint", chk, "--row-schema", str(schema_file), "--topic", topic,
                "--session", "s-1", "--format", "json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    rows = {r["row_id"]: r for r in json.loads(shown.stdout)["rows"]}
    assert rows["a"]["humidity"] is None and rows["a"]["status"] == "warm"
    assert rows["b"]["humidity"] == 40.0 and rows["b"]["reading_count"] == 7

    # Compaction rewrites files of both schemas into one and the tables read the same.
    compactor = Compactor(spark, out, grace_s=0, min_files=1)
    for hour in {r.hour for r in changes.select("hour").distinct().collect()}:
        compactor.optimize_hour(hour)
    compact_live_tables(spark, out, min_files=0)
    assert {(r.session, r.seq, r.row_id): (r.temperature, r.humidity, r.status, r.reading_count)
            for r in read_table(spark, out, "row_changes").collect()} == logged
    assert current_tables(spark, out, v2.names) == expected
    compacted = cli("compact", "--output", out)
    assert compacted.returncode == 0, compacted.stderr[-3000:]

    # A change that would lose data is refused before anything is read or written.
    send(bootstrap, topic, "s-2", [
        {"seq": 2, "type": "update", "rows": [_row("c", temperature=3.1, humidity=51.0, status="new",
                                                     reading_count=2)]}])
    before, commits = table_versions(spark, out), sorted(os.listdir(os.path.join(chk, "commits")))

    _write_schema(schema_file, [c for c in V2 if c[0] != "status"])
    line = refusal_line(run())
    assert "'status'" in line and ("row_changes" in line or "current_rows" in line), line

    _write_schema(schema_file, [("reading_count", "double") if c[0] == "reading_count" else c for c in V2])
    line = refusal_line(run())
    assert "'reading_count'" in line and "bigint" in line and "double" in line, line
    assert "row_changes" in line or "current_rows" in line, line

    assert table_versions(spark, out) == before
    assert sorted(os.listdir(os.path.join(chk, "commits"))) == commits
    assert current_tables(spark, out, v2.names) == expected
