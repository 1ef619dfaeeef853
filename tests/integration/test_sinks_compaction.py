"""Delta sinks: compaction of closed hours, and the tables as an independent Delta reader sees them."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.spark.compaction import Compactor
from tests.support.faulty_s3 import wait_for
from tests.support.kafka import create_topics
from tests.support.pipeline import expected_open, read_table, run
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet, publish
from workbench.producer import SensorProducer

pytestmark = pytest.mark.integration


def _rows(df, order):
    return [tuple(r) for r in df.orderBy(*order).collect()]


def test_compaction_bin_packs_closed_hours_and_delta_rs_reads_the_same_tables(spark, run_id, tmp_path):
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    spec = FleetSpec(topic_prefix=f"cp{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=20,
                     updates=160, rows_per_update=1, seed=4, end_sessions=False,
                     start=now - dt.timedelta(hours=3), step=dt.timedelta(seconds=45))  # 2 hours
    messages = list(plan_fleet(spec))
    create_topics(localstack.bootstrap_servers(), {t: 2 for t in spec.topics()})
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: 2 for t in spec.topics()},
            event_time_as_kafka_time=True)

    out = str(tmp_path / "out")
    run(spark, f"cp{run_id}-sensor-[0-9]+", out, str(tmp_path / "chk"), max_offsets_per_trigger=220)

    compactor = Compactor(spark, out, grace_s=0, retention_hours=0, min_files=1)
    before = compactor.files_per_hour()
    closed = compactor.closed_hours(now)
    assert len(closed) >= 2 and all(before[h] > 1 for h in closed), before
    order = ("topic", "session", "seq", "row_pos")
    content = _rows(read_table(spark, out, "row_changes"), order)

    report = compactor.run(now)

    after = compactor.files_per_hour()
    assert sorted(h.hour for h in report.hours) == closed
    for h in report.hours:
        # a few KB per hour: one file is what its size needs
        assert h.files_before == before[h.hour] and after[h.hour] == 1, (h, after)
    assert _rows(read_table(spark, out, "row_changes"), order) == content
    print("\n".join(report.lines()))

    # delta-rs, an independent Delta implementation, reads the same tables.
    from deltalake import DeltaTable as RsTable

    for name, key in (("row_changes", ["topic", "session", "seq", "row_pos"]),
                      ("current_rows", ["topic", "session", "row_id"]),
                      ("sessions", ["topic", "session"])):
        spark_df = read_table(spark, out, name).toPandas().sort_values(key).reset_index(drop=True)
        rs_df = RsTable(f"{out}/{name}").to_pandas().sort_values(key).reset_index(drop=True)
        rs_df = rs_df[list(spark_df.columns)]
        assert len(rs_df) == len(spark_df) > 0
        for col in spark_df.columns:
            a, b = spark_df[col], rs_df[col]
            if str(a.dtype).startswith("datetime") or str(b.dtype).startswith("datetime"):
                a = a.astype("datetime64[us]")
                b = b.dt.tz_localize(None) if getattr(b.dt, "tz", None) is not None else b
                b = b.astype("datetime64[us]")
            assert a.astype(object).where(a.notna(), None).tolist() == \
                b.astype(object).where(b.notna(), None).tolist(), (name, col)


def _interval(progress: dict) -> tuple[float, float]:
    """(start, end) epoch seconds of one micro-batch, from its progress report."""
    start = dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return start, start + progress["durationMs"].get("triggerExecution", 0) / 1000


def test_the_stream_keeps_committing_while_its_driver_compacts_closed_hours(spark, run_id, tmp_path):
    from reconstructor.spark import pipeline
    from tests.support.pipeline import caught_up, current_tables, expected_all, replayed_tables, stream_config
    NAMES = RowSchema.load().names

    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    spec = FleetSpec(topic_prefix=f"sc{run_id}-sensor-", sensors=2, sessions_per_sensor=1, rows=10,
                     updates=150, rows_per_update=1, seed=8, end_sessions=False,
                     start=now - dt.timedelta(hours=1), step=dt.timedelta(seconds=24))  # one closed hour
    messages = list(plan_fleet(spec))
    create_topics(localstack.bootstrap_servers(), {t: 1 for t in spec.topics()})
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: 1 for t in spec.topics()},
            event_time_as_kafka_time=True)
    out = str(tmp_path / "out")
    cfg = stream_config(f"sc{run_id}-sensor-[0-9]+", out, str(tmp_path / "chk"), trigger="1 second",
                        max_offsets_per_trigger=40, compact_every="2 seconds", compact_grace="0 seconds")
    running = pipeline.start(spark, cfg, vacuum_in_stream=False)
    query, compactor = running.query, running.compactor
    try:
        deadline = dt.datetime.now() + dt.timedelta(minutes=8)
        while dt.datetime.now() < deadline:
            done = caught_up(running.last_progress()) and compactor.runs >= 2
            if done or not query.isActive:
                break
            query.awaitTermination(1)
        assert query.isActive, query.exception()
        assert caught_up(running.last_progress()), "the stream did not catch up in 8 minutes"
        # Caught up, every batch that read records has committed, and a batch in flight now is a
        # no-data batch (the sessions' timeouts), which commits nothing: the stop cuts no commit
        # short.  (Waiting for a moment between triggers instead never ends once a no-data batch
        # takes longer than the 1-second trigger, as it does on a loaded machine.)
        batches = [_interval(p) for p in running.recent_progress()]
    finally:
        running.stop()
    compacted = list(compactor.windows)
    assert compactor.runs >= 2 and compactor.hours_compacted >= 1, (compactor.runs, compactor.hours_compacted)
    # Batches ran while a compaction was running: the stream did not wait for it.
    overlapping = [b for b in batches for c in compacted if b[0] < c[1] and c[0] < b[1]]
    assert overlapping, (compacted, batches)
    # Nothing lost or repeated by compacting under the stream.
    assert current_tables(spark, out, NAMES) == expected_open(messages, NAMES)
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)


def test_a_violation_after_good_batches_leaves_every_table_as_after_the_last_good_batch(
        spark, run_id, tmp_path):
    from reconstructor.errors import IntegrityViolationError
    from workbench.fleet import inject

    spec = FleetSpec(topic_prefix=f"vb{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=15,
                     updates=120, seed=21, end_sessions=False)
    messages = list(plan_fleet(spec))
    good, rest = messages[: len(messages) // 2], messages[len(messages) // 2:]
    create_topics(localstack.bootstrap_servers(), {t: 2 for t in spec.topics()})
    publish(SensorProducer(localstack.bootstrap_servers()), good, {t: 2 for t in spec.topics()})
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    pattern = f"vb{run_id}-sensor-[0-9]+"
    run(spark, pattern, out, chk)
    keys = {"row_changes": ("topic", "session", "seq", "row_pos"),
            "current_rows": ("topic", "session", "row_id"), "sessions": ("topic", "session")}
    before = {t: _rows(read_table(spark, out, t).drop("updated_at"), k) for t, k in keys.items()}
    versions = {t: spark.sql(f"DESCRIBE HISTORY delta.`{out}/{t}`").count() for t in keys}

    broken, _ = inject(rest, "duplicate")
    publish(SensorProducer(localstack.bootstrap_servers()), broken, {t: 2 for t in spec.topics()})
    with pytest.raises(IntegrityViolationError, match="INTEGRITY VIOLATION DUPLICATE"):
        run(spark, pattern, out, chk)

    for t, k in keys.items():
        assert _rows(read_table(spark, out, t).drop("updated_at"), k) == before[t], t
        assert spark.sql(f"DESCRIBE HISTORY delta.`{out}/{t}`").count() == versions[t], t


def _closed_hours_table(spark, out: str, hours: int = 4, appends: int = 3) -> list[str]:
    """A ``row_changes``-like table, partitioned by hour, with ``appends`` files in each of
    ``hours`` hours that ended at least an hour ago."""
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    names = [(now - dt.timedelta(hours=h)).strftime("%Y-%m-%d-%H") for h in range(hours + 1, 1, -1)]
    for i in range(appends):
        rows = [(name, i, n) for name in names for n in range(50)]
        (spark.createDataFrame(rows, "hour string, batch int, n int").coalesce(1)
         .write.format("delta").mode("append").partitionBy("hour").save(f"{out}/row_changes"))
    return names


def _operations(spark, path: str) -> list[str]:
    return [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]


def test_a_background_compactor_compacts_due_hours_at_its_start_and_stop_waits_for_that_run(spark, tmp_path):
    from reconstructor.spark.compaction import BackgroundCompactor

    out = str(tmp_path / "out")
    hours = _closed_hours_table(spark, out)
    compactor = Compactor(spark, out, grace_s=0, min_files=1)
    assert compactor.closed_hours() == hours
    # An hour between runs: a scheduled available-now run shorter than that must still compact.
    background = BackgroundCompactor(compactor, every_s=3600, vacuum=False).start()
    try:
        deadline = time.monotonic() + 180  # a guard against waiting forever, not a measurement
        while not (getattr(background, "running", False) or background.runs) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        background.stop()  # called while the run is (most likely) still optimizing its hours
    assert background.runs == 1, "no compaction ran after the compactor started"
    # stop() returned after the run it found in progress had committed all of its work.
    assert sorted(h.hour for h in background.last_report.hours) == hours
    assert _operations(spark, f"{out}/row_changes").count("OPTIMIZE") == len(hours)
    assert set(compactor.files_per_hour().values()) == {1}


def test_a_run_starts_no_compaction_before_it_is_due_and_does_the_work_once_it_is(spark, tmp_path):
    """The output keeps its last compaction's time: its first run starts the schedule (it records
    the mark and compacts nothing), a run an interval has not passed since starts none (its stop
    does not wait for one, and nothing is optimized or vacuumed), and a run once the interval has
    passed compacts and records its own."""
    import datetime as dt

    from reconstructor.spark.compaction import BackgroundCompactor
    from reconstructor.spark.compaction_mark import CompactionMark

    out = str(tmp_path / "out")
    hours = _closed_hours_table(spark, out)
    compactor = Compactor(spark, out, grace_s=0, min_files=1)
    mark = CompactionMark(spark, out)
    assert mark.last() is None
    history = {name: _operations(spark, f"{out}/{name}") for name in ("row_changes",)}
    first = BackgroundCompactor(compactor, every_s=3600, mark=mark).start()
    started = wait_for(mark.last, "the schedule's start")
    first.stop()
    assert first.runs == 0 and {name: _operations(spark, f"{out}/{name}") for name in history} == history
    recorded = started

    too_soon = BackgroundCompactor(compactor, every_s=3600, mark=mark).start()
    time.sleep(2)  # the time a due compaction takes to start (it starts at once)
    too_soon.stop()
    assert too_soon.runs == 0 and not too_soon.running
    assert {name: _operations(spark, f"{out}/{name}") for name in history} == history  # no OPTIMIZE, no VACUUM
    assert mark.last() == recorded

    mark.record(recorded - dt.timedelta(hours=2))  # an interval has passed
    due = BackgroundCompactor(compactor, every_s=3600, mark=mark).start()
    _await_runs(due, 1)
    due.stop()
    assert due.runs == 1 and mark.last() > recorded - dt.timedelta(hours=2)
    assert sorted(h.hour for h in due.last_report.hours) == hours
    assert _operations(spark, f"{out}/row_changes")[0] == "VACUUM END"  # the newest: it did the work


def _await_runs(background, runs: int) -> None:
    deadline = time.monotonic() + 180  # a guard against waiting forever, not a measurement
    while background.runs < runs:
        assert time.monotonic() < deadline, "no compaction ran"
        time.sleep(0.05)


def test_a_short_vacuum_retention_leaves_the_streams_session_checking_retention(spark, tmp_path):
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = spark.conf.get(key, None)
    out = str(tmp_path / "out")
    _closed_hours_table(spark, out, hours=2)
    compactor = Compactor(spark, out, grace_s=0, retention_hours=0, min_files=1)
    compactor.run(vacuum=False)
    parquet = lambda: {p.name for p in (tmp_path / "out" / "row_changes").rglob("*.parquet")}  # noqa: E731 - a one-line helper beside its uses
    files_before = parquet()

    assert compactor.vacuum(names=("row_changes",)) == ["row_changes"]

    # The VACUUM ran with no retention (the files OPTIMIZE replaced are gone) ...
    assert len(parquet()) == 2 and parquet() < files_before
    # ... and the session the stream writes with still refuses one.
    assert spark.conf.get(key, None) == before and before != "false"


def test_a_vacuum_lists_a_small_table_with_a_few_tasks_not_thousands(spark, tmp_path):
    # Delta's VACUUM lists the table's files with Spark's partition-discovery parallelism
    # (10,000 tasks by default): in a streaming driver that is minutes of tiny tasks competing
    # with the batches for the same cores, for a table of a few files.
    out = str(tmp_path / "out")
    _closed_hours_table(spark, out, hours=2)
    compactor = Compactor(spark, out, grace_s=0, min_files=1)
    tracker = spark.sparkContext.statusTracker()
    group = f"vacuum-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, "vacuum under test")
    try:
        assert compactor.vacuum(names=("row_changes",)) == ["row_changes"]
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    stages = [s for job in tracker.getJobIdsForGroup(group)
              for s in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])]
    tasks = [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s) is not None]
    assert tasks, "the VACUUM ran no Spark job"
    # Each of its many small jobs in a few tasks per core (4 shuffle partitions here).
    assert max(tasks) <= 4 * spark.sparkContext.defaultParallelism, f"{sum(tasks)} tasks in {len(tasks)} stages"


def test_a_compactor_that_lost_the_writer_lease_optimizes_and_vacuums_nothing(spark, tmp_path):
    """OPTIMIZE commits and VACUUM deletes only right after the lease is found this driver's: once
    another driver holds the output, the compactor stops before touching a table."""
    from reconstructor.errors import LeaseLost

    out = str(tmp_path / "out")
    _closed_hours_table(spark, out)
    before = _operations(spark, f"{out}/row_changes")
    checks = []

    def lost():
        checks.append(1)
        raise LeaseLost("this driver lost its lease on the output (taken by another)")

    with pytest.raises(LeaseLost):
        Compactor(spark, out, grace_s=0, min_files=1, lease_check=lost).run()
    assert checks == [1]
    assert _operations(spark, f"{out}/row_changes") == before
    with pytest.raises(LeaseLost):
        Compactor(spark, out, grace_s=0, min_files=1, lease_check=lost).vacuum()
    assert _operations(spark, f"{out}/row_changes") == before
