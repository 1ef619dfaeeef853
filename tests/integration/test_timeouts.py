"""A timeout forgets nothing, on the real stack: a session silent past its timeout resumes exactly
with its next seq, and an ended session re-sent whole after its timeout is still AFTER_END."""

from __future__ import annotations

import time

import pytest

from reconstructor.core import ViolationKind
from reconstructor.errors import IntegrityViolationError
from tests.support.kafka import create_topics, send, snapshot, update
from tests.support.pipeline import read_table, run

pytestmark = pytest.mark.integration
TIMEOUT = "8 seconds"


def two_rows(seq: int) -> dict:
    return {"seq": seq, "type": "snapshot", "rows": [{"id": "a", "values": {"status": "a0"}},
                                                     {"id": "b", "values": {"status": "b0"}}]}


def live(spark, out) -> dict:
    return {(r.session, r.row_id): r.status for r in read_table(spark, out, "current_rows").collect()}


def statuses(spark, out) -> dict:
    return {r.session: (r.status, r.last_seq) for r in read_table(spark, out, "sessions").collect()}


@pytest.mark.parametrize("engine", ["python", "jvm"])
def test_a_silent_session_resumes_exactly_and_an_ended_one_resent_is_after_end(spark, stack, run_id, tmp_path, engine):
    bootstrap, topic = stack.bootstrap_servers(), f"tmo{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def again():
        run(spark, topic, out, chk, session_timeout=TIMEOUT, engine=engine)

    send(bootstrap, topic, "quiet", [two_rows(0), update(1, "a1")])
    send(bootstrap, topic, "done", [snapshot(0), {"seq": 1, "type": "end"}])
    again()
    assert live(spark, out) == {("quiet", "a"): "a1", ("quiet", "b"): "b0"}

    time.sleep(10)  # both are silent past the timeout; another session's batch fires the timeouts
    send(bootstrap, topic, "other", [snapshot(0)])
    again()
    assert statuses(spark, out)["quiet"] == ("timed_out", 1)
    assert ("quiet", "a") not in live(spark, out)

    # The next seq after the timeout: no violation, open again, every row back in current_rows.
    send(bootstrap, topic, "quiet", [update(2, "a2")])
    again()
    assert statuses(spark, out)["quiet"] == ("open", 2)
    rows = {k: v for k, v in live(spark, out).items() if k[0] == "quiet"}
    assert rows == {("quiet", "a"): "a2", ("quiet", "b"): "b0"}
    changes = read_table(spark, out, "row_changes").where("session = 'quiet'").count()
    assert changes == 4  # the snapshot's two rows, then one change per update: nothing re-logged
    # Its rows brought back carry the record before the timeout; verify holds them to it.
    from reconstructor.cli import main as cli_main

    assert cli_main(["verify", "--output", out]) == 0

    # The ended session, re-sent whole after its timeout: still after its end.
    send(bootstrap, topic, "done", [snapshot(0), {"seq": 1, "type": "end"}])
    with pytest.raises(IntegrityViolationError) as err:
        again()
    violation = err.value.violation
    assert (violation.kind, violation.session, violation.offset) == (ViolationKind.AFTER_END, "done", 6)
