"""The peer a user would write instead of the reconstructor: one Python process, no Spark.

confluent-kafka reads every partition of the matching topics to the offsets that existed at the
start, ``json.loads`` each record, applies the same snapshot/update rules with the same integrity
checks (key = session, no gap, no duplicate, snapshot first, same partition, nothing after end, no
unknown-row delete) to plain dicts, and appends the same ``row_changes`` rows to a Delta table with
delta-rs (``deltalake.write_deltalake``, partitioned by ``hour``), a write every ``flush_rows`` rows.
It is the honest single-process baseline: straightforward per-message Python code.

``run_peer_continuous`` is the same peer as a live consumer: it applies records as they arrive and
writes what it has every ``interval`` seconds, logging each write as one JSON line (the fleet
capacity benchmark reads it as the peer's batches).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections import defaultdict

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from deltalake import write_deltalake

from reconstructor.contract.row_schema import RowSchema


class PeerViolation(RuntimeError):
    pass


def _ts(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


class DictReconstructor:
    """Per-session dict tables and the integrity rules, one message at a time."""

    def __init__(self, schema: RowSchema):
        self.schema = schema
        self.names = schema.names
        self.casts = {c.name: (_ts if c.type == "timestamp" else None) for c in schema.columns}
        self.sessions: dict[tuple[str, str], dict] = {}
        self.out: dict[str, list] = defaultdict(list)
        self.rows_out = 0

    def _emit(self, topic, partition, offset, m, row_id, op, values, kafka_ts, hour):
        o = self.out
        o["topic"].append(topic), o["partition"].append(partition), o["offset"].append(offset)
        o["session"].append(m["session"]), o["seq"].append(m["seq"]), o["type"].append(m["type"])
        o["row_id"].append(row_id), o["op"].append(op)
        for c in self.names:
            v = values.get(c) if values else None
            cast = self.casts[c]
            o[c].append(cast(v) if cast and v is not None else v)
        o["event_ts"].append(_ts(m["ts"])), o["kafka_ts"].append(kafka_ts), o["hour"].append(hour)
        self.rows_out += 1

    def apply(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes,
              kafka_ts_ms: int) -> str:
        where = f"topic={topic} partition={partition} offset={offset}"
        try:
            m = json.loads(value)
        except ValueError:
            raise PeerViolation(f"MALFORMED {where}: not JSON") from None
        session, seq, kind = m.get("session"), m.get("seq"), m.get("type")
        if key is None or key.decode() != session:
            raise PeerViolation(f"MALFORMED {where}: key != session")
        st = self.sessions.get((topic, session))
        if st is None:
            if kind != "snapshot":
                raise PeerViolation(f"NO_SNAPSHOT {where} session={session}")
            st = self.sessions[(topic, session)] = {"partition": partition, "next": seq, "table": {},
                                                    "ended": False}
        if st["ended"]:
            raise PeerViolation(f"AFTER_END {where} session={session}")
        if st["partition"] != partition:
            raise PeerViolation(f"PARTITION_MOVED {where} session={session}")
        if seq < st["next"]:
            raise PeerViolation(f"DUPLICATE {where} session={session} expected_seq={st['next']} found_seq={seq}")
        if seq > st["next"]:
            raise PeerViolation(f"GAP {where} session={session} expected_seq={st['next']} found_seq={seq}")
        st["next"] = seq + 1
        kafka_ts = dt.datetime.fromtimestamp(kafka_ts_ms / 1000, dt.UTC)
        hour = kafka_ts.strftime("%Y-%m-%d-%H")
        table = st["table"]
        if kind == "snapshot":
            new = {r["id"]: r.get("values") or {} for r in m.get("rows", [])}
            for rid in table.keys() - new.keys():
                self._emit(topic, partition, offset, m, rid, "delete", None, kafka_ts, hour)
            for rid, values in new.items():
                self._emit(topic, partition, offset, m, rid, "upsert", values, kafka_ts, hour)
            st["table"] = new
        elif kind == "update":
            for r in m.get("rows", []):
                rid, op = r["id"], r.get("op", "upsert")
                if op == "delete":
                    if rid not in table:
                        raise PeerViolation(f"UNKNOWN_ROW {where} session={session} row={rid}")
                    del table[rid]
                    self._emit(topic, partition, offset, m, rid, "delete", None, kafka_ts, hour)
                else:
                    table[rid] = r.get("values") or {}
                    self._emit(topic, partition, offset, m, rid, "upsert", table[rid], kafka_ts, hour)
        elif kind == "end":
            st["ended"] = True
        else:
            raise PeerViolation(f"MALFORMED {where}: type {kind!r}")
        return kind

    def take(self) -> pa.Table:
        arrow = {c.name: c.arrow_type for c in self.schema.columns}
        types = {"partition": pa.int32(), "offset": pa.int64(), "seq": pa.int64(),
                 "event_ts": pa.timestamp("us", tz="UTC"), "kafka_ts": pa.timestamp("us", tz="UTC"), **arrow}
        table = pa.table({k: pa.array(v, type=types.get(k, pa.string())) for k, v in self.out.items()})
        self.out = defaultdict(list)
        return table


def run_peer(bootstrap: str, pattern: str, output: str, schema: RowSchema, flush_rows: int = 200_000,
             group: str = "peer") -> dict:
    """Consume to the end offsets of the start, reconstruct, write; return counters."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    regex = re.compile(f"^(?:{pattern})$")
    topics = [t for t in consumer.list_topics(timeout=10).topics if regex.match(t)]
    meta = consumer.list_topics(timeout=10).topics
    ends = {}
    for t in topics:
        for p in meta[t].partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)
            if high > 0:
                ends[(t, p)] = high
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    core = DictReconstructor(schema)
    remaining, messages, updates = dict(ends), 0, 0
    while remaining:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error():
                raise RuntimeError(msg.error())
            tp = (msg.topic(), msg.partition())
            if tp not in remaining:
                continue
            kind = core.apply(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                              msg.timestamp()[1])
            messages += 1
            updates += kind == "update"
            if msg.offset() + 1 >= remaining[tp]:
                del remaining[tp]
        if len(core.out.get("topic", ())) >= flush_rows:
            write_deltalake(output, core.take(), mode="append", partition_by=["hour"])
    if core.out:
        write_deltalake(output, core.take(), mode="append", partition_by=["hour"])
    consumer.close()
    return {"messages": messages, "updates": updates, "row_changes": core.rows_out}


def run_peer_continuous(bootstrap: str, pattern: str, output: str, schema: RowSchema, interval: float,
                        log_path: str, stop: threading.Event, group: str = "peer") -> dict:
    """Consume the matching topics (as they are at the start) from the beginning until ``stop`` is
    set; every ``interval`` seconds append what was rebuilt to the Delta table and log the write:
    ``{"batch", "started", "committed", "duration", "end_offsets": {topic: {partition: next}},
    "messages", "rows"}`` (times as Unix seconds; ``duration`` is the busy time since the last write:
    applying records plus writing).  Returns counters."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    regex = re.compile(f"^(?:{pattern})$")
    meta = consumer.list_topics(timeout=10).topics
    consumer.assign([TopicPartition(t, p, 0) for t in meta if regex.match(t) for p in meta[t].partitions])
    core = DictReconstructor(schema)
    next_offsets: dict[str, dict[str, int]] = defaultdict(dict)
    messages = updates = batch = since_write = 0
    busy = 0.0
    next_write = time.time() + interval
    with open(log_path, "a", encoding="utf-8") as log:
        while not stop.is_set():
            records = consumer.consume(num_messages=10_000, timeout=min(0.5, max(0.0, next_write - time.time())))
            began = time.perf_counter()
            for msg in records:
                if msg.error():
                    raise RuntimeError(msg.error())
                kind = core.apply(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                  msg.timestamp()[1])
                next_offsets[msg.topic()][str(msg.partition())] = msg.offset() + 1
                messages += 1
                since_write += 1
                updates += kind == "update"
            busy += time.perf_counter() - began
            now = time.time()
            if now < next_write:
                continue
            began = time.perf_counter()
            rows = len(core.out.get("topic", ()))
            if rows:
                write_deltalake(output, core.take(), mode="append", partition_by=["hour"])
            busy += time.perf_counter() - began
            committed = time.time()
            log.write(json.dumps({"batch": batch, "started": committed - busy, "committed": committed,
                                  "duration": busy, "end_offsets": next_offsets, "messages": since_write,
                                  "rows": rows}) + "\n")
            log.flush()
            batch, since_write, busy = batch + 1, 0, 0.0
            while next_write <= now:  # a write that overran waits for the next boundary
                next_write += interval
    consumer.close()
    return {"messages": messages, "updates": updates, "row_changes": core.rows_out, "writes": batch}
