"""The demo fleet's sensors honouring resync requests (``--resync-topic`` of ``reconstructor run``).

A sensor holds its session's table whatever Kafka lost of it. Asked for a snapshot, it publishes
that table at its session's next seq, on its session's partition; the reconstructor resyncs the
quarantined session from it. Several requests for a session with nothing sent in between are
answered by one snapshot (requests are at least once). A session the sensor has ended is not
answered: an ended session takes nothing more.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from reconstructor.kafka_admin import watermarks
from workbench.fleet import Planned, expected_tables, hash_partition
from workbench.producer import SensorProducer, encode, librdkafka_logging


@dataclass
class _Sensor:
    """What one session's sensor knows: its table, its next seq, where it publishes."""

    topic: str
    session: str
    partition: int | None
    table: dict
    next_seq: int
    last_ts: str
    answered: bool = False  # its last message is a snapshot answering a request
    ended: bool = False


@dataclass
class FleetSensors:
    """The demo fleet's sensors: each session's table and next seq as its own messages made them."""

    sensors: dict[str, _Sensor] = field(default_factory=dict)

    @classmethod
    def of(cls, held: list[Planned], sent: list[Planned], partitions: dict[str, int] | None) -> FleetSensors:
        """``held``: the sensors' own messages, their sessions' ends aside (a sensor that answers
        requests holds them back); ``sent``: what reached Kafka of them (a fault may have lost or
        broken some): the sessions answered are those ``sent`` names."""
        held = [p for p in held if p.message["type"] != "end"]
        tables = expected_tables(held)
        fleet = cls()
        named = {p.session for p in sent}
        for p in held:
            if p.session not in named:
                continue
            sensor = fleet.sensors.get(p.session)
            if sensor is None:
                part = hash_partition(p.session, partitions[p.topic]) if partitions else None
                sensor = fleet.sensors[p.session] = _Sensor(p.topic, p.session, part,
                                                            tables.get((p.topic, p.session), {}), 0, p.message["ts"])
            sensor.next_seq = max(sensor.next_seq, p.message["seq"] + 1)  # a seq the sensor gave, lost or not
            sensor.last_ts = p.message["ts"]
        return fleet

    def snapshot(self, session: str) -> Planned | None:
        """The snapshot answering a request for ``session``; None when one already answers it, the
        session has ended, or no sensor of this fleet has it."""
        s = self.sensors.get(session)
        if s is None or s.ended or s.answered:
            return None
        rows = [{"id": rid, "values": values} for rid, values in s.table.items()]
        message = {"session": session, "seq": s.next_seq, "type": "snapshot", "ts": s.last_ts, "rows": rows}
        s.next_seq += 1
        s.answered = True
        return Planned(s.topic, session, message)

    def end(self, session: str) -> Planned:
        """The session's end, at its next seq."""
        s = self.sensors[session]
        message = {"session": session, "seq": s.next_seq, "type": "end", "ts": s.last_ts}
        s.next_seq += 1
        s.ended = True
        return Planned(s.topic, session, message)


class ResyncResponder:
    """Reads ``topic`` from its end as it is when started, in a thread, and answers each request
    with ``sensors``' snapshot through ``producer``."""

    def __init__(self, bootstrap: str, topic: str, sensors: FleetSensors, producer: SensorProducer):
        self.topic, self.sensors, self.producer = topic, sensors, producer
        self.requests = self.answered = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        conf = {"bootstrap.servers": bootstrap, "group.id": f"demo-sensors-{topic}", "enable.auto.commit": False,
                **librdkafka_logging()}
        self._consumer, self._watermarks = Consumer(conf), Consumer(conf)
        parts = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._read = {p: self._end(p) for p in parts}  # the next offset to read, per partition
        self._consumer.assign([TopicPartition(topic, p, offset) for p, offset in self._read.items()])
        self._thread = threading.Thread(target=self._loop, name="resync-responder", daemon=True)

    def _end(self, partition: int) -> int:
        return watermarks(self._watermarks, self.topic, partition)[1]

    def start(self) -> ResyncResponder:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            try:
                session = json.loads(msg.value())["session"]
            except (ValueError, KeyError, TypeError):
                continue
            with self._lock:
                self.requests += 1
                answer = self.sensors.snapshot(session)
                if answer is not None:
                    s = self.sensors.sensors[session]
                    self.producer.send(answer.topic, session, encode(answer.message), s.partition)
                    self.producer.flush()
                    self.answered += 1
                self._read[msg.partition()] = msg.offset() + 1

    def caught_up(self) -> bool:
        """Every request in the topic so far has been read and answered."""
        ends = {p: self._end(p) for p in self._read}
        with self._lock:
            return all(self._read[p] >= end for p, end in ends.items())

    def settle(self, timeout_s: float = 60.0) -> None:
        """Wait until ``caught_up``."""
        deadline = time.monotonic() + timeout_s
        while not self.caught_up():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the demo's sensors did not answer {self.topic}'s requests in {timeout_s:.0f}s")
            time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()
        self._watermarks.close()
