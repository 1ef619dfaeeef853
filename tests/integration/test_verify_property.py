"""No valid output fails ``verify``: the tables a real run writes, under either engine, hold to
each other whatever the stream, its micro-batches and its restarts.

Hypothesis draws the differential test's streams (the fuzz suite's fleets: sessions on two
partitions with empty, one-row and full snapshots, resyncs that drop rows, ends, lost, repeated,
swapped and moved records, and in some streams broken records of every kind), cuts them into
micro-batches, restarts the query from its checkpoint between some of them, and picks a mode, a
drift policy, a chain key and a session timeout: an hour, or a millisecond, so that a session
silent for a whole micro-batch times out in it (an available-now query fires processing-time
timeouts in each micro-batch that reads data) and resumes with its next record.  Each micro-batch
goes through the differential test's harness (a file source with the Kafka source's columns, one
micro-batch per file, the parse and the engine's stateful step) into the product's own sinks
(``DeltaSinks``, its ``foreachBatch``), which write the four Delta tables under a local path.

What the product promises, and so what is held to ``verify``:

- quarantine mode: any stream runs to its end (only ``--on-drift fail`` stops it, on a drift);
- fail mode: the first violation stops the query before its micro-batch writes anything, and the
  run ends there (exit 3).  The tables then hold every micro-batch before it, exactly: that output
  is a valid one too, and it is the one verified (with the micro-batch cuts Hypothesis draws, a
  violation at the start of a micro-batch is the stream up to its first violation, run to its end).

After each stream, ``reconstructor verify --output`` (its entry point, in this process) exits 0:
none of its checks finds a discrepancy.

The seed is the fuzz suite's (fixed for ``make test``; ``RECON_FUZZ_SEED=random`` draws one, and
then a failing example is shrunk); ``RECON_FUZZ_EXAMPLES`` sets the number of drawn examples per
engine (1 by default, beside a hand-made stream of every case above; ``make fuzz`` runs it in fail
mode too).
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, note, seed, settings
from hypothesis import strategies as st
from pyspark.errors import StreamingQueryException

from reconstructor.core.chain import ChainKey
from reconstructor.core.policy import IntegrityPolicy, OnDrift, OnViolation
from reconstructor.core.violations import ViolationRecord
from reconstructor.settings import StatefulEngine
from reconstructor.spark.checkpoint import checkpoint_state
from reconstructor.spark.sinks import DeltaSinks
from tests.integration.test_engine_differential import Scenario, feed, reconstructed, scenarios, start_available_now
from tests.integration.test_fuzz import SCHEMA, SEED, Record
from tests.support.cli import cli_in_process

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("RECON_FUZZ_EXAMPLES") or 1)
# make fuzz: a failing stream is shrunk, and the hand-made stream runs in fail mode too.
LARGE = os.environ.get("RECON_FUZZ_SEED") == "random"
HOUR_MS, TIMEOUT_MS = 3_600_000, 1
CHAIN_KEY = "a key \u2713"


class Stream(Scenario):
    """A stream, its micro-batches, its restarts, and the run's mode, chain key and session timeout."""

    def __init__(self, batches: list[list], restarts: set[int], policy: IntegrityPolicy, chain_key: str | None,
                 timeout_ms: int, expect: tuple[str, ...] = ()):
        super().__init__(batches, restarts, policy, False, chain_key, {}, {})
        self.timeout_ms = timeout_ms
        self.expect = expect  # a hand-made stream's outcome: lines of verify's summary, and where it stopped

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, timeout {self.timeout_ms} ms, key {self.chain_key is not None})"

    def options(self) -> dict:
        return {**super().options(), "session_timeout_ms": self.timeout_ms}


@st.composite
def streams(draw) -> Stream:
    """The differential test's scenarios as a run sees them: no replay's chain seeds, no awaiting of
    snapshots, no losses recorded beforehand (the sinks record a loss from Kafka's own offsets,
    which a file source has not); a session timeout of an hour or of a millisecond."""
    sc = draw(scenarios())
    timeout = draw(st.sampled_from([HOUR_MS, TIMEOUT_MS]))
    event(f"session timeout {timeout} ms")
    return Stream(sc.batches, sc.restarts, sc.policy, sc.chain_key, timeout)


def _message(session: str, seq: int, kind: str, rows: list[tuple] = ()) -> str:
    body = ",".join('{"id":"%s","op":"delete"}' % rid if status is None else
                    '{"id":"%s","values":{"status":"%s","reading_count":%d}}' % (rid, status, seq)
                    for rid, status in rows)
    return ('{"session":"%s","seq":%d,"type":"%s","ts":"2026-11-21T10:00:%02dZ","rows":[%s]}'
            % (session, seq, kind, seq % 60, body))


def _hand_made() -> list[list[Record]]:
    """Every case the property names, in three micro-batches: a first snapshot with no rows, then
    updates (``empty``); a one-row snapshot, its update and a resync snapshot that drops the row
    (``one``); a GAP, a record set aside, and a resync snapshot that drops a row (``gap``); a
    session silent for the second micro-batch, which times out there and resumes in the third
    (``quiet``); an end (``done``)."""
    messages = [
        [("empty", 0, "snapshot", []), ("one", 0, "snapshot", [("a", "a0")]),
         ("gap", 0, "snapshot", [("a", "a0"), ("b", "b0")]), ("quiet", 0, "snapshot", [("a", "a0"), ("b", "b0")]),
         ("gap", 1, "update", [("b", None)]), ("done", 0, "snapshot", [("a", "a0")])],
        [("empty", 1, "update", [("a", "a1")]), ("one", 1, "update", [("a", "a1")]),
         ("gap", 3, "update", [("a", "a3")]), ("gap", 4, "update", [("c", "c4")]), ("done", 1, "end", [])],
        [("quiet", 1, "update", [("b", "b1")]), ("one", 2, "snapshot", []), ("empty", 2, "update", [("b", "b2")]),
         ("gap", 5, "snapshot", [("c", "c5")]), ("gap", 6, "update", [("d", "d6")])],
    ]
    partitions = {"empty": 0, "one": 1, "gap": 0, "quiet": 1, "done": 0}
    batches, offset = [], 100
    for batch in messages:
        records = []
        for session, seq, kind, rows in batch:
            records.append(Record(partitions[session], offset, session.encode(),
                                  _message(session, seq, kind, rows).encode()))
            offset += 1
        batches.append(records)
    return batches


QUARANTINE = IntegrityPolicy(OnViolation.QUARANTINE, OnDrift.RECORD)
FAIL = IntegrityPolicy(OnViolation.FAIL, OnDrift.RECORD)
#: The hand-made stream in quarantine mode (with a restart, a chain key and timeouts), and, in the
#: large profile (CI's budget leaves it to the drawn streams), in fail mode, stopped at its GAP.
HAND_MADE = [Stream(_hand_made(), {2}, QUARANTINE, CHAIN_KEY, TIMEOUT_MS, (
    "sessions     5 (1 ended, 4 open)", "violations   4 rows", "seals: 5 session rows sealed",
    "fleet: 5 session rows and 4 violation rows as the last batch sealed them"))]
if LARGE:
    HAND_MADE.append(Stream(_hand_made(), set(), FAIL, None, HOUR_MS, (
        "sessions     5 (5 open)", "violations   0 rows", "stopped on INTEGRITY VIOLATION GAP topic=fuzz-sensor "
        "partition=0 offset=108 session=gap expected_seq=2 found_seq=3")))


def hand_made(test):
    """``test`` with each stream of ``HAND_MADE`` as an explicit example."""
    for sc in reversed(HAND_MADE):
        test = example(sc=sc)(test)
    return test


def run(spark, engine: StatefulEngine, sc: Stream) -> tuple[str, ViolationRecord | None]:
    """The stream through ``engine`` into the product's sinks: the output root, and the violation
    that stopped the run (None when it ran to its end)."""
    root = tempfile.mkdtemp(prefix=f"recon-verify-{engine.value}-")
    output, checkpoint = f"{root}/out", f"{root}/chk"
    stopped = []

    def segment(inputs: str) -> bool:
        """One run from the checkpoint, its sinks wired in ``pipeline.start``'s order."""
        sinks = DeltaSinks(spark, output, SCHEMA, chain_key=ChainKey(sc.chain_key) if sc.chain_key else None)
        sinks.check_writer(checkpoint_state(spark, checkpoint))
        sinks.start_creating_tables()
        query = start_available_now(spark, reconstructed(spark, engine, sc, inputs), sinks.write_batch, checkpoint)
        sinks.set_query_id(query.id)
        sinks.await_tables()
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            assert sinks.violation is not None, f"the query failed without a violation: {exc}"
            stopped.append(sinks.violation)
            return False
        return True

    feed(sc, f"{root}/in", segment)
    if stopped:
        note(f"stopped on {stopped[0]}")
        assert not sc.policy.quarantine or sc.policy.on_drift is OnDrift.FAIL, "quarantine mode stopped"
    return output, stopped[0] if stopped else None


@pytest.mark.parametrize("engine", [StatefulEngine.PYTHON, StatefulEngine.JVM], ids=["python", "jvm"])
@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          phases=[Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if LARGE else [])],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@seed(SEED)
@hand_made
@given(sc=streams())
def test_no_valid_output_fails_verify(spark, engine, sc):
    batches = [[(r.partition, r.offset, r.key[:40] if r.key else r.key, r.value[:200]) for r in b] for b in sc.batches]
    note(f"batches: {batches}"[:20_000])
    output, stopped = run(spark, engine, sc)
    event("stopped by a violation" if stopped else "ran to its end")
    key = ("--chain-key", sc.chain_key) if sc.chain_key else ()
    result = cli_in_process("verify", "--output", output, *key)
    assert result.returncode == 0, result.stderr.strip()[-2000:]
    assert result.stdout.startswith(f"verify {output}: no discrepancy"), result.stdout
    outcome = result.stdout + (f"stopped on {stopped}" if stopped else "")
    assert all(line in outcome for line in sc.expect), (sc.expect, outcome)
    sessions = next(line for line in result.stdout.splitlines() if line.strip().startswith("sessions"))
    event(f"sessions: {sessions.split('(', 1)[-1].rstrip(')')}")
