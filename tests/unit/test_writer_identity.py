"""Who may write an output (a writer is its checkpoint), and the Kafka settings the offset lookups
of `replay` use: pure decisions, no broker, no Spark."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconstructor.contract.writer import (
    CheckpointState,
    TableState,
    batch_metadata,
    data_decides,
    last_batch,
    lease_in_metadata,
    offsets_in_metadata,
    query_id_of,
    refusal,
    takeover_refusal,
)
from reconstructor.errors import UsageError
from reconstructor.kafka_admin import librdkafka_settings

NEW = CheckpointState("/chk", None, None)
STARTED = CheckpointState("/chk", "q1", None)  # started once, crashed before its first commit
RUNNING = CheckpointState("/chk", "q1", 7)


def tables(has_data: bool, writer: str | None):
    return [TableState(n, has_data, writer) for n in ("row_changes", "current_rows", "sessions")]


@pytest.mark.parametrize("checkpoint, state, allowed", [
    (NEW, [], True),  # no tables yet
    (NEW, tables(False, None), True),
    (NEW, tables(False, "q0"), True),  # claimed but never written: nothing to skip or repeat
    (NEW, tables(True, "q0"), False),  # a lost checkpoint, or a second one
    (NEW, tables(True, None), False),  # data an older version wrote
    (STARTED, tables(True, "q1"), True),  # its own first batch, re-run after a crash
    (STARTED, tables(True, None), False),
    (RUNNING, tables(True, "q1"), True),  # a restart
    (RUNNING, tables(True, None), True),  # an older version's checkpoint adopts its tables
    (RUNNING, tables(True, "q0"), False),  # an existing checkpoint over another writer's tables
    (RUNNING, tables(True, "q1")[:2] + tables(True, "q0")[2:], False),
])
def test_run_writes_only_tables_without_data_or_its_own(checkpoint, state, allowed):
    reason = refusal(checkpoint, state, "/out", replay=False)
    assert (reason is None) == allowed
    if not allowed:
        assert "/out" in reason and "reconstructor replay" in reason and "--output" in reason


def test_a_run_carries_on_from_a_replays_checkpoint_and_the_replaced_writer_is_refused():
    """After a violation, the recovery is a replay into the tables on a checkpoint of its own, then
    runs on that checkpoint: the tables list the replay, so its query may take over as writer."""
    replayed = [TableState(n, True, "q0", ("q9", "q1")) for n in ("row_changes", "current_rows", "sessions")]
    assert refusal(RUNNING, replayed, "/out", replay=False) is None
    taken_over = [TableState(n, True, "q1", ("q1",)) for n in ("row_changes", "current_rows", "sessions")]
    assert refusal(CheckpointState("/chk-main", "q0", 40), taken_over, "/out", replay=False) is not None
    # A replay that never ran on that checkpoint does not make it a writer.
    assert refusal(RUNNING, [TableState("sessions", True, "q0", ("q9",))], "/out", replay=False) is not None


def test_a_checkpoint_that_records_another_output_is_refused_whoever_wrote_the_tables():
    """An output only a replay wrote records no writer, so a committed checkpoint would adopt it:
    the checkpoint's own record of its output refuses another output's checkpoint first."""
    elsewhere = dataclasses.replace(RUNNING, output="/old")
    replayed_only = [TableState(n, True, None, ("q9",)) for n in ("row_changes", "current_rows", "sessions")]
    assert refusal(dataclasses.replace(RUNNING, output=None), replayed_only, "/new", replay=False) is None
    reason = refusal(elsewhere, replayed_only, "/new", replay=False)
    assert reason == ("the checkpoint /chk holds the progress of the output /old, not /new: give this output a "
                      "--checkpoint of its own")
    assert refusal(elsewhere, [], "/new", replay=False) is not None
    assert refusal(elsewhere, tables(True, "q1"), "/old/", replay=False) is None  # the same root
    assert refusal(dataclasses.replace(NEW, output="/old"), [], "/new", replay=True) is not None


def test_replay_writes_any_writers_tables_on_a_checkpoint_with_no_committed_batch():
    assert refusal(NEW, tables(True, "q0"), "/out", replay=True) is None
    assert refusal(STARTED, tables(True, None), "/out", replay=True) is None
    reason = refusal(RUNNING, tables(True, "q1"), "/out", replay=True)
    assert "/chk" in reason and "batches up to 7" in reason and "--checkpoint" in reason


QUERIES = st.sampled_from([None, "q0", "q1", "q2"])
CHECKPOINTS = st.builds(CheckpointState, st.just("/chk"), QUERIES, st.one_of(st.none(), st.integers(0, 9)))
STATES = st.lists(st.builds(TableState, st.sampled_from(["row_changes", "current_rows", "sessions", "violations"]),
                            st.booleans(), QUERIES, st.lists(st.sampled_from(["q0", "q1", "q2"]), max_size=2)
                            .map(tuple)), max_size=4)


@given(CHECKPOINTS, STATES, st.booleans())
def test_whether_a_table_holds_data_is_left_unread_only_where_it_decides_nothing(checkpoint, states, replay):
    """A run reads whether a table holds data (its whole Delta state, about half a second a table)
    only where ``data_decides``: the refusal, and the takeover and sessions-ahead checks that look
    at tables with replays or another writer, conclude the same without it."""
    unread = [t if data_decides(t.writer, t.replays, checkpoint.query_id) else dataclasses.replace(t, has_data=None)
              for t in states]
    assert refusal(checkpoint, unread, "/out", replay) == refusal(checkpoint, states, "/out", replay)
    mine = checkpoint.query_id
    for full, partial in zip(states, unread):
        if partial.has_data is None:  # what the takeover and sessions-ahead checks look at is read
            assert full.writer == mine and not full.replays


def test_a_table_this_query_wrote_and_no_replay_did_needs_no_data_check():
    assert not data_decides("q1", (), "q1")
    assert data_decides("q1", ("q9",), "q1")  # a replay wrote it: sessions may be ahead
    assert data_decides("q0", (), "q1") and data_decides(None, (), "q1") and data_decides(None, (), None)


def test_checkpoint_files_are_read_as_spark_writes_them():
    assert query_id_of('{"id":"6f1c-42"}\n') == "6f1c-42"
    assert last_batch(["0", "1", "12", ".12.crc", "_tmp"]) == 12
    assert last_batch([]) is None


def test_librdkafka_gets_the_connection_settings_and_translates_java_ones():
    got = librdkafka_settings({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="svc" password="p;w";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
        "kafka.client.id": "recon", "max.poll.records": "500",  # the stream's tuning: not needed
    })
    assert got == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                   "sasl.username": "svc", "sasl.password": "p;w", "ssl.ca.location": "/etc/ca.pem",
                   "ssl.endpoint.identification.algorithm": "none", "client.id": "recon"}
    assert librdkafka_settings({}) == {}
    # librdkafka's own names pass as they are.
    assert librdkafka_settings({"sasl.username": "u", "sasl.password": "p", "sasl.mechanisms": "PLAIN"}) == \
        {"sasl.username": "u", "sasl.password": "p", "sasl.mechanisms": "PLAIN"}


@pytest.mark.parametrize("settings, key", [
    ({"ssl.truststore.location": "/etc/truststore.jks"}, "ssl.truststore.location"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "sasl.jaas.config"),
    ({"ssl.keystore.location": "/etc/client.jks", "ssl.keystore.password": "s3cret"},
     "ssl.keystore.location"),
    ({"sasl.login.callback.handler.class": "com.example.Handler"}, "sasl.login.callback.handler.class"),
])
def test_a_java_only_setting_is_named_in_a_usage_error(settings, key):
    with pytest.raises(UsageError) as err:
        librdkafka_settings(settings)
    assert f"[kafka] {key}" in str(err.value) and "s3cret" not in str(err.value)


def test_a_setting_librdkafka_rejects_is_a_usage_error_naming_it():
    from reconstructor.kafka_admin import admin_client, client_or_usage_error

    with pytest.raises(UsageError) as err:
        client_or_usage_error(admin_client, "127.0.0.1:1", **{"no.such.setting": "x"})
    assert "no.such.setting" in str(err.value)


def test_a_batch_records_its_writer_and_offsets_in_each_commit_and_only_its_writers_are_read():
    meta = batch_metadata("q-1", 7, {("sensor-1", 0): 1200, ("sensor-1", 1): 40, ("sensor-2", 0): 3})
    assert offsets_in_metadata(meta, "q-1") == {("sensor-1", 0): 1200, ("sensor-1", 1): 40, ("sensor-2", 0): 3}
    assert offsets_in_metadata(meta, "q-2") is None
    assert offsets_in_metadata(None, "q-1") is None and offsets_in_metadata("not json", "q-1") is None
    assert offsets_in_metadata('{"other": 1}', "q-1") is None


def test_a_batch_written_under_a_lease_records_its_token_in_each_commit():
    leased = batch_metadata("q-1", 7, {("sensor-1", 0): 1200}, lease="5f0c")
    assert lease_in_metadata(leased) == "5f0c"
    assert offsets_in_metadata(leased, "q-1") == {("sensor-1", 0): 1200}
    assert lease_in_metadata(batch_metadata("q-1", 7, {})) is None  # no lease held (another file system)
    assert lease_in_metadata(None) is None and lease_in_metadata("not json") is None
    assert lease_in_metadata('{"reconstructor": {"lease": 3}}') is None


def test_a_takeover_behind_the_writer_on_any_partition_is_refused_naming_it_and_by_how_much():
    chk = CheckpointState("s3a://b/chk-replay", "q-replay", 4)
    written = {("sensor-1", 0): 1200, ("sensor-1", 1): 40, ("sensor-2", 0): 3}
    assert takeover_refusal("q-run", written, chk, {**written, ("sensor-3", 0): 9}, "out") is None
    assert takeover_refusal("q-run", written, chk, {tp: o + 1 for tp, o in written.items()}, "out") is None
    reason = takeover_refusal("q-run", written, chk, {("sensor-1", 0): 800, ("sensor-1", 1): 40}, "out")
    assert reason == ("the tables under out were written further by their writer, query q-run, than the "
                      "checkpoint s3a://b/chk-replay reached: sensor-1[0] up to offset 1200, the checkpoint to "
                      "800 (400 behind) and 1 more partition(s); run on the writer's own checkpoint, or replay "
                      "into the tables (it de-duplicates)")
    lacks = takeover_refusal("q-run", {("sensor-2", 0): 3}, chk, {("sensor-1", 0): 1300}, "out")
    assert "sensor-2[0] up to offset 3, which the checkpoint never read" in lacks


@pytest.mark.parametrize("states, empty", [
    ([], {"current_rows", "sessions"}),  # an output's first run: it creates the tables
    (tables(False, None), {"current_rows", "sessions"}),
    (tables(True, "q0"), set()),
    ([TableState("current_rows", None, "q1"), TableState("sessions", False, "q0")], {"sessions"}),  # None: not read
    ([TableState("row_changes", False, None)], {"current_rows", "sessions"}),
])
def test_only_a_live_table_absent_or_read_as_empty_takes_an_append_for_its_first_write(states, empty):
    from reconstructor.spark.sinks.merges import empty_live_tables

    assert empty_live_tables(states) == empty
