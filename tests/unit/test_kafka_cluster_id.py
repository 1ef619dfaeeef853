"""The local broker's cluster id: Kafka's storage tool reads one that starts with '-' as an option."""

from __future__ import annotations

import uuid

from workbench import localstack


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    drawn = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x10" * 16)])
    monkeypatch.setattr(localstack.uuid, "uuid4", lambda: next(drawn))
    cluster_id = localstack._kafka_cluster_id()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
