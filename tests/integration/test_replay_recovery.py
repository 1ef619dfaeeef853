"""Replays on the real stack: a lost message resent later is still a GAP (Kafka order is the
order), and a replay into the same tables on a checkpoint of its own is exact, after which the
stream carries on from the replay's checkpoint and the replaced checkpoint is refused."""

from __future__ import annotations

import pytest

from reconstructor.cli import main as cli_main
from reconstructor.devstack.fleet import FleetSpec, plan_fleet, publish
from reconstructor.devstack.producer import SensorProducer
from reconstructor.schema import RowSchema
from tests.support.pipeline import (change_count, current_tables, expected_all, expected_open,
                                                produce, read_table, replayed_tables, run)

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names


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
    messages = list(plan_fleet(spec))
    half = len(messages) // 2
    bootstrap = stack.bootstrap_servers()
    out, chk, replay_chk = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "chk-replay")
    pattern = f"rc{run_id}-sensor-[0-9]+"

    produce(spec, messages[:half], 2)
    run(spark, pattern, out, chk)
    publish(SensorProducer(bootstrap), messages[half:], {t: 2 for t in spec.topics()})
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
                     "--output", out, "--checkpoint", replay_chk, "--from-last-snapshot"])
    assert code == 0, capsys.readouterr().err[-2000:]
    err = capsys.readouterr().err
    assert "replaying from {" in err and "offsets/s" in err

    assert current_tables(spark, out, NAMES) == expected_open(messages, NAMES)
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)
    assert read_table(spark, out, "row_changes").count() == change_count(messages)  # nothing repeated
    sessions = read_table(spark, out, "sessions").collect()
    assert {r.last_seq for r in sessions} == {max(p.message["seq"] for p in messages)}

    # The stream carries on from the replay's checkpoint, exactly; the replaced checkpoint is
    # refused from then on (it would re-read what the replay wrote under another writer's id).
    more = list(plan_fleet(FleetSpec(topic_prefix=spec.topic_prefix, sensors=2, sessions_per_sensor=3,
                                     rows=5, updates=10, seed=18, end_sessions=False)))
    later = [p for p in more if p.session.endswith("-2")]
    publish(SensorProducer(bootstrap), later, {t: 2 for t in spec.topics()})
    code = cli_main(["run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", replay_chk, "--compact-every", "off"])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert replayed_tables(spark, out, NAMES) == expected_all(messages + later, NAMES)
    assert read_table(spark, out, "row_changes").count() == change_count(messages) + change_count(later)
    code = cli_main(["run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", chk, "--compact-every", "off"])
    assert code == 2
    assert "reconstructor replay" in capsys.readouterr().err.strip().splitlines()[-1]
