"""The sensor side: publish a session's table with the snapshot/update pattern.

``SessionWriter`` numbers messages by ``seq`` and keys them by session id, so a session stays in one
partition and in order; the producer has idempotence on, so a retry never duplicates a message.
Delivery errors are collected and raised by ``flush()``: a sensor never believes a lost message
was sent.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

LIBRDKAFKA_LOG = logging.getLogger("librdkafka")
# What varies between librdkafka's repeats of one error: "(after 0ms in state CONNECT)", "(after
# 12ms in state UP, 3 identical error(s) suppressed)".
_ATTEMPT = re.compile(r"\s*\(after \d+ms in state [^)]*\)")


class DeliveryError(RuntimeError):
    """One or more messages were not acknowledged by the broker."""


def _rfc3339(ts: dt.datetime) -> str:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return ts.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _json_default(value: Any):
    if isinstance(value, dt.datetime):
        return _rfc3339(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, default=_json_default, separators=(",", ":")).encode()


class _OneLinePerError:
    """librdkafka's log lines through Python logging (``LIBRDKAFKA_LOG``).

    librdkafka writes its own lines to stderr (``%3|1795473152.762|FAIL|rdkafka#producer-1| ...``)
    and repeats an error at every reconnect attempt, which buries what ``produce`` and ``demo`` say.
    Unless logging is at INFO (``-v``), only errors pass, each distinct one once, as one line.
    """

    def __init__(self) -> None:
        self._said: set[str] = set()

    def log(self, level: int, fmt: str, *args) -> None:
        message = (fmt % args).replace("\n", " ")
        if not LIBRDKAFKA_LOG.isEnabledFor(logging.INFO):
            said = _ATTEMPT.sub("", message)
            if level < logging.ERROR or said in self._said:
                return
            self._said.add(said)
        LIBRDKAFKA_LOG.log(level, message)


def librdkafka_logging() -> dict[str, Any]:
    """The settings that route a confluent-kafka client's log through ``_OneLinePerError``.

    ``log_level`` is syslog's: 3 keeps librdkafka from even formatting its notices and warnings.
    """
    verbose = LIBRDKAFKA_LOG.isEnabledFor(logging.INFO)
    return {"log_level": 6 if verbose else 3, "logger": _OneLinePerError()}


class SensorProducer:
    """A confluent-kafka producer configured for the contract (idempotent, keyed, acks=all)."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any] | None = None):
        conf = {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",
            "message.max.bytes": 8_000_000,
            **librdkafka_logging(),
            **(config or {}),
        }
        self._producer = Producer(conf)
        self._errors: list[str] = []
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}] key={msg.key()!r}: {err}")

    def send(self, topic: str, key: str | bytes | None, value: bytes, partition: int | None = None,
             timestamp_ms: int | None = None) -> None:
        kwargs = {"partition": partition} if partition is not None else {}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        key_bytes = key.encode() if isinstance(key, str) else key
        while True:
            try:
                self._producer.produce(topic, key=key_bytes, value=value,
                                       on_delivery=self._on_delivery, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)  # local queue full: let deliveries drain
        self._producer.poll(0)
        self.sent += 1

    def session(self, topic: str, session: str, first_seq: int = 0,
                partition: int | None = None) -> SessionWriter:
        return SessionWriter(self, topic, session, seq=first_seq, partition=partition)

    def flush(self, timeout: float = 60.0) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            self._errors.append(f"{remaining} message(s) still undelivered after {timeout:.0f}s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError(f"{len(errors)} delivery error(s); first: {errors[0]}")


@dataclass
class SessionWriter:
    """One capture session: a snapshot first, then updates, then ``end``; ``seq`` counts them all."""

    producer: SensorProducer
    topic: str
    session: str
    seq: int = 0
    partition: int | None = None
    clock: Any = field(default=None, repr=False)  # callable returning a datetime; default: now

    def _now(self) -> dt.datetime:
        return self.clock() if self.clock else dt.datetime.now(dt.UTC)

    def message(self, type_: str, rows: list[dict]) -> dict:
        msg = {"session": self.session, "seq": self.seq, "type": type_, "ts": _rfc3339(self._now())}
        if rows or type_ == "snapshot":
            msg["rows"] = rows
        return msg

    def _send(self, type_: str, rows: list[dict]) -> dict:
        msg = self.message(type_, rows)
        self.producer.send(self.topic, self.session, encode(msg), self.partition)
        self.seq += 1
        return msg

    def snapshot(self, table: Mapping[str, Mapping[str, Any]]) -> dict:
        """The whole table: rows absent from it are gone."""
        return self._send("snapshot", [{"id": rid, "values": dict(v)} for rid, v in table.items()])

    def update(self, upserts: Mapping[str, Mapping[str, Any]] | None = None,
               deletes: Iterable[str] = ()) -> dict:
        rows = [{"id": rid, "values": dict(v)} for rid, v in (upserts or {}).items()]
        rows += [{"id": rid, "op": "delete"} for rid in deletes]
        return self._send("update", rows)

    def end(self) -> dict:
        return self._send("end", [])
