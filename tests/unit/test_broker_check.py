"""The broker check before a run connects as the stream will: with the ``[kafka]`` security
settings, ``kafka.``-prefixed or not, as librdkafka names them (the broker itself:
tests/integration/test_broker_check.py)."""

import pytest

from reconstructor.cli import validate

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="svc" password="pw";'


@pytest.fixture
def asked(monkeypatch):
    """The librdkafka settings each metadata request was made with."""
    calls = []

    def broker_metadata(bootstrap, timeout_s, conf=None):
        calls.append(conf)

    monkeypatch.setattr(validate, "broker_metadata", broker_metadata)
    return calls


@pytest.mark.parametrize("prefix", ["kafka.", ""])
def test_the_broker_check_connects_with_the_streams_security_settings(asked, prefix):
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
                "max.poll.records": "500"}  # the stream's tuning: not the check's
    validate.broker_reachable("broker-1:9093", {prefix + k: v for k, v in settings.items()})
    assert asked == [{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "svc",
                      "sasl.password": "pw", "ssl.ca.location": "/etc/ca.pem"}]


def test_the_broker_check_without_security_settings_connects_in_plaintext(asked):
    validate.broker_reachable("broker-1:9092", {"kafka.max.poll.records": "500"})
    assert asked == [{}]


@pytest.mark.parametrize("settings", [
    {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/etc/truststore.jks"},
    {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI",
     "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
])
def test_the_broker_check_is_left_to_spark_when_a_setting_has_no_librdkafka_equivalent(asked, settings):
    validate.broker_reachable("broker-1:9093", settings)  # no error: Spark's Java client has them
    assert asked == []
