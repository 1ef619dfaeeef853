"""The reconstructor through the real broker, Spark's Kafka source, the stateful step and Delta."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import ROW_CHANGES, STATS_COLUMNS, table_path
from reconstructor.errors import IntegrityViolationError
from reconstructor.spark.catalog import path_ref
from reconstructor.testing import TestDriver
from tests.support.pipeline import (
    change_count,
    current_tables,
    expected_all,
    expected_open,
    kafka_records,
    offsets_of,
    produce,
    read_table,
    replayed_tables,
    run,
)
from workbench.fleet import FleetSpec, expected_tables, inject, plan_fleet

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names
PARTITIONS = 3


@pytest.fixture(scope="module")
def small_frames(spark):
    """Arrow batches of 500 rows: one session's values reach the function in several frames."""
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    yield
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)


def test_thousands_of_messages_per_session_in_one_batch_rebuild_every_table_exactly(
        spark, small_frames, run_id, tmp_path):
    spec = FleetSpec(topic_prefix=f"it{run_id}-sensor-", sensors=2, sessions_per_sensor=3,
                     rows=120, updates=1500, rows_per_update=2, resync_every=700, seed=11)
    messages = list(plan_fleet(spec))
    # End half of the sessions; the others stay open and live in current_rows.
    closing = {p.session for p in messages if p.session.endswith(("-0", "-2"))}
    messages = [p for p in messages if p.message["type"] != "end" or p.session in closing]
    produce(spec, messages, PARTITIONS)
    assert len({part for part, _ in offsets_of(messages, PARTITIONS)}) > 1, "use several partitions"

    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    run(spark, f"it{run_id}-sensor-[0-9]+", out, chk)

    assert current_tables(spark, out, NAMES) == expected_open(messages, NAMES)
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)
    sessions = {(r.topic, r.session): r for r in read_table(spark, out, "sessions").collect()}
    assert len(sessions) == 6
    for (_topic, session), row in sessions.items():
        assert row.status == ("ended" if session in closing else "open")
        assert row.first_seq == 0 and row.last_seq == (1501 if session in closing else 1500)
        assert row.snapshot_seq == 1401  # the last resync: update slot 1400, after the first snapshot
    assert read_table(spark, out, "row_changes").count() == change_count(messages)
    # The first batch into tables with no row appended what MERGEs would have inserted: the rows of
    # the sessions that closed in it are not among them (the tables above hold the contract's).
    assert _writes(spark, out, "current_rows") == _writes(spark, out, "sessions") == ["WRITE"]
    # Each file of the live tables and the log holds statistics on the contract's columns, no others.
    for name, columns in STATS_COLUMNS.items():
        fields = [f.name for f in DeltaTable(f"{out}/{name}").get_add_actions(flatten=True).schema]
        assert {f.removeprefix("min.") for f in fields if f.startswith("min.")} == set(columns), (name, fields)


def test_an_injected_gap_fails_the_query_naming_the_record_and_writes_nothing(spark, run_id, tmp_path):
    """A gap in every session, all in one micro-batch: the run stops on the first in Kafka order
    (topic, partition, offset), and so does the test kit, whichever session it judges first."""
    spec = FleetSpec(topic_prefix=f"gap{run_id}-sensor-", sensors=2, sessions_per_sensor=2,
                     rows=30, updates=300, seed=5)
    messages = list(plan_fleet(spec))
    culprits = []
    for session in sorted({p.session for p in messages}, reverse=True):
        messages, culprit = inject(messages, "gap", session=session)
        culprits.append(culprit)
    produce(spec, messages, PARTITIONS)
    placed = dict(zip(map(id, messages), offsets_of(messages, PARTITIONS)))
    culprit = min(culprits, key=lambda c: (c.topic, *placed[id(c)]))
    partition, offset = placed[id(culprit)]

    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    with pytest.raises(IntegrityViolationError) as err:
        run(spark, f"gap{run_id}-sensor-[0-9]+", out, chk)

    seq = culprit.message["seq"]
    assert str(err.value) .startswith(
        f"INTEGRITY VIOLATION GAP topic={culprit.topic} partition={partition} offset={offset} "
        f"session={culprit.session} expected_seq={seq - 1} found_seq={seq}")
    # The whole micro-batch was refused: no table holds anything of it.
    for table in ("row_changes", "current_rows", "sessions"):
        assert read_table(spark, out, table).count() == 0
    # The test kit's driver stops on the same record with the same line, and writes nothing either.
    driver = TestDriver()
    verdict = driver.pipe(kafka_records(spark, f"gap{run_id}-sensor-[0-9]+"))
    assert verdict.violation == err.value.violation and verdict.line == f"reconstructor: {err.value}"
    assert all(table.num_rows == 0 for table in driver.tables.values())


def test_a_restart_from_the_checkpoint_continues_the_sequence(spark, stack, run_id):
    spec = FleetSpec(topic_prefix=f"rs{run_id}-sensor-", sensors=2, sessions_per_sensor=2,
                     rows=40, updates=400, seed=9, end_sessions=False)
    messages = list(plan_fleet(spec))
    half = len(messages) // 2
    root = f"s3a://{stack.S3_BUCKET}/it/{run_id}"
    out, chk = f"{root}/out", f"{root}/chk"
    pattern = f"rs{run_id}-sensor-[0-9]+"

    produce(spec, messages[:half], PARTITIONS)
    run(spark, pattern, out, chk)
    assert current_tables(spark, out, NAMES) == expected_open(messages[:half], NAMES)

    produce(spec, messages[half:], PARTITIONS, create=False)
    run(spark, pattern, out, chk)  # same checkpoint: the state carries last seq and table
    assert current_tables(spark, out, NAMES) == expected_open(messages, NAMES)
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)
    assert read_table(spark, out, "row_changes").count() == change_count(messages)
    # The first run's batch appended into the empty live tables; the restart's MERGEd into them.
    assert _writes(spark, out, "current_rows") == _writes(spark, out, "sessions") == ["WRITE", "MERGE"]


def _writes(spark, out: str, name: str) -> list[str]:
    """The operations of the batches' commits to a table, oldest first (its creation and
    property changes aside)."""
    history = spark.sql(f"DESCRIBE HISTORY {path_ref(table_path(out, name))}").orderBy("version").collect()
    return [h.operation for h in history if h.operation not in ("CREATE TABLE", "SET TBLPROPERTIES")]




def test_a_silent_session_times_out_and_leaves_current_rows(spark, run_id, tmp_path):
    import time

    spec = FleetSpec(topic_prefix=f"to{run_id}-sensor-", sensors=1, sessions_per_sensor=2, rows=10,
                     updates=20, seed=2, end_sessions=False)
    messages = list(plan_fleet(spec))
    produce(spec, messages, 1)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    pattern = f"to{run_id}-sensor-[0-9]+"
    # The timeout counts from the data batch's start. An available-now run has no no-data batch
    # after it, so the timeout need only outlast that one batch on a slow machine.
    run(spark, pattern, out, chk, session_timeout="15 seconds")
    assert {r.status for r in read_table(spark, out, "sessions").collect()} == {"open"}
    assert read_table(spark, out, "current_rows").count() == sum(
        len(t) for t in expected_tables(messages).values())

    time.sleep(16)  # processing time passes with no message from these two sessions
    late = FleetSpec(topic_prefix=spec.topic_prefix, sensors=1, sessions_per_sensor=3, rows=3,
                     updates=0, seed=3, end_sessions=False)
    newcomer = [p for p in plan_fleet(late) if p.session.endswith("-2")]
    produce(late, newcomer, 1, create=False)  # another session's data: its batch fires the timeouts
    run(spark, pattern, out, chk, session_timeout="15 seconds")
    sessions = {r.session: r for r in read_table(spark, out, "sessions").collect()}
    assert {s: r.status for s, r in sessions.items()} == {
        f"{spec.topic_prefix}0-session-0": "timed_out", f"{spec.topic_prefix}0-session-1": "timed_out",
        f"{spec.topic_prefix}0-session-2": "open"}
    assert sessions[f"{spec.topic_prefix}0-session-0"].last_seq == 20
    live = read_table(spark, out, "current_rows").collect()
    assert {r.session for r in live} == {f"{spec.topic_prefix}0-session-2"} and len(live) == 3


def test_a_warm_batch_compiles_no_generated_code_again(spark, run_id, tmp_path):
    """A batch's plans (the step, its cache, the stats pass, the append, two MERGEs) generate about
    140 classes: Spark's code cache must hold them all, or each batch evicts what the next needs
    and compiles it again (a third of a live-fleet batch's time)."""
    spec = FleetSpec(topic_prefix=f"cg{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=10,
                     updates=20, rows_per_update=2, seed=5)
    messages = list(plan_fleet(spec))
    produce(spec, messages, PARTITIONS)
    pattern = f"cg{run_id}-sensor-[0-9]+"
    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    run(spark, pattern, str(tmp_path / "warm" / "out"), str(tmp_path / "warm" / "chk"), max_offsets_per_trigger=40)
    before = compilations.getCount()
    out = str(tmp_path / "out")
    run(spark, pattern, out, str(tmp_path / "chk"), max_offsets_per_trigger=40)
    # Each batch appends once; the table's creation and its writer's property are commits too.
    history = spark.sql(f"DESCRIBE HISTORY {path_ref(table_path(out, ROW_CHANGES))}").collect()
    batches = sum(r.operation == "WRITE" for r in history)
    assert batches >= 3, batches
    # What a batch may compile anew: the sessions MERGE's projections, which hold the batch's time.
    assert compilations.getCount() - before <= 5 * batches, (compilations.getCount() - before, batches)
