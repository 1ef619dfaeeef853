"""Recovery after a violation: the producer resends what was lost, `replay --from-last-snapshot`
rebuilds every table exactly into the same output (no change repeated)."""

from __future__ import annotations

import pytest

from reconstructor.cli import main as cli_main
from reconstructor.fleet import FleetSpec, plan_fleet, publish
from reconstructor.producer import SensorProducer
from reconstructor.schema import RowSchema
from tests.integration.pipeline_support import (current_tables, expected_all, produce, read_table,
                                                replayed_tables, run)
from tests.integration.test_reconstruct_pipeline import _change_count, _expected_open

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names


def test_replay_from_last_snapshot_after_the_producer_resends_rebuilds_every_table(
        stack, spark, run_id, tmp_path, capsys):
    spec = FleetSpec(topic_prefix=f"rc{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=20,
                     updates=160, seed=17, end_sessions=False, resync_every=60)
    messages = list(plan_fleet(spec))
    half = len(messages) // 2
    victim = next(i for i in range(half + 40, len(messages)) if messages[i].message["type"] == "update")
    lost = messages[victim]
    bootstrap = stack.bootstrap_servers()
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    pattern = f"rc{run_id}-sensor-[0-9]+"

    produce(spec, messages[:half], 2)
    run(spark, pattern, out, chk)
    publish(SensorProducer(bootstrap), messages[half:victim] + messages[victim + 1:],
            {t: 2 for t in spec.topics()})
    # `run` stops with exit 3 and the design's line naming the record.
    code = cli_main(["run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", chk, "--compact-every", "off"])
    assert code == 3
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("reconstructor: INTEGRITY VIOLATION GAP") and f"found_seq={lost.message['seq'] + 1}" in last

    publish(SensorProducer(bootstrap), [lost], {t: 2 for t in spec.topics()})  # the resend
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
                     "--output", out, "--from-last-snapshot"])
    assert code == 0, capsys.readouterr().err[-2000:]
    err = capsys.readouterr().err
    assert "replaying from {" in err and "offsets/s" in err

    assert current_tables(spark, out, NAMES) == _expected_open(messages)
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)
    changes = read_table(spark, out, "row_changes")
    assert changes.count() == _change_count(messages)  # nothing the first run wrote is repeated
    sessions = read_table(spark, out, "sessions").collect()
    assert {r.last_seq for r in sessions} == {max(p.message["seq"] for p in messages)}
