"""The CLI end to end on the local stack: produce, run, state; exit 3 on an integrity violation.

The run and ``state`` go through the CLI's entry point over the suite's SparkSession; the failing
run is a process of its own, whose exit code the user's scheduler sees."""

from __future__ import annotations

import json

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import TABLES
from tests.support.cli import cli, cli_in_process, produce
from tests.support.pipeline import current_tables

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names


def test_run_exits_3_with_the_violation_line_and_state_matches_current_rows(stack, spark, run_id, tmp_path):
    bootstrap = stack.bootstrap_servers()
    good, bad = f"ok{run_id}-sensor-", f"bad{run_id}-sensor-"
    produced = produce("--bootstrap-servers", bootstrap, "--topic-prefix", good, "--sensors", "2",
                   "--sessions", "2", "--rows", "25", "--updates", "40", "--no-end")
    assert produced.returncode == 0, produced.stderr
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    ran = cli_in_process("run", "--bootstrap-servers", bootstrap, "--topic-pattern", f"{good}[0-9]+",
                         "--output", out, "--checkpoint", chk, "--compact-every", "off")
    assert ran.returncode == 0, ran.stderr[-2000:]

    # `state` reads the checkpoint; it must equal the session's rows in current_rows.
    topic, session = f"{good}1", f"{good}1-session-1"
    shown = cli_in_process("state", "--checkpoint", chk, "--topic", topic, "--session", session, "--format", "json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    state = json.loads(shown.stdout)
    assert state["session"]["status"] == "open" and state["session"]["last_seq"] == 40
    from_state = {r["row_id"]: {c: r[c] for c in NAMES} for r in state["rows"]}
    live = current_tables(spark, out, NAMES)[(topic, session)]
    assert set(from_state) == set(live)
    for rid, values in live.items():
        assert from_state[rid]["temperature"] == values["temperature"]
        assert from_state[rid]["status"] == values["status"]
        assert from_state[rid]["reading_count"] == values["reading_count"]

    # Run again with nothing new in Kafka: it ends before building its query, and writes nothing.
    run = ("run", "--bootstrap-servers", bootstrap, "--topic-pattern", f"{good}[0-9]+", "--output", out,
           "--checkpoint", chk, "--compact-every", "off")
    versions = _versions(out)
    again = cli_in_process(*run)
    assert again.returncode == 0 and "nothing new in Kafka since batch 0" in again.stderr, again.stderr[-2000:]
    assert _versions(out) == versions
    # A setting a start acts on still is acted on: the other engine is refused, as on any start.
    other = cli_in_process(*run, "--engine", "jvm")
    assert other.returncode == 2 and "engine" in other.stderr, other.stderr[-2000:]
    # A new topic's records are read.
    produced = produce("--bootstrap-servers", bootstrap, "--topic-prefix", f"{good}9", "--sensors", "1",
                       "--sessions", "1", "--rows", "5", "--updates", "3", "--no-end")
    assert produced.returncode == 0, produced.stderr
    third = cli_in_process(*run)
    assert third.returncode == 0 and "nothing new" not in third.stderr, third.stderr[-2000:]
    assert (f"{good}90", f"{good}90-session-0") in current_tables(spark, out, NAMES)

    # A gap: exit code 3 and the design's line, naming the record.
    produced = produce("--bootstrap-servers", bootstrap, "--topic-prefix", bad, "--sensors", "1",
                   "--sessions", "2", "--rows", "10", "--updates", "30", "--inject", "gap")
    assert produced.returncode == 0, produced.stderr
    failed = cli("run", "--bootstrap-servers", bootstrap, "--topic-pattern", f"{bad}[0-9]+",
                 "--output", str(tmp_path / "bad-out"), "--checkpoint", str(tmp_path / "bad-chk"),
                 "--compact-every", "off")
    assert failed.returncode == 3, failed.stderr[-3000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith(f"reconstructor: INTEGRITY VIOLATION GAP topic={bad}0 partition=")
    assert f"session={bad}0-session-" in last and "expected_seq=" in last and "found_seq=" in last


def _versions(output: str) -> dict[str, int]:
    """Each output table's newest Delta version (delta-rs)."""
    from deltalake import DeltaTable

    return {name: DeltaTable(f"{output}/{name}").version() for name in TABLES}


def test_run_names_the_output_it_cannot_create_its_tables_in(stack, run_id, tmp_path):
    """An output that cannot be read (its tables' writer is checked before the query starts) ends
    the run with one line naming it and the cause."""
    prefix = f"nobucket{run_id}-sensor-"
    produced = produce("--bootstrap-servers", stack.bootstrap_servers(), "--topic-prefix", prefix,
                   "--sensors", "1", "--sessions", "1", "--rows", "3", "--updates", "2")
    assert produced.returncode == 0, produced.stderr
    ran = cli("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", f"{prefix}[0-9]+",
              "--output", "s3a://no-such-bucket/out", "--checkpoint", str(tmp_path / "chk"),
              "--compact-every", "off")
    assert ran.returncode == 1, ran.stderr[-2000:]
    (line,) = [x for x in ran.stderr.splitlines() if x.startswith("reconstructor:")]
    # The cause (no credentials or no bucket) and the setting to fix, not py4j's "An error occurred".
    assert line.startswith("reconstructor: --output s3a://no-such-bucket/out: ")
    assert "credentials" in line or "bucket no-such-bucket does not exist" in line


def test_a_driver_that_has_no_jars_and_cannot_reach_maven_says_how_to_bring_them_in_one_line(stack, tmp_path):
    """No jars folder, so the driver asks Spark to resolve Delta and the Kafka source from Maven
    (``spark.jars.packages``); with Maven out of reach (an empty Ivy cache, and Ivy settings whose
    one repository does not answer) the run ends with exit 2 and one line naming the first of Ivy's
    errors and ``reconstructor jars``, never pyspark's ``JAVA_GATEWAY_EXITED`` nor Ivy's report."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from reconstructor.jars import maven

    (tmp_path / "ivy").mkdir()
    (tmp_path / "ivysettings.xml").write_text(maven.ivy_settings("http://127.0.0.1:9/"))
    (tmp_path / "offline.toml").write_text(
        f'[spark]\n"spark.jars.ivy" = "{tmp_path / "ivy"}"\n"spark.jars.ivySettings" = "{tmp_path / "ivysettings.xml"}"\n')
    empty = tmp_path / "no-jars"
    empty.mkdir()
    done = subprocess.run([str(Path(sys.executable).parent / "reconstructor"), "run", "--config", "offline.toml",
                           "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", "offline-[0-9]+",
                           "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "chk")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RECON_JARS_DIR": str(empty)})
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0] == (
        "reconstructor: could not resolve Delta and the Kafka source from Maven through spark.jars.packages "
        "(Server access error at url http://127.0.0.1:9/io/delta/delta-spark_4.2_2.13/4.4.0/"
        "delta-spark_4.2_2.13-4.4.0.pom (java.net.ConnectException: Connection refused)): on a machine that "
        "reaches Maven Central run 'reconstructor jars DIR', bring DIR here, and set jars_dir / RECON_JARS_DIR "
        "to DIR"), lines[0]
    assert not (tmp_path / "out" / "row_changes").exists()


def test_compact_on_an_output_with_no_tables_yet_says_so_and_exits_0(spark, tmp_path):
    """A scheduled compact job that runs before the first run finds nothing to do: one line, exit
    0, not Spark's "path does not exist"."""
    out = tmp_path / "new"
    done = cli_in_process("compact", "--output", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [f"nothing to compact: the output {out} holds no tables yet"], done.stdout
