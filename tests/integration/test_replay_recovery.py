"""Replays on the real stack: a lost message resent later is still a GAP (Kafka order is the
order), and a replay into the same tables on a checkpoint of its own is exact, after which the
stream carries on from the replay's checkpoint and the replaced checkpoint is refused."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from reconstructor.cli import main as cli_main
from reconstructor.contract.row_schema import RowSchema
from tests.support.pipeline import (
    change_count,
    current_tables,
    expected_all,
    expected_open,
    produce,
    read_table,
    replayed_tables,
    run,
)
from workbench.fleet import FleetSpec, Planned, expected_tables, plan_fleet, publish, sensor_snapshot
from workbench.producer import SensorProducer

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names
#: The replays into a live output run keyed: each must leave the fleet seal as the tables stand.
KEY = "replay-recovery-chain-key"


def test_a_lost_message_resent_after_later_seqs_is_a_gap_for_run_and_replay_alike(
        stack, spark, run_id, tmp_path, capsys):
    spec = FleetSpec(topic_prefix=f"rl{run_id}-sensor-", sensors=1, sessions_per_sensor=2, rows=10,
                     updates=60, seed=17, end_sessions=False)
    messages = list(plan_fleet(spec))
    victim = next(i for i in range(len(messages) // 2, len(messages)) if messages[i].message["type"] == "update")
    lost = messages[victim]
    bootstrap = stack.bootstrap_servers()
    out, pattern = str(tmp_path / "out"), f"rl{run_id}-sensor-[0-9]+"
    produce(spec, messages[:victim] + messages[victim + 1:], 2)
    publish(SensorProducer(bootstrap), [lost], {t: 2 for t in spec.topics()})  # the resend, too late

    lines = []
    for args in (["run", "--checkpoint", str(tmp_path / "chk")],
                 ["replay", "--checkpoint", str(tmp_path / "chk-replay"), "--from-last-snapshot"]):
        code = cli_main([*args, "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out])
        assert code == 3
        lines.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert lines[0] == lines[1]
    assert lines[0].startswith("reconstructor: INTEGRITY VIOLATION GAP") and \
        f"expected_seq={lost.message['seq']} found_seq={lost.message['seq'] + 1}" in lines[0]


def test_a_replay_into_the_tables_is_exact_and_the_stream_carries_on_from_its_checkpoint(
        stack, spark, run_id, tmp_path, capsys):
    spec = FleetSpec(topic_prefix=f"rc{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=20,
                     updates=160, seed=17, end_sessions=False, resync_every=60)
    planned = list(plan_fleet(spec))
    half = len(planned) // 2
    messages, drifted = with_a_drift_that_drops_a_row(planned, half)
    bootstrap = stack.bootstrap_servers()
    out, chk, replay_chk = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "chk-replay")
    pattern = f"rc{run_id}-sensor-[0-9]+"

    produce(spec, messages[:half], 2)
    run(spark, pattern, out, chk, chain_key=KEY)
    publish(SensorProducer(bootstrap), messages[half:], {t: 2 for t in spec.topics()})
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
                     "--output", out, "--checkpoint", replay_chk, "--from-last-snapshot", "--chain-key", KEY])
    assert code == 0, capsys.readouterr().err[-2000:]
    err = capsys.readouterr().err
    assert "replaying from {" in err and "offsets/s" in err

    assert current_tables(spark, out, NAMES) == expected_open(messages, NAMES)
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)
    assert read_table(spark, out, "row_changes").count() == change_count(messages)  # nothing repeated
    sessions = read_table(spark, out, "sessions").collect()
    assert {r.last_seq for r in sessions} == {max(p.message["seq"] for p in messages)}
    # The replay's chains continue those the tables hold from the snapshots it started at, the one
    # whose digest covers a row the live run dropped included.
    drifts = read_table(spark, out, "violations").where("kind = 'SNAPSHOT_DRIFT'").collect()
    assert (drifted.session, drifted.message["seq"]) in {(d.session, d.found_seq) for d in drifts}, drifts
    assert cli_main(["verify", "--output", out, "--chain-key", KEY]) == 0, capsys.readouterr().err[-2000:]
    verified = capsys.readouterr().out
    assert " in 4 chains" in verified and "fleet: 4 session rows and " in verified, verified

    # The stream carries on from the replay's checkpoint, exactly; the replaced checkpoint is
    # refused from then on (it would re-read what the replay wrote under another writer's id).
    more = list(plan_fleet(FleetSpec(topic_prefix=spec.topic_prefix, sensors=2, sessions_per_sensor=3,
                                     rows=5, updates=10, seed=18, end_sessions=False)))
    later = [p for p in more if p.session.endswith("-2")]
    before_later = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    time.sleep(1.5)  # Kafka's timestamps of the later records are past ``before_later`` by a second
    publish(SensorProducer(bootstrap), later, {t: 2 for t in spec.topics()})
    code = cli_main(["run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", replay_chk, "--compact-every", "off", "--chain-key", KEY])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert replayed_tables(spark, out, NAMES) == expected_all(messages + later, NAMES)
    assert read_table(spark, out, "row_changes").count() == change_count(messages) + change_count(later)
    code = cli_main(["run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", chk, "--compact-every", "off", "--chain-key", KEY])
    assert code == 2
    assert "reconstructor replay" in capsys.readouterr().err.strip().splitlines()[-1]

    # A replay from a time, of the sessions that started after it, into the same output: it finds
    # every change there already, and the output, its fleet seal included, verifies as before.
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", str(tmp_path / "chk-time"), "--chain-key", KEY,
                     "--from-timestamp", before_later.isoformat().replace("+00:00", "Z")])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert read_table(spark, out, "row_changes").count() == change_count(messages) + change_count(later)
    capsys.readouterr()
    assert cli_main(["verify", "--output", out, "--chain-key", KEY]) == 0, capsys.readouterr().err[-2000:]
    assert "fleet: 6 session rows and " in capsys.readouterr().out


def with_a_drift_that_drops_a_row(messages: list[Planned], before: int) -> tuple[list[Planned], Planned]:
    """The messages where one session's last update before ``before`` is a snapshot of the
    sensor's table, and the update before it deleted a row but reached Kafka without its rows: the
    live run's snapshot drops that row (a ``row_pos = -1`` delete, in the snapshot's digest), which
    a replay from that snapshot into an empty table does not make.  Returns the messages and that
    snapshot."""
    session = messages[0].session
    updates = [j for j in range(before) if messages[j].session == session and messages[j].message["type"] == "update"]
    victim, at = updates[-2], updates[-1]
    assert all(messages[j].session != session for j in range(victim + 1, at))
    topic = messages[victim].topic
    row = min(expected_tables(messages[:victim])[(topic, session)])
    # The row is gone for good: later messages of the session no longer name it.
    truth = [p if p.session != session or j <= victim else
             Planned(p.topic, p.session, {**p.message, "rows": [r for r in p.message.get("rows", []) if r["id"] != row]})
             for j, p in enumerate(messages)]
    truth[victim] = Planned(topic, session, {**messages[victim].message, "rows": [{"id": row, "op": "delete"}]})
    out = list(truth)
    out[victim] = Planned(topic, session, {**messages[victim].message, "rows": []})
    out[at] = sensor_snapshot(truth, at)
    return out, out[at]


def test_a_replay_from_named_partitions_reads_those_alone_and_from_last_snapshot_only_matching_topics(
        stack, spark, run_id, tmp_path, capsys):
    """``replay --from`` with one partition of a pattern that matches more reads exactly that
    partition (the README's own example); ``--from-last-snapshot`` plans only the topics that
    ``--topic-pattern`` matches, whatever else the sessions table holds."""
    spec = FleetSpec(topic_prefix=f"rn{run_id}-sensor-", sensors=2, sessions_per_sensor=6, rows=5,
                     updates=12, seed=19, end_sessions=False)
    messages = produce(spec, list(plan_fleet(spec)), 2)
    bootstrap = stack.bootstrap_servers()
    out, pattern = str(tmp_path / "out"), f"rn{run_id}-sensor-[0-9]+"
    run(spark, pattern, out, str(tmp_path / "chk"))
    where = {(r.topic, r.session): r.partition for r in read_table(spark, out, "sessions").collect()}
    # A topic whose sessions keyed onto both partitions (each session's partition is its key's hash).
    topic = next(t for t in spec.topics() if {p for (tt, _), p in where.items() if tt == t} == {0, 1})
    other = next(t for t in spec.topics() if t != topic)
    on_p0 = {s for (t, s), p in where.items() if (t, p) == (topic, 0)}

    named = str(tmp_path / "named")
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", named,
                     "--checkpoint", str(tmp_path / "chk-named"), "--from", f'{{"{topic}": {{"0": 0}}}}'])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert {(r.topic, r.session) for r in read_table(spark, named, "sessions").collect()} == \
        {(topic, s) for s in on_p0}
    want = {k: t for k, t in expected_all(messages, NAMES).items() if k[0] == topic and k[1] in on_p0}
    assert replayed_tables(spark, named, NAMES) == want

    # A topic --topic-pattern does not match is no partition to assign: refused before Spark starts.
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", topic, "--output", named,
                     "--checkpoint", str(tmp_path / "chk-other"), "--from", f'{{"{other}": {{"0": 0}}}}'])
    assert code == 2
    assert "--topic-pattern" in capsys.readouterr().err.strip().splitlines()[-1]

    capsys.readouterr()
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", topic, "--output", out,
                     "--checkpoint", str(tmp_path / "chk-last"), "--from-last-snapshot"])
    assert code == 0, capsys.readouterr().err[-2000:]
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("replaying from "))
    planned = json.loads(line.removeprefix("replaying from ").split(" into ")[0])
    assert set(planned) == {topic}


def test_a_replay_into_the_same_output_never_moves_a_session_or_a_row_backwards_even_when_it_fails(
        stack, spark, run_id, tmp_path, capsys):
    """The live run (quarantine mode) times one session out and quarantines another; a replay
    from the start into the same output, in small batches, then fails on the violation the live
    run set aside.  Every batch it wrote was behind the tables: nothing of theirs moved back."""
    from tests.support.kafka import create_topics, send, snapshot, update

    bootstrap, topic = stack.bootstrap_servers(), f"rb{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    send(bootstrap, topic, "quiet", [snapshot(0), update(1, "q1")])
    send(bootstrap, topic, "moving", [snapshot(0), *[update(s, f"m{s}") for s in range(1, 6)], update(7, "m7")])
    run(spark, topic, out, chk, on_violation="quarantine", session_timeout="6 seconds", chain_key=KEY)
    time.sleep(8)  # quiet is silent past its timeout; another session's batch fires it
    send(bootstrap, topic, "other", [snapshot(0)])
    run(spark, topic, out, chk, on_violation="quarantine", session_timeout="6 seconds", chain_key=KEY)

    def tables():
        sessions = {r.session: (r.status, r.last_seq, r.last_offset)
                    for r in read_table(spark, out, "sessions").collect()}
        rows = sorted((r.session, r.row_id, r.status, r.offset) for r in read_table(spark, out, "current_rows").collect())
        return sessions, rows

    live = tables()
    assert live[0] == {"quiet": ("timed_out", 1, 1), "moving": ("quarantined", 5, 7), "other": ("open", 0, 9)}
    assert [r[0] for r in live[1]] == ["other"]

    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", topic, "--output", out,
                     "--checkpoint", str(tmp_path / "chk-replay"), "--from", f'{{"{topic}": {{"0": 0}}}}',
                     "--max-offsets-per-trigger", "3", "--chain-key", KEY])
    assert code == 3, capsys.readouterr().err[-2000:]  # the GAP the live run set aside stops it
    assert "INTEGRITY VIOLATION GAP" in capsys.readouterr().err
    assert tables() == live
    # Stopped partway, every batch it wrote behind the tables: the fleet seal is as the run left it.
    assert cli_main(["verify", "--output", out, "--chain-key", KEY]) == 0, capsys.readouterr().err[-2000:]
    assert "fleet: 3 session rows and " in capsys.readouterr().out

    # The engine switch: a replay from the last snapshots, then runs on its checkpoint.  Every
    # session whose snapshot lies before the replay's start starts from what the tables hold, with
    # its status: a timed-out one resumes, an ended one re-sent whole is AFTER_END.
    send(bootstrap, topic, "other", [{"seq": 1, "type": "end"}])
    send(bootstrap, topic, "done", [snapshot(0), {"seq": 1, "type": "end"}])
    send(bootstrap, topic, "late", [snapshot(0)])  # the only open session: the replay starts at it
    run(spark, topic, out, chk, on_violation="quarantine", session_timeout="6 seconds", chain_key=KEY)
    switched = str(tmp_path / "chk-switch")
    stream = ["--bootstrap-servers", bootstrap, "--topic-pattern", topic, "--output", out, "--chain-key", KEY]
    code = cli_main(["replay", *stream, "--checkpoint", switched, "--from-last-snapshot", "--engine", "jvm"])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert f'"{topic}": {{"0": 13}}' in capsys.readouterr().err  # late's snapshot
    send(bootstrap, topic, "quiet", [update(2, "q2")])
    code = cli_main(["run", *stream, "--checkpoint", switched, "--engine", "jvm", "--compact-every", "off"])
    assert code == 0, capsys.readouterr().err[-2000:]
    sessions, rows = tables()
    assert sessions["quiet"] == ("open", 2, 14) and ("quiet", "a", "q2", 14) in rows
    assert sessions["moving"] == ("quarantined", 5, 7) and sessions["done"][0] == "ended"
    assert cli_main(["verify", "--output", out, "--chain-key", KEY]) == 0, capsys.readouterr().err[-2000:]
    send(bootstrap, topic, "done", [snapshot(0), {"seq": 1, "type": "end"}])  # re-sent whole
    capsys.readouterr()
    code = cli_main(["run", *stream, "--checkpoint", switched, "--engine", "jvm", "--compact-every", "off"])
    assert code == 3
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "INTEGRITY VIOLATION AFTER_END" in line and "session=done" in line and "offset=15" in line, line


def test_a_replay_of_sessions_whose_snapshots_left_kafka_is_exact_in_small_batches_under_both_engines(
        stack, spark, run_id, tmp_path, capsys):
    """Two open sessions, their snapshots deleted from the topic after a run: a replay from the
    last snapshots starts both from the tables, and in batches of 7 records each finds the records
    the tables hold in several batches.  It applies only what came after them, sets nothing
    aside, and a second replay (the JVM engine) finds everything held."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from tests.support.kafka import create_topics, send, snapshot, update

    bootstrap, topic = stack.bootstrap_servers(), f"rs{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    out = str(tmp_path / "out")
    send(bootstrap, topic, "a", [snapshot(0), *[update(s, f"a{s}") for s in range(1, 6)]])  # offsets 0..5
    send(bootstrap, topic, "b", [snapshot(0)])  # 6
    send(bootstrap, topic, "a", [update(s, f"a{s}") for s in range(6, 21)])  # 7..21
    send(bootstrap, topic, "b", [update(s, f"b{s}") for s in range(1, 11)])  # 22..31
    run(spark, topic, out, str(tmp_path / "chk"), chain_key=KEY)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, 7)]).values():  # both snapshots gone
        fut.result(30)
    send(bootstrap, topic, "a", [update(21, "a21")])  # 32
    send(bootstrap, topic, "b", [{"seq": 11, "type": "end"}])  # 33

    def tables():
        sessions = {r.session: (r.status, r.last_seq, r.last_offset)
                    for r in read_table(spark, out, "sessions").collect()}
        rows = sorted((r.session, r.row_id, r.status, r.offset) for r in read_table(spark, out, "current_rows").collect())
        changes = sorted((r.session, r.seq) for r in read_table(spark, out, "row_changes").collect())
        return sessions, rows, changes, read_table(spark, out, "violations").count()

    exact = ({"a": ("open", 21, 32), "b": ("ended", 11, 33)}, [("a", "a", "a21", 32)],
             sorted([("a", s) for s in range(22)] + [("b", s) for s in range(11)]), 0)
    stream = ["--bootstrap-servers", bootstrap, "--topic-pattern", topic, "--output", out, "--chain-key", KEY,
              "--from-last-snapshot", "--max-offsets-per-trigger", "7"]
    for engine in ("python", "jvm"):
        capsys.readouterr()
        code = cli_main(["replay", *stream, "--checkpoint", str(tmp_path / f"chk-{engine}"), "--engine", engine])
        assert code == 0, capsys.readouterr().err[-2000:]
        assert f'"{topic}": {{"0": 7}}' in capsys.readouterr().err  # no open session's snapshot left
        assert tables() == exact, engine
    assert cli_main(["verify", "--output", out, "--chain-key", KEY]) == 0, capsys.readouterr().err[-2000:]
