"""Helpers for integration tests against the real local broker."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)
                                   for t, n in topics.items()])
    for topic, fut in futures.items():
        fut.result(30)
