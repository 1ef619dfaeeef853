"""The broker check before a run, against the real (PLAINTEXT) broker: it connects with the
``[kafka]`` security settings, so one that does not fit the broker is named as such, never as a
broker that does not answer."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from reconstructor.cli import validate
from reconstructor.errors import ReconstructorError
from reconstructor.kafka_admin import watermarks

pytestmark = pytest.mark.integration


def test_an_explicit_plaintext_protocol_reaches_the_broker(stack):
    validate.broker_reachable(stack.bootstrap_servers(), {"kafka.security.protocol": "PLAINTEXT"})


@pytest.mark.parametrize("protocol, words", [("SASL_SSL", "SSL handshake"), ("SASL_PLAINTEXT", "SASL")])
def test_security_settings_the_broker_does_not_speak_are_named_not_a_broker_down(stack, protocol, words):
    bootstrap = stack.bootstrap_servers()
    settings = {"kafka.security.protocol": protocol, "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                          'required username="svc" password="pw-4f1e";'}
    with pytest.raises(ReconstructorError) as err:
        validate.broker_reachable(bootstrap, settings, timeout_s=3)
    line = str(err.value)
    assert line.startswith(f"Kafka at {bootstrap} answers, but ") and "does not answer" not in line
    assert protocol in line and words in line and "pw-4f1e" not in line
    assert "\n" not in line


def test_the_run_stops_with_the_security_line_before_spark_starts(stack, tmp_path, capsys):
    from reconstructor.cli import main

    bootstrap = stack.bootstrap_servers()
    (tmp_path / "c.toml").write_text('[kafka]\n"kafka.security.protocol" = "SSL"\n')
    code = main(["run", "--config", str(tmp_path / "c.toml"), "--bootstrap-servers", bootstrap,
                 "--topic-pattern", "nothing-.*", "--output", str(tmp_path / "out"),
                 "--checkpoint", str(tmp_path / "chk")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"reconstructor: Kafka at {bootstrap} answers, but ") and "SSL" in lines[0]
    assert not (tmp_path / "chk" / "offsets").exists()


def test_the_watermarks_of_topics_created_a_moment_before_are_read_once_their_leaders_are_elected(stack):
    # A topic the broker has just created answers "not leader" or "unknown partition" for a moment;
    # the lookups of a replay (and the demo's sensors) ask again rather than fail the command.
    bootstrap = stack.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"electing-{uuid.uuid4().hex[:10]}" for _ in range(25)]
    try:
        for topic in topics:
            for fut in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
                fut.result(30)
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "electing"})
            try:
                assert [watermarks(consumer, topic, p) for p in range(3)] == [(0, 0)] * 3
            finally:
                consumer.close()
    finally:
        admin.delete_topics(topics)
