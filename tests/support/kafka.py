"""Helpers for integration tests against the real local broker."""

from __future__ import annotations

import json

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)
                                   for t, n in topics.items()])
    for topic, fut in futures.items():
        fut.result(30)


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
