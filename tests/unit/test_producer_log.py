"""The demo producer's client log: an unreachable broker is one line on stderr, not a stream."""

import logging

import pytest

from workbench.producer import LIBRDKAFKA_LOG, DeliveryError, SensorProducer


def _send_to_a_closed_port() -> None:
    producer = SensorProducer("127.0.0.1:1", {"message.timeout.ms": 1500})
    producer.send("sensor-0", "sensor-0-session-0", b"{}")
    with pytest.raises(DeliveryError):
        producer.flush(10)


def test_an_unreachable_broker_is_one_error_line_and_no_raw_librdkafka_output(capfd, caplog):
    caplog.set_level(logging.WARNING)
    _send_to_a_closed_port()
    said = [r for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelno == logging.ERROR
    assert "Connection refused" in said[0].getMessage() and "\n" not in said[0].getMessage()
    assert "|rdkafka#" not in capfd.readouterr().err  # librdkafka's own %3|...| lines


def test_verbose_logging_lets_every_line_through(caplog):
    caplog.set_level(logging.INFO)
    _send_to_a_closed_port()
    assert len([r for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]) > 1
