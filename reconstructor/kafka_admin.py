"""confluent-kafka clients for what the command line asks Kafka without Spark: a quiet admin client
for "does the broker answer?" checks, and a consumer that reads only committed records for the
offset lookups (watermarks) and the reads of ``check`` and ``verify --against-kafka``.

librdkafka logs every refused connection to stderr; while we poll a broker that is starting, or
check one before a run, those lines are noise, so the client gets a logger that drops them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from reconstructor.errors import ReconstructorError, SecurityRefused, UsageError, error_line


class _Silent:
    def log(self, *args, **kwargs) -> None:
        pass


# Java client settings with no librdkafka equivalent that a lookup could do without: what to set.
_JAVA_ONLY = {
    "ssl.truststore.location": "ssl.ca.location (a PEM file), or ssl.truststore.type = PEM",
    "ssl.truststore.password": "ssl.ca.location (a PEM file)",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.location": "ssl.keystore.location with ssl.keystore.type = PKCS12, or "
                             "ssl.certificate.location and ssl.key.location (PEM)",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
    "sasl.jaas.config": "sasl.username and sasl.password (PLAIN or SCRAM), or librdkafka's "
                        "sasl.kerberos.* / sasl.oauthbearer.* settings",
    "sasl.login.callback.handler.class": "librdkafka's sasl.oauthbearer.* settings",
    "sasl.client.callback.handler.class": "librdkafka's sasl.* settings",
    "sasl.login.class": "librdkafka's sasl.* settings",
}
# Java-only keys that carry nothing librdkafka needs once the keys above are translated.
_DROPPED = {"ssl.truststore.type", "ssl.keystore.type", "ssl.keystore.password"}
_JAAS_LOGIN = re.compile(r"\.(?:PlainLoginModule|ScramLoginModule)\s+required\b")


def librdkafka_settings(kafka_options: Mapping[str, str]) -> dict[str, str]:
    """The ``[kafka]`` settings an offset lookup (confluent-kafka, i.e. librdkafka) needs.

    The stream's consumer is Spark's Java client; the lookups of ``replay --from-timestamp`` and
    ``--from-last-snapshot`` must reach the same cluster with the same security.  Connection
    settings (``security.*``, ``sasl.*``, ``ssl.*``, ``client.id``) pass, Java ones translated when
    librdkafka has an equivalent; tuning of the stream's consumer is not needed for a lookup.  A
    Java-only setting with no equivalent is a ``UsageError`` naming it (never its value).
    """
    opts = {k.removeprefix("kafka."): str(v) for k, v in kafka_options.items()}
    opts = {k: v for k, v in opts.items() if k.startswith(("security.", "sasl.", "ssl.")) or k == "client.id"}
    out: dict[str, str] = {}
    for key, value in opts.items():
        if key == "sasl.jaas.config" and _JAAS_LOGIN.search(value):
            for name in ("username", "password"):
                m = re.search(rf'\b{name}\s*=\s*"((?:[^"\\]|\\.)*)"', value)
                if m is None:
                    raise UsageError(f"[kafka] sasl.jaas.config names no {name}; the offset lookup "
                                     f"needs it (or set sasl.username and sasl.password)")
                out.setdefault(f"sasl.{name}", re.sub(r"\\(.)", r"\1", m.group(1)))
        elif key == "ssl.truststore.location" and opts.get("ssl.truststore.type", "").upper() == "PEM":
            out["ssl.ca.location"] = value
        elif key == "ssl.keystore.location" and opts.get("ssl.keystore.type", "").upper() == "PKCS12":
            out[key] = value
            if "ssl.keystore.password" in opts:
                out["ssl.keystore.password"] = opts["ssl.keystore.password"]
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"  # Java's "" (no host check) is librdkafka's "none"
        elif key in _JAVA_ONLY:
            raise UsageError(f"[kafka] {key} is a Java client setting librdkafka (used to look up "
                             f"replay offsets) does not have; add {_JAVA_ONLY[key]}")
        elif key not in _DROPPED:
            out[key] = value
    return out


def admin_client(bootstrap: str, **conf: Any) -> AdminClient:
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": _Silent(), **conf}
    return AdminClient(settings)


_SECURITY_CODES = frozenset({KafkaError._SSL, KafkaError._AUTHENTICATION})
# A connection that failed in the handshake, not before: TLS, SASL, or a protocol the listener
# does not speak ("connecting to a PLAINTEXT broker listener?", "... to a SSL listener?").
_HANDSHAKE = re.compile(r"SSL|SASL|security\.protocol|in state (?:SSL_HANDSHAKE|AUTH_\w+)\)")
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+\)$")


def security_failure(errors) -> str | None:
    """The reason of the handshake failure among a client's errors (``KafkaError``), the most
    telling first; None when the connections failed before any handshake (no broker answered)."""
    found = [e for e in errors if e.code() in _SECURITY_CODES or _HANDSHAKE.search(e.str())]
    if not found:
        return None
    best = min(found, key=lambda e: (e.code() not in _SECURITY_CODES, "handshake failed" not in e.str()))
    return _AFTER.sub("", best.str())


def broker_metadata(bootstrap: str, timeout_s: float, conf: Mapping[str, str] | None = None):
    """Cluster metadata, or raises ``confluent_kafka.KafkaException`` when no broker answers,
    ``SecurityRefused`` when one answers but the handshake with ``conf``'s security fails.

    ``conf``: librdkafka settings (see ``librdkafka_settings``)."""
    errors: list = []
    client = client_or_usage_error(admin_client, bootstrap, **{
        "socket.timeout.ms": int(timeout_s * 1000), "error_cb": errors.append, **(conf or {})})
    try:
        return client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        failed = exc
    client.poll(0)  # the connections' errors, told to error_cb
    reason = security_failure(errors)
    # Raised outside the handler: the failure's line must not carry list_topics' "Failed to get
    # metadata", which reads as a broker that does not answer.
    raise SecurityRefused(reason) if reason is not None else failed


def client_or_usage_error(make, *args, **conf):
    """A confluent-kafka client; a setting librdkafka rejects is a ``UsageError`` naming it."""
    try:
        return make(*args, **conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise UsageError(f"librdkafka rejects the [kafka] settings: "
                         f"{exc}") from None


def reading_consumer(bootstrap: str, kafka_options: Mapping[str, str], group: str, **conf: Any) -> Consumer:
    """A consumer that reads only what was committed, with the ``[kafka]`` settings, and commits
    no offset of its own (``group`` names it to the broker): the command line's offset lookups and
    the reads of ``check`` and ``verify --against-kafka``.  ``conf``: more librdkafka settings."""
    return client_or_usage_error(Consumer, {
        **librdkafka_settings(kafka_options), "bootstrap.servers": bootstrap, "group.id": group,
        "enable.auto.commit": False, "isolation.level": "read_committed", **conf})


# What a broker answers for a partition whose leader is being elected (a topic created a moment
# before, a broker that restarts): it will answer again once the election is over.
_ELECTING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                       KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})


def watermarks(consumer: Consumer, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, int]:
    """A partition's low and high watermarks, asked of its leader; while the partition has none
    (it is being elected) the lookup is asked again until ``timeout_s`` has passed, then the last
    ``KafkaException`` is raised."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=max(0.5, deadline - time.monotonic()),
                                                       cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or error.code() not in _ELECTING or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def watermark_bounds(bootstrap: str, kafka_options: Mapping[str, str], partitions: dict[str, list[int]],
                     group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's earliest offset and its end (high watermark), as Kafka holds them now; a
    partition whose lookup fails is an error naming it."""
    consumer = reading_consumer(bootstrap, kafka_options, group)
    try:
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, parts in partitions.items():
            for p in parts:
                try:
                    out[(topic, p)] = watermarks(consumer, topic, p)
                except Exception as exc:  # noqa: BLE001 - librdkafka's KafkaException, named per partition
                    raise ReconstructorError(f"cannot find the offsets of {topic} partition {p}: "
                                             f"{error_line(exc)}") from None
        return out
    finally:
        consumer.close()
