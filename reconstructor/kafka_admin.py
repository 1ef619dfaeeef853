"""A quiet confluent-kafka admin client, for "does the broker answer?" checks.

librdkafka logs every refused connection to stderr; while we poll a broker that is starting, or
check one before a run, those lines are noise, so the client gets a logger that drops them.
"""

from __future__ import annotations


class _Silent:
    def log(self, *args, **kwargs) -> None:
        pass


def admin_client(bootstrap: str, **conf):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "logger": _Silent(), **conf})


def broker_metadata(bootstrap: str, timeout_s: float):
    """Cluster metadata, or raises ``confluent_kafka.KafkaException`` when no broker answers."""
    return admin_client(bootstrap, **{"socket.timeout.ms": int(timeout_s * 1000)}).list_topics(timeout=timeout_s)
