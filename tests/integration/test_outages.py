"""A continuous ``run`` rides through short outages of its broker and its S3 endpoint, on a stack of
its own (the shared one is never killed or frozen): the tables stay exact.  It gives up (exit 1)
once its restarts are spent, and never restarts after an integrity violation (exit 3) or once its
driver JVM is gone (exit 1, one line)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.spark.builder import build_spark
from tests.support.cli import stop_run
from tests.support.kafka import create_topics, send, snapshot, update
from tests.support.model import Model, Msg
from tests.support.pipeline import assert_exact, current_tables, normalise, offsets_of, read_table
from tests.support.privatestack import PrivateStack
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet, publish
from workbench.producer import SensorProducer
from workbench.smoke import local_s3

NAMES = RowSchema.load().names
PARTITIONS = 2
RESTART_LINE = re.compile(r"^reconstructor: restart (\d+)/(\d+) in [0-9.]+s after: \S.*$")
# Long enough for a broker that recovers its log after a kill, short enough to wait through.
WAIT_S = 420


@pytest.fixture(scope="module")
def engine():
    """The SparkSession that reads the tables: built as the shared ``spark`` fixture's (the same one
    when that exists), without starting the shared stack, which these tests do not use."""
    return build_spark("reconstructor-tests", s3=local_s3(), jars_dir=localstack.jars_dir(),
                       shuffle_partitions=4,
                       conf={"spark.ui.enabled": "false", "spark.driver.memory": "3g"})


@pytest.fixture
def private(tmp_path):
    """A broker and an S3 endpoint of this test's own, stopped afterwards whatever happened."""
    stack = PrivateStack(tmp_path / "stack")
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


def _start_run(private: PrivateStack, spark, bucket: str, pattern: str, log: Path, *flags: str):
    """The real CLI as a detached process, its tables on the private S3 endpoint; the test's own
    SparkSession reads that bucket from the same endpoint."""
    spark.conf.set(f"fs.s3a.bucket.{bucket}.endpoint", private.s3_endpoint)
    out, chk = f"s3a://{bucket}/out", f"s3a://{bucket}/chk"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "reconstructor", "run", "--bootstrap-servers",
             private.bootstrap_servers, "--topic-pattern", pattern, "--output", out, "--checkpoint", chk,
             "--trigger", "2 seconds", "--compact-every", "off", *flags],
            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **private.s3_env()})
    return proc, out


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def _await_tables(spark, out: str, messages, proc, log: Path, what: str) -> None:
    """Wait until current_rows holds every open session's table as the reference model has it
    after ``messages`` (the last batch's MERGE included); the run must stay up meanwhile."""
    expected = _model_tables(messages)
    deadline = time.monotonic() + WAIT_S
    found = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended ({proc.returncode}) {what}:\n{_tail(log)}"
        try:
            found = current_tables(spark, out, NAMES)
        except Exception:  # noqa: BLE001 - the table does not exist yet
            found = None
        if found == expected:
            return
        time.sleep(3)
    pytest.fail(f"current_rows never matched the model {what} (sessions: {sorted(found or {})}):\n"
                f"{_tail(log)}")


def _await_rows(spark, out: str, proc, log: Path) -> None:
    """Wait until current_rows holds a row: the run has written through S3."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended ({proc.returncode}):\n{_tail(log)}"
        try:
            if read_table(spark, out, "current_rows").count():
                return
        except Exception:  # noqa: BLE001 - the table does not exist yet
            pass
        time.sleep(3)
    pytest.fail(f"the run wrote nothing:\n{_tail(log)}")


def _model_tables(messages) -> dict:
    """Every open session's table by the reference model, one message at a time."""
    models: dict = defaultdict(Model)
    for p, (partition, offset) in zip(messages, offsets_of(messages, PARTITIONS)):
        m = p.message
        models[(p.topic, p.session)].apply(Msg(seq=m["seq"], type=m["type"], rows=m.get("rows", []),
                                                partition=partition, offset=offset, session=p.session))
    return {key: {rid: normalise(values, NAMES) for rid, values in model.table.items()}
            for key, model in models.items() if not model.ended}


def _restart_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines()
            if line.startswith("reconstructor: restart ")]


@pytest.mark.integration
@pytest.mark.slow
def test_a_continuous_run_rides_through_a_broker_kill_and_a_frozen_s3_endpoint(
        private, engine, run_id, tmp_path):
    spark = engine
    spec = FleetSpec(topic_prefix=f"out{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=15,
                     updates=90, rows_per_update=2, end_sessions=False, seed=31)
    messages = list(plan_fleet(spec))
    first, second = len(messages) // 3, 2 * len(messages) // 3
    bucket, pattern = f"outage{run_id}", f"out{run_id}-sensor-[0-9]+"
    private.create_bucket(bucket)
    create_topics(private.bootstrap_servers, {t: PARTITIONS for t in spec.topics()})

    def produce(part):
        publish(SensorProducer(private.bootstrap_servers), part, {t: PARTITIONS for t in spec.topics()})

    produce(messages[:first])
    log = tmp_path / "run.log"
    # The driver's Kafka calls give up after seconds instead of a minute, so the broker's outage
    # fails the query (three tries of fetching offsets) and the run must restart it.
    settings = tmp_path / "run.toml"
    settings.write_text('[kafka]\n"default.api.timeout.ms" = "3000"\n"request.timeout.ms" = "3000"\n')
    proc, out = _start_run(private, spark, bucket, pattern, log, "--config", str(settings),
                           "--restart-attempts", "8", "--restart-backoff", "1 second")
    try:
        _await_tables(spark, out, messages[:first], proc, log, "before any outage")

        # (1) The broker dies mid-stream and comes back on its own data; more arrives after.
        private.kill("kafka")
        deadline = time.monotonic() + 120
        while not _restart_lines(log) and time.monotonic() < deadline:
            time.sleep(1)
        assert _restart_lines(log), f"the query never failed without its broker:\n{_tail(log)}"
        private.start("kafka")
        produce(messages[first:second])
        _await_tables(spark, out, messages[:second], proc, log, "after the broker's restart")

        # (2) The S3 endpoint stops answering for 30 seconds while more arrives.
        private.freeze("s3")
        try:
            produce(messages[second:])
            time.sleep(30)
        finally:
            private.thaw("s3")
        _await_tables(spark, out, messages, proc, log, "after S3 came back")

        assert proc.poll() is None, _tail(log)
        assert_exact(spark, out, messages, NAMES)
        changes = read_table(spark, out, "row_changes")
        assert changes.select("topic", "partition", "offset", "row_pos").distinct().count() == changes.count()
        restarts = _restart_lines(log)
        assert all(RESTART_LINE.match(line) for line in restarts), restarts
        print(f"\nrestarts during the outages ({len(restarts)}):", *restarts, sep="\n  ")
    finally:
        stop_run(proc)


@pytest.mark.integration
@pytest.mark.slow
def test_a_run_gives_up_with_exit_1_once_its_restarts_are_spent(private, engine, run_id, tmp_path):
    spark = engine
    topic, bucket = f"gvup{run_id}-sensor-0", f"giveup{run_id}"
    private.create_bucket(bucket)
    create_topics(private.bootstrap_servers, {topic: 1})
    send(private.bootstrap_servers, topic, "s", [snapshot(0), update(1, "b")])
    log = tmp_path / "run.log"
    proc, out = _start_run(private, spark, bucket, topic, log,
                           "--restart-attempts", "2", "--restart-backoff", "1 second")
    try:
        _await_rows(spark, out, proc, log)
        private.kill("s3")  # for good
        send(private.bootstrap_servers, topic, "s", [update(2, "c")])
        proc.wait(WAIT_S)
    finally:
        stop_run(proc)
    text = log.read_text(errors="replace")
    assert proc.returncode == 1, text[-4000:]
    restarts = _restart_lines(log)
    assert [RESTART_LINE.match(line).group(1, 2) for line in restarts] == [("1", "2"), ("2", "2")], text[-4000:]
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("reconstructor: ") and not RESTART_LINE.match(last), text[-4000:]
    assert f"S3 endpoint {private.s3_endpoint} does not answer" in last, text[-4000:]


@pytest.mark.integration
def test_an_integrity_violation_is_exit_3_and_never_restarts(stack, run_id, tmp_path):
    bootstrap, topic = stack.bootstrap_servers(), f"norst{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    send(bootstrap, topic, "s", [snapshot(0), update(2, "gap")])
    result = subprocess.run(
        [sys.executable, "-m", "reconstructor", "run", "--bootstrap-servers", bootstrap, "--topic-pattern",
         topic, "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "chk"),
         "--trigger", "1 second", "--compact-every", "off", "--restart-attempts", "3",
         "--restart-backoff", "1 second"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, result.stderr[-4000:]
    assert "restart" not in result.stderr, result.stderr[-4000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("reconstructor:")]
    assert "GAP" in line


def _child_jvm(pid: int, timeout_s: float = 60) -> int:
    """The driver JVM a CLI process started: its child running ``java``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            comm, fields = text.split("(", 1)[1].rsplit(")", 1)[0], text.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and comm == "java":
                return int(stat.parent.name)
        time.sleep(0.5)
    raise AssertionError(f"no java child of {pid}")


@pytest.mark.integration
def test_a_run_whose_driver_jvm_dies_says_so_in_one_line_and_never_restarts(stack, run_id, tmp_path):
    """A JVM that died (here killed; out of memory it exits 52) takes the SparkSession with it: no
    restart can succeed on it, and py4j's tracebacks of the broken connection are not the run's."""
    bootstrap, topic = stack.bootstrap_servers(), f"jvmgone{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    send(bootstrap, topic, "s", [snapshot(0), update(1, "b")])
    log = tmp_path / "run.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "reconstructor", "run", "--bootstrap-servers", bootstrap, "--topic-pattern",
             topic, "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "chk"),
             "--trigger", "1 second", "--compact-every", "off", "--restart-attempts", "3",
             "--restart-backoff", "1 second"],
            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "batch 0:" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, _tail(log)
            time.sleep(0.5)
        os.kill(_child_jvm(proc.pid), signal.SIGKILL)
        proc.wait(120)
    finally:
        stop_run(proc)
    text = log.read_text(errors="replace")
    assert proc.returncode == 1, text[-4000:]
    assert "restart" not in text and "Traceback" not in text, text[-4000:]
    assert text.rstrip().splitlines()[-1] == (
        "reconstructor: the Spark driver's JVM was killed (SIGKILL); nothing was lost: the next run carries "
        "on from the checkpoint"), text[-4000:]
