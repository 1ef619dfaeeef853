"""The two engines are one: the JVM engine (``--engine jvm``) against the Python core, its
specification, over the same hostile streams in real streaming queries.

Hypothesis draws the fuzz suite's fleets (sessions on two partitions with lost, repeated, swapped
and moved records, and broken records of every kind), cuts them into micro-batches at random
points, restarts the query from its checkpoint between some of them, and picks a mode: fail or
quarantine, a drift policy, awaiting snapshots, a chain key, a replay's chain seeds, and data
losses the checkpoint recorded.  Each engine runs the parse stage and its stateful step over a file
source with the Kafka source's columns (``maxFilesPerTrigger`` 1: one micro-batch per file), as the
product's query does; a batch that holds a violation stops the query, as the sinks stop it.

Both must emit the same records in every micro-batch (each change with its values bit for bit
and its chain digests, each session record, each recorded or stopping violation with its
coordinates, detail and raw value: what the sinks turn into ``row_changes``, ``current_rows``,
``sessions`` and ``violations``, with code both engines share) and leave the same state in their
checkpoints (each session's fields, table and chain head, read back with the state data source).

The seed is fixed for ``make test`` (``RECON_FUZZ_SEED`` sets it, ``random`` draws one, as for the
fuzz suite); ``RECON_FUZZ_EXAMPLES`` sets the number of examples: 12 by default, CI's share (each
is two engines' streaming queries, 10 to 15 seconds); ``make fuzz`` runs 40 on a new seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import struct
import tempfile
import time
import uuid
from itertools import pairwise

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, note, seed, settings
from hypothesis import strategies as st
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from reconstructor.cli.check import SessionCheck
from reconstructor.contract.tables import STATE_FIELDS
from reconstructor.core import blob, jvm_blob
from reconstructor.core.chain import ChainSeed
from reconstructor.core.data_loss import DataLoss
from reconstructor.core.policy import IntegrityPolicy, OnDrift, OnViolation
from reconstructor.core.record_parse import KafkaRecord
from reconstructor.core.seed import NO_SEEDS, SessionSeed, SessionSeeds
from reconstructor.core.step_spec import NO_START, StepSpec, StepStart
from reconstructor.core.violations import ViolationKind, ViolationRecord, quoted
from reconstructor.settings import StatefulEngine
from reconstructor.spark.engines import parse_for, reconstruct_with
from tests.integration.test_fuzz import FOUND, SCHEMA, SEED, TOPIC, Record, fleet

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("RECON_FUZZ_EXAMPLES") or 12)
KAFKA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                   ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()), ("value", pa.binary())])
POLICIES = [IntegrityPolicy(OnViolation.FAIL, OnDrift.RECORD), IntegrityPolicy(OnViolation.FAIL, OnDrift.FAIL),
            IntegrityPolicy(OnViolation.QUARANTINE, OnDrift.RECORD),
            IntegrityPolicy(OnViolation.QUARANTINE, OnDrift.FAIL),
            IntegrityPolicy(OnViolation.QUARANTINE, OnDrift.IGNORE)]


class Scenario:
    """A stream, its micro-batches and the query's options (a plain class: Hypothesis prints an
    example by its repr, and a dataclass's would print every record)."""

    def __init__(self, batches: list[list], restarts: set[int], policy: IntegrityPolicy, await_snapshot: bool,
                 chain_key: str | None, chain_seeds: dict, losses: dict, session_seeds=None):
        self.batches = batches  # the records of each micro-batch, in arrival order
        self.restarts = restarts  # the query starts again from its checkpoint before these batches
        self.policy = policy
        self.await_snapshot = await_snapshot
        self.chain_key = chain_key
        self.chain_seeds = chain_seeds
        self.losses = losses
        self.session_seeds = session_seeds  # a replay's (``core.seed``): sessions with no state start from them

    def __repr__(self) -> str:  # the records are in the example's notes; the whole repr is too long to print
        return (f"Scenario({len(self.batches)} batches of {[len(b) for b in self.batches]} records, restarts "
                f"{sorted(self.restarts)}, {self.policy}, await_snapshot={self.await_snapshot})")

    def step(self) -> tuple[StepSpec, StepStart]:
        """The spec both engines take, and what the query's start adds."""
        return (StepSpec(SCHEMA, session_timeout_ms=3_600_000, state_retention_ms=7 * 86_400_000,
                         policy=self.policy, await_snapshot=self.await_snapshot, chain_key=self.chain_key),
                StepStart(losses=self.losses if self.policy.quarantine else {}, chain_seeds=self.chain_seeds,
                          session_seeds=self.session_seeds or NO_SEEDS))


@st.composite
def scenarios(draw) -> Scenario:
    hostile = draw(st.booleans())
    event(f"{'hostile' if hostile else 'well-formed'} records")
    records = draw(fleet(hostile=hostile))
    n = len(records)
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=4))) if n > 1 else []
    bounds = [0, *cuts, n]
    batches = [records[a:b] for a, b in pairwise(bounds)]
    restarts = draw(st.sets(st.integers(1, len(batches) - 1), max_size=2)) if len(batches) > 1 else set()
    snapshots = []
    for r in records:
        found = _json(r.value)
        if isinstance(found, dict) and found.get("type") == "snapshot" and isinstance(found.get("seq"), int) and r.key:
            snapshots.append((r.key.decode("utf-8", "replace"), found["seq"]))
    seeds = {}
    if snapshots and draw(st.booleans()):
        session, seq = draw(st.sampled_from(snapshots))
        seeds[(TOPIC, session, seq)] = ChainSeed(draw(st.sampled_from(["", "sha256:" + "cd" * 32])),
                                                 "sha256:" + "ab" * 32)
    losses = {}
    if draw(st.booleans()):
        partition = draw(st.integers(0, 1))
        first = draw(st.integers(100, 100 + n))
        losses[(TOPIC, partition)] = [DataLoss(TOPIC, partition, first, first + 3,
                                               f"offsets {first}..{first + 2} of {TOPIC}[{partition}] were lost")]
    policy = draw(st.sampled_from(POLICIES))
    event(f"on_violation={policy.on_violation.value}")
    event(f"{len(batches)} micro-batches, {len(restarts)} restarts")
    return Scenario(batches, restarts, policy, draw(st.booleans()),
                    draw(st.sampled_from([None, "a key \u2713"])), seeds, losses, draw(session_seeds(snapshots, n)))


@st.composite
def session_seeds(draw, snapshots: list, n: int) -> SessionSeeds | None:
    """Maybe a replay's seed for one session of the stream: any status, its last record somewhere
    in the stream's offsets, a few rows of every column type."""
    if not snapshots or not draw(st.booleans()):
        return None
    session, seq = draw(st.sampled_from(snapshots))
    status = draw(st.sampled_from(["open", "timed_out", "ended", "quarantined"]))
    event(f"a {status} session seeded")
    last_offset = draw(st.integers(99, 100 + n))
    rows = {f"r{i}": (draw(st.one_of(st.none(), st.floats(-1e6, 1e6))), None, 50.0, draw(st.sampled_from([None, "ok", "\u2713"])),
                      draw(st.integers(-(2**63), 2**63 - 1)), draw(st.sampled_from([None, 1_700_000_000_123_456])))
            for i in range(draw(st.integers(0, 3)))}
    row = {"status": status, "partition": draw(st.integers(0, 1)), "first_seq": seq, "last_seq": seq + draw(st.integers(0, 3)),
           "last_offset": last_offset, "snapshot_seq": seq, "snapshot_offset": 99, "started_us": 1_700_000_000_000_000,
           "last_event_us": 1_700_000_000_000_001, "chain_head": draw(st.sampled_from([None, "sha256:" + "ef" * 32]))}
    return SessionSeeds(tuple(SCHEMA.names), {(TOPIC, session): SessionSeed.from_tables(row, rows, 10**15)})


def _json(value: bytes):
    try:
        return json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def run_engine(spark, engine: StatefulEngine, sc: Scenario) -> tuple[dict, dict]:
    """The scenario through ``engine``: its output records per micro-batch (normalised), and the
    state its checkpoint holds at the end."""
    root = tempfile.mkdtemp(prefix=f"recon-diff-{engine.value}-")
    checkpoint = f"{root}/chk"
    got: dict[int, list] = {}
    feed(sc, f"{root}/in", lambda inputs: _run_segment(spark, engine, sc, inputs, checkpoint, got))
    return got, _state(spark, checkpoint)


def feed(sc: Scenario, inputs: str, run_segment) -> None:
    """The scenario's micro-batches as files under ``inputs`` (one file a micro-batch, read oldest
    first), the batches between two restarts at a time, each time followed by
    ``run_segment(inputs)``: a query from the checkpoint over what is there.  Once one returns
    False (a violation stopped it), nothing after it runs."""
    os.makedirs(inputs)
    stamp = time.time() - 3600
    segments = [[]]
    for i, batch in enumerate(sc.batches):
        if i in sc.restarts:
            segments.append([])
        segments[-1].append(batch)
    written = 0
    for segment in segments:
        for batch in segment:
            path = f"{inputs}/{written:04d}.parquet"
            pq.write_table(pa.Table.from_pylist(
                [{"topic": TOPIC, "partition": r.partition, "offset": r.offset, "timestamp": r.kafka_ts,
                  "key": r.key, "value": r.value} for r in batch], schema=KAFKA), path)
            os.utime(path, (stamp + written, stamp + written))  # the file source reads the oldest first
            written += 1
        if not run_segment(inputs):
            break  # a violation stopped the query: nothing after it runs


def reconstructed(spark, engine: StatefulEngine, sc: Scenario, inputs: str):
    """The stateful step's records under ``engine`` over a file source of ``inputs`` with the Kafka
    source's columns, one micro-batch per file, as the product's query parses and rebuilds them."""
    source = spark.readStream.schema(KAFKA_DDL).option("maxFilesPerTrigger", 1).parquet(inputs)
    return reconstruct_with(engine, parse_for(engine, source, SCHEMA, keep_values=sc.policy.quarantine),
                            *sc.step())


def start_available_now(spark, out, each_batch, checkpoint: str):
    """``out`` into ``each_batch`` (a foreachBatch function) under an available-now trigger from
    ``checkpoint``, without no-data micro-batches (as ``pipeline._start`` starts such a query)."""
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    previous = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        return (out.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
                .queryName(f"diff_{uuid.uuid4().hex[:8]}").trigger(availableNow=True).start())
    finally:
        spark.conf.set(key, previous)


def _run_segment(spark, engine, sc: Scenario, inputs: str, checkpoint: str, got: dict) -> bool:
    out = reconstructed(spark, engine, sc, inputs)
    out = out.select([F.unix_micros(c).alias(c) if t == "timestamp" else F.col(c) for c, t in out.dtypes])

    def collect(df, batch_id):
        rows = df.collect()
        got[batch_id] = sorted(_normal(r) for r in rows)
        if any(r.record == "violation" for r in rows):
            raise RuntimeError("violation")  # as the sinks fail the micro-batch

    query = start_available_now(spark, out, collect, checkpoint)
    try:
        query.awaitTermination()
    except StreamingQueryException:
        return False
    return True


KAFKA_DDL = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"


def _normal(row) -> tuple:
    """A record as comparable values: ``info`` as the JSON it holds, doubles by their bits."""
    out = []
    for name, value in row.asDict().items():
        if name == "info" and value is not None:
            value = json.dumps(json.loads(value), sort_keys=True)
        elif isinstance(value, float):
            value = "nan" if math.isnan(value) else struct.pack("<d", value).hex()
        out.append((name, value))
    return tuple((n, "" if v is None else v, v is None) for n, v in out)


def _state(spark, checkpoint: str) -> dict:
    """Each session's state in the checkpoint: its fields, its table's rows and its chain head."""
    spark.streams.active  # noqa: B018 - see reconstructor.spark.state_reader
    commits = f"{checkpoint}/commits"
    if not os.path.isdir(commits) or not [n for n in os.listdir(commits) if n.isdigit()]:
        return {}  # no batch committed: no state
    states = spark.read.format("statestore").load(checkpoint)
    value = states.schema["value"].dataType
    fields = "value.groupState" if "groupState" in value.fieldNames() else "value"
    rows = states.select("key.topic", "key.group_session",
                         *[F.col(f"{fields}.{f.name}").alias(f.name) for f in STATE_FIELDS]).collect()
    out = {}
    for r in rows:
        data = r.asDict()
        stored = data.pop("table")
        table, head = None, None
        if stored is not None:
            if jvm_blob.is_jvm_blob(stored):
                arrow, head = jvm_blob.read_table(stored, SCHEMA), jvm_blob.chain_head(stored)
            else:
                arrow, head = blob.read_table(bytes(stored), SCHEMA), blob.chain_head(bytes(stored))
            table = sorted(tuple(_normal_value(v) for v in row.values()) for row in arrow.to_pylist())
        out[(data.pop("topic"), data.pop("group_session"))] = (data, table, head)
    return out


def _normal_value(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v).hex()
    return "" if v is None else str(v)


def _held_over_batches() -> Scenario:
    """A replay's seeded sessions whose records the tables hold come in two micro-batches, the query
    restarted between them: an open one that goes on past its seed, an ended one that sends nothing
    more.  Neither applies a held record again."""
    def record(partition: int, offset: int, session: str, seq: int, kind: str, status: str | None = None) -> Record:
        rows = [] if status is None else [{"id": "a", "values": {"status": status}}]
        value = {"session": session, "seq": seq, "type": kind, "ts": "2026-11-21T10:00:00Z", "rows": rows}
        return Record(partition, offset, session.encode(), json.dumps(value).encode())

    held = [record(0, 100, "held", 0, "snapshot", "x"), *[record(0, 100 + s, "held", s, "update", f"h{s}") for s in range(1, 6)]]
    ended = [record(1, 100, "ended", 0, "snapshot", "y"), record(1, 101, "ended", 1, "update", "e1"),
             record(1, 102, "ended", 2, "end")]
    common = {"first_seq": 0, "snapshot_seq": 0, "snapshot_offset": 100, "started_us": 1_700_000_000_000_000,
              "last_event_us": 1_700_000_000_000_001, "chain_head": None}
    seeds = SessionSeeds(tuple(SCHEMA.names), {
        (TOPIC, "held"): SessionSeed.from_tables({**common, "status": "open", "partition": 0, "last_seq": 3,
                                                  "last_offset": 103}, {"a": (None, None, None, "h3", None, None)}, 10**15),
        (TOPIC, "ended"): SessionSeed.from_tables({**common, "status": "ended", "partition": 1, "last_seq": 2,
                                                   "last_offset": 102}, {}, 10**15)})
    return Scenario([[held[0], held[1], ended[0]], [held[2], ended[1], held[3], ended[2], held[4]], [held[5]]],
                    {1}, POLICIES[0], True, None, {}, {}, seeds)


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@seed(SEED)
@given(sc=scenarios())
@example(sc=_held_over_batches())
def test_the_jvm_engine_emits_the_python_engines_records_and_state(spark, sc):
    note(f"batches: {[[(r.partition, r.offset, r.key[:40] if r.key else r.key, r.value[:80]) for r in b] for b in sc.batches]}"[:20_000])
    note(f"restarts {sorted(sc.restarts)}, {sc.policy}, await {sc.await_snapshot}, key {sc.chain_key!r}, "
         f"seeds {sc.chain_seeds}, losses {sc.losses}")
    want_records, want_state = run_engine(spark, StatefulEngine.PYTHON, sc)
    got_records, got_state = run_engine(spark, StatefulEngine.JVM, sc)
    assert sorted(got_records) == sorted(want_records), "the engines stopped at different micro-batches"
    for batch in sorted(want_records):
        got, want = got_records[batch], want_records[batch]
        assert got == want, (f"micro-batch {batch}", [r for r in got if r not in want][:3],
                             [r for r in want if r not in got][:3])
    kinds = {r[0][1] for rows in want_records.values() for r in rows}  # each record's first column: its kind
    event(f"records: {', '.join(sorted(kinds))}")
    assert got_state.keys() == want_state.keys()
    for key in want_state:
        assert got_state[key] == want_state[key], key
    assert want_records, "the scenario ran no micro-batch"


# Times in a row: every edge of the grammar and the range (the fuzz suite's), and texts whose error
# quotes them (escapes, letters past the first 60, letters outside the basic plane).
ROW_TIMES = ["1677-09-22T00:00:00Z", "2262-04-11T00:00:00Z", "2262-04-11T00:00:00.000001Z",
             "1677-09-21T23:59:59.999999999Z", "2262-04-10T23:59:60Z", "2262-04-11T01:00:00+01:00",
             "1677-09-22T00:00:00+00:01", "2026-11-21T10:00:00.123456789Z", "2024-02-29T00:00:00Z",
             "2026-02-29T00:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21 10:00:00Z", "2026-11-21t10:00:00z",
             "2026-11-21T10:00:00", "2026-11-21T10:00:00+24:00", "2026-11-21T10:00:00-00:00", "2026-11-21T10:00:00+23:60",
             "2026-11-21T10:60:00Z", "2026-11-21T10:00:61Z", "2026-13-01T00:00:00Z", "0000-01-01T00:00:00Z",
             "\uff12026-11-21T10:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-11-21T10:00:00Z\n",
             "", "soon", 'a \"quoted\" \\ \u0001 time', "\U0001d7d8" * 70, "9" * 80,
             "2026-11-21T10:00:00." + "7" * 40 + "+05:30"]
# Rows of a message the fast path vouches for, each with what the JVM engine now checks itself.
ROWS = ['{"id":"a","values":{"temperature":1.5}}', '{"id":"","values":{}}', '{"values":{"status":"x"}}',
        '{"id":"a","op":"insert"}', '{"id":"a","op":"delete","values":{"status":"x"}}',
        '{"id":"a","op":"delete","values":null}', '{"id":"a","op":"delete"}', '{"id":"a","values":null}',
        '{"id":"a","values":{"temperature":1e309}}', '{"id":"a","values":{"pressure":-1e309,"reading_count":-9}}',
        '{"id":"b","values":{"status":"\\u2713","humidity":null,"calibrated_at":null}}', 'null']


# Ids whose quoting once hung on a runtime's Unicode tables: U+1FAE0 is Unicode 14 (past Java 17's),
# U+1FA89 Unicode 15 (past Python 3.11's); then an unassigned code point, a format character, a
# no-break space, private use, a C1 control, a line end, quotes and a backslash.
QUOTED_IDS = ["\U0001fae0", "\U0001fa89", "\u0378", "\u200b", "\xa0", "\ue000", "\x85", "\u2029", "\x1b[2J",
              "a'b", "a\"b'c\\"]


def _vouched_cases() -> list[Record]:
    """One record per session, each a snapshot at seq 0 (so that each gets a verdict of its own): a
    time of ``ROW_TIMES`` in a row, pairs of ``ROWS``, a row error beside a key that is not the
    session (the first row's error comes before the key's, the key's before a later row's), and
    the fuzz suite's findings."""
    head = '{"session":"%s","seq":0,"type":"snapshot","ts":"2026-11-21T10:00:00Z","rows":[%s]}'
    values = [head % ("{s}", '{"id":"t","values":{"calibrated_at":%s}}' % json.dumps(t, ensure_ascii=ascii))
              for t in ROW_TIMES for ascii in (False, True)]
    values += [head % ("{s}", f"{a},{b}") for a in ROWS for b in ROWS[:3]]
    values += [head % ("{s}", "")]
    # Row ids the detail quotes (a row twice, a delete in a snapshot): letters past either runtime's
    # Unicode tables, unassigned, format and control characters, a line end.
    for rid in QUOTED_IDS:
        row = json.dumps({"id": rid, "values": {}})
        values += [head % ("{s}", f"{row},{row}"), head % ("{s}", json.dumps({"id": rid, "op": "delete"}))]
    values += [v.replace('"session":"s1"', '"session":"{s}"') for _, v, _ in FOUND]
    records = [Record(i % 2, i, f"v{i}".encode(), v.replace("{s}", f"v{i}").encode()) for i, v in enumerate(values)]
    n = len(records)
    for rows in (f"{ROWS[0]},{ROWS[1]}", f"{ROWS[1]},{ROWS[0]}", ROWS[0], ""):
        records.append(Record(n % 2, n, b"other", (head % (f"v{n}", rows)).encode()))
        n += 1
    for rid in QUOTED_IDS:  # a key that is not the session: the detail quotes both
        session = json.dumps(f"v{n}{rid}")[1:-1]
        records.append(Record(n % 2, n, f"k{rid}".encode(), (head % (session, ROWS[0])).encode()))
        n += 1
    return records


@pytest.mark.parametrize("policy", [POLICIES[2]], ids=["quarantine"])
def test_the_engines_read_and_check_a_vouched_messages_rows_alike(spark, policy):
    """The rows the JVM engine reads out of a message whole (``parse_records(nested_rows=True)``)
    against the Python engine's exploded ones: the same values, the same first error, word for word."""
    sc = Scenario([_vouched_cases()], set(), policy, False, None, {}, {})
    want_records, want_state = run_engine(spark, StatefulEngine.PYTHON, sc)
    got_records, got_state = run_engine(spark, StatefulEngine.JVM, sc)
    [batch] = want_records.values()
    kinds = {}
    for r in batch:
        kinds[r[0][1]] = kinds.get(r[0][1], 0) + 1
    assert kinds.get("change", 0) > 20 and kinds.get("recorded", 0) > 40, kinds  # both verdicts are well covered
    assert got_records.keys() == want_records.keys()
    for batch in want_records:
        got, want = got_records[batch], want_records[batch]
        assert got == want, ([r for r in got if r not in want][:3], [r for r in want if r not in got][:3])
    assert got_state == want_state
    # ``reconstructor check`` (no JVM) names each session by the first violation the engines recorded.
    recorded: dict = {}
    [rows] = want_records.values()
    found = [ViolationRecord.from_json(f["info"]) for f in ({n: v for n, v, _ in r} for r in rows)
             if f["record"] == "recorded"]
    for v in sorted(found, key=lambda v: (v.partition or 0, v.offset or 0)):
        if v.kind != ViolationKind.SKIPPED:
            recorded.setdefault(v.session, (v.kind.value, v.partition, v.offset, v.detail))
    check = SessionCheck(sc.step()[0], {})
    check.add([KafkaRecord(TOPIC, r.partition, r.offset, r.kafka_ts, r.key, r.value) for r in _vouched_cases()])
    assert {p.session: (p.problem.kind.value, p.problem.partition, p.problem.offset, p.problem.detail)
            for p in check.problems if p.problem is not None} == recorded


@pytest.fixture(scope="module")
def java_jcs_number(spark):
    """The JVM engine's ``Text.jcsNumber`` (package-private), looked up once by reflection over
    py4j and called per example."""
    jvm = spark._jvm
    text = jvm.java.lang.Class.forName("reconstructor.jvm.Text")
    gateway = spark.sparkContext._gateway
    types = gateway.new_array(jvm.java.lang.Class, 1)
    types[0] = jvm.java.lang.Double.TYPE
    method = text.getDeclaredMethod("jcsNumber", types)
    method.setAccessible(True)

    def call(x: float) -> str:
        args = gateway.new_array(jvm.java.lang.Object, 1)
        args[0] = jvm.java.lang.Double(x)
        return method.invoke(None, args)

    return call


# Doubles whose shortest decimal Java's own formatting gets wrong: Double.toString is not always the
# shortest in Java 17, and String.format("%.Ne") rounds that text, not the double's exact value (the
# first five: two decimals of the shortest length read back, and only the closer one is RFC 8785's;
# 4.9e-324, 1e-323 and 5e-323: the Schubfach writer the engine starts from weighs two digits where
# one reads back).
HARD_DOUBLES = [1.94849970549937485e18, 1.06936502495548685e18, 7.8688832549046925e17, 3.1526711628916386e25,
                1.11811097061618765e18, 2e23, 1.0e-322, 4.9e-324, 1e-323, 5e-323, 5e-324 * 3, 1.7976931348623157e308,
                9007199254740993.0, 0.1 + 0.2, 123456789012345680.0, 1e21, 1e-7, 1.5e-7, 2.0**-1074 * 12345, 1e22,
                5.0e-324 * 2**52, 1.2345678901234567e-5]


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@seed(SEED)
@given(x=st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(HARD_DOUBLES)
       | st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0])
       .filter(math.isfinite))
def test_the_jvm_engine_writes_a_double_in_the_change_log_as_the_core_does(java_jcs_number, x):
    """The chain digests hash each double's RFC 8785 text: one digit apart, the engines' chains part."""
    from reconstructor.core.chain import jcs_number

    assert java_jcs_number(x) == jcs_number(x), repr(x)


@pytest.fixture(scope="module")
def java_quoted(spark):
    """The JVM engine's ``Text.pyRepr`` (package-private), looked up once by reflection over py4j;
    the text goes over as code points, so that a lone surrogate reaches it too."""
    jvm = spark._jvm
    text = jvm.java.lang.Class.forName("reconstructor.jvm.Text")
    gateway = spark.sparkContext._gateway
    types = gateway.new_array(jvm.java.lang.Class, 1)
    types[0] = jvm.java.lang.String._java_lang_class
    method = text.getDeclaredMethod("pyRepr", types)
    method.setAccessible(True)

    def call(s: str) -> str:
        codes = gateway.new_array(jvm.int, len(s))
        for i, c in enumerate(s):
            codes[i] = ord(c)
        args = gateway.new_array(jvm.java.lang.Object, 1)
        args[0] = jvm.java.lang.String(codes, 0, len(s))
        return method.invoke(None, args)

    return call


def _no_surrogate_pair(s: str) -> bool:
    """Java reads a high surrogate before a low one as one letter; Python's text never holds such a pair."""
    return not any("\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff" for a, b in pairwise(s))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@seed(SEED)
@given(s=st.text(st.integers(0, 0x10FFFF).map(chr) | st.characters(), max_size=8).filter(_no_surrogate_pair)
       | st.sampled_from(QUOTED_IDS))
@example(s="\U0001fae0")
@example(s="\U0001fa89")
def test_the_jvm_engine_quotes_an_id_as_the_core_does(java_quoted, s):
    """A violation's detail quotes row ids, keys and sessions; which letters are escaped is the
    contract's fixed list, the same in both engines whatever Unicode version either runtime knows."""
    assert java_quoted(s) == quoted(s), ascii(s)


# -- One spec: the JVM reads the Python StepSpec and StepStart field by field -------------------

#: Each field of the Python spec and start -> the keys of the JVM's reading that show it.  Every
#: field is here: a field added to the spec fails this test until the JVM reads it too.
SPEC_READING = {
    "schema": ("schema_name", "columns"),
    "session_timeout_ms": ("session_timeout_ms",),
    "state_retention_ms": ("state_retention_ms",),
    "await_snapshot": ("await_snapshot",),
    "policy": ("on_violation", "on_drift"),
    "chain_key": ("chain_key_sha256",),
}
START_READING = {
    "losses": ("losses",),
    "chain_seeds": ("chain_seeds",),
    "session_seeds": ("session_seeds",),
    "await_snapshot": ("await_snapshot",),
}
#: What the document carries beside the spec: the contract's constants, which the JVM takes from it.
CONTRACT_READING = ("version", "state_ddl", "records_ddl", "timestamp_pattern", "time_range_us", "time_range_text")


def python_reading(spec: StepSpec, start: StepStart) -> dict:
    """What the JVM must read from ``engine_json(spec, start)``, from the Python definitions."""
    from reconstructor.contract.tables import STATE_DDL, records_ddl
    from reconstructor.core.timestamps import RFC3339_PATTERN
    from reconstructor.spark.jvm_engine import ENGINE_VERSION
    from reconstructor.spark.parse import TS_RANGE_TEXT, TS_RANGE_US

    key = spec.chain_key
    return {
        "version": ENGINE_VERSION,
        "schema_name": spec.schema.name,
        "columns": [[c.name, c.type] for c in spec.schema.columns],
        "session_timeout_ms": spec.session_timeout_ms,
        "state_retention_ms": spec.state_retention_ms,
        "await_snapshot": spec.awaits_snapshot(start),
        "on_violation": spec.policy.on_violation.value,
        "on_drift": spec.policy.on_drift.value,
        "chain_key_sha256": hashlib.sha256(key.encode("utf-8")).hexdigest() if key else None,
        "losses": sorted([d.topic, d.partition, d.first, d.detail] for found in start.losses.values() for d in found),
        "chain_seeds": sorted([t, s, q, seed.prev, seed.digest] for (t, s, q), seed in start.chain_seeds.items()),
        "session_seeds": sorted(
            [t, s, seed.partition, seed.status.value, seed.first_seq, seed.last_seq, seed.last_offset,
             seed.snapshot_seq, seed.snapshot_offset, seed.started_us, seed.last_event_us, seed.chain_head,
             seed.expires_ms, len(seed.rows)]
            for (t, s), seed in start.session_seeds.by_session.items()),
        "state_ddl": STATE_DDL,
        "records_ddl": records_ddl(spec.schema),
        "timestamp_pattern": RFC3339_PATTERN,
        "time_range_us": TS_RANGE_US,
        "time_range_text": TS_RANGE_TEXT,
    }


def _full_start(await_snapshot: bool) -> StepStart:
    """A start with every field set (none at its default but ``await_snapshot``)."""
    row = {"status": "timed_out", "partition": 1, "first_seq": 3, "last_seq": 9, "last_offset": 40,
           "snapshot_seq": 3, "snapshot_offset": 31, "started_us": 1_700_000_000_000_000,
           "last_event_us": 1_700_000_000_000_001, "chain_head": "sha256:" + "ef" * 32}
    rows = {"r1": (1.5, None, 50.0, "ok", 2**62, 1_700_000_000_123_456), "r2": (None, None, None, None, -1, None)}
    seeds = SessionSeeds(tuple(SCHEMA.names), {(TOPIC, "s-seeded"): SessionSeed.from_tables(row, rows, 10**15)})
    return StepStart(
        losses={(TOPIC, 1): [DataLoss(TOPIC, 1, 12, 20, "offsets 12..19 were never processed"),
                             DataLoss(TOPIC, 1, 30, 31, "offset 30 was never processed")]},
        chain_seeds={(TOPIC, "s-linked", 4): ChainSeed("", "sha256:" + "ab" * 32)},
        session_seeds=seeds, await_snapshot=await_snapshot)


def test_the_jvm_engine_reads_the_python_step_spec_field_by_field(spark):
    from reconstructor.spark.jvm_engine import engine_json, jvm_reading

    covered = set(SPEC_READING.values()) | set(START_READING.values())
    assert set(SPEC_READING) == {f.name for f in dataclasses.fields(StepSpec)}
    assert set(START_READING) == {f.name for f in dataclasses.fields(StepStart)}
    assert {k for keys in covered for k in keys} | set(CONTRACT_READING) == set(python_reading(
        StepSpec(SCHEMA, 1, 1), NO_START))
    cases = [
        (StepSpec(SCHEMA, session_timeout_ms=123_000, state_retention_ms=456_000_000, await_snapshot=True,
                  policy=IntegrityPolicy(OnViolation.QUARANTINE, OnDrift.FAIL), chain_key="k\u00e9y 1"),
         _full_start(await_snapshot=False)),
        (StepSpec(SCHEMA, session_timeout_ms=1, state_retention_ms=2, policy=IntegrityPolicy(OnViolation.FAIL, OnDrift.IGNORE)),
         _full_start(await_snapshot=True)),
        (StepSpec(SCHEMA, session_timeout_ms=3_600_000, state_retention_ms=7 * 86_400_000), NO_START),
    ]
    for spec, start in cases:
        assert jvm_reading(spark, spec, start) == python_reading(spec, start), (spec, start)
        # The key is in the document the JVM reads, and never in the spec's repr.
        if spec.chain_key:
            assert json.loads(engine_json(spec, start))["chain_key"] == spec.chain_key
            assert spec.chain_key not in repr(spec) and "chain_key" not in repr(spec)


def test_the_jvm_engine_refuses_a_spec_of_another_version(spark):
    from pyspark.errors import IllegalArgumentException

    from reconstructor.spark.jvm_engine import engine_json
    from reconstructor.spark.jvm_gateway import jvm_of

    doc = json.loads(engine_json(StepSpec(SCHEMA, 1, 1)))
    doc["version"] = "0"
    with pytest.raises(IllegalArgumentException, match='engine settings of version "0"'):
        jvm_of(spark).reconstructor.jvm.Engine.describe(json.dumps(doc))
