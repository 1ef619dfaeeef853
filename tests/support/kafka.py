"""Helpers for integration tests against the real local broker."""

from __future__ import annotations

import json

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)
                                   for t, n in topics.items()])
    for fut in futures.values():
        fut.result(30)


def read_all(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[tuple[str | None, dict]]:
    """Every record of ``topic`` (all partitions, up to their high watermarks): its key and JSON value."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-all-{topic}",
                         "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s) for p in parts}
        wanted = {p: hi for p, (lo, hi) in ends.items() if hi > lo}
        consumer.assign([TopicPartition(topic, p, lo) for p, (lo, hi) in ends.items() if hi > lo])
        out = []
        while wanted:
            msg = consumer.poll(timeout_s)
            assert msg is not None, f"{topic}: no record within {timeout_s}s, {wanted} still to read"
            assert msg.error() is None, msg.error()
            out.append((msg.key().decode() if msg.key() is not None else None, json.loads(msg.value())))
            if msg.offset() + 1 >= wanted.get(msg.partition(), 0):
                wanted.pop(msg.partition(), None)
        return out
    finally:
        consumer.close()


def send(bootstrap: str, topic: str, session: str, messages: list[dict]) -> None:
    """Publish ``messages`` of one session, keyed by it, in this order, to partition 0."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for m in messages:
        value = {"session": session, "ts": "2026-11-23T10:00:00Z", "rows": [], **m}
        producer.produce(topic, key=session.encode(), value=json.dumps(value).encode(), partition=0)
    assert producer.flush(30) == 0


def snapshot(seq: int) -> dict:
    return {"seq": seq, "type": "snapshot", "rows": [{"id": "a", "values": {"status": "x"}}]}


def update(seq: int, status: str) -> dict:
    return {"seq": seq, "type": "update", "rows": [{"id": "a", "values": {"status": status}}]}
