"""A writer is its checkpoint: a lost or second checkpoint over written tables is refused (exit 2),
the same checkpoint spelled differently continues exactly, and `replay` never moves the main
checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconstructor.contract.row_schema import RowSchema

# The CLI in this process, over the suite's SparkSession: the process boundary is not their subject.
from tests.support.cli import cli_in_process as cli
from tests.support.cli import refusal_line
from tests.support.pipeline import assert_exact, current_tables, expected_open, produce, run, table_versions
from workbench.fleet import FleetSpec, plan_fleet

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("spark")]
NAMES = RowSchema.load().names
TABLES = ("row_changes", "current_rows", "sessions")


def _fleet(prefix: str):
    spec = FleetSpec(topic_prefix=prefix, sensors=1, sessions_per_sensor=2, rows=12, updates=40,
                     seed=23, end_sessions=False)
    messages = list(plan_fleet(spec))
    return spec, messages, len(messages) // 2


def _run(bootstrap, pattern, out, chk):
    return cli("run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
               "--checkpoint", chk, "--compact-every", "off")




def test_a_checkpoint_recreated_at_the_same_path_is_refused_and_the_tables_stay(
        stack, spark, run_id, tmp_path):
    spec, messages, half = _fleet(f"wlost{run_id}-sensor-")
    pattern, bootstrap = f"wlost{run_id}-sensor-[0-9]+", stack.bootstrap_servers()
    out, chk = str(tmp_path / "out"), tmp_path / "chk"
    produce(spec, messages[:half], 2)
    first = _run(bootstrap, pattern, out, str(chk))
    assert first.returncode == 0, first.stderr[-2000:]
    before = table_versions(spark, out)

    shutil.rmtree(chk)
    chk.mkdir()
    produce(spec, messages[half:], 2, create=False)
    line = refusal_line(_run(bootstrap, pattern, out, str(chk)))
    assert "replay" in line and "--output" in line and out in line
    assert table_versions(spark, out) == before  # not one commit: refused before reading Kafka
    assert current_tables(spark, out, NAMES) == expected_open(messages[:half], NAMES)


def test_a_second_checkpoint_over_written_tables_is_refused_and_the_first_goes_on(
        stack, spark, run_id, tmp_path):
    spec, messages, half = _fleet(f"wtwo{run_id}-sensor-")
    pattern, bootstrap = f"wtwo{run_id}-sensor-[0-9]+", stack.bootstrap_servers()
    out, chk, other = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "other-chk")
    produce(spec, messages[:half], 2)
    assert _run(bootstrap, pattern, out, chk).returncode == 0
    before = table_versions(spark, out)

    produce(spec, messages[half:], 2, create=False)
    refusal_line(_run(bootstrap, pattern, out, other))
    assert table_versions(spark, out) == before

    resumed = _run(bootstrap, pattern, out, chk)  # the tables' own writer continues
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_exact(spark, out, messages, NAMES)
    # Each batch's commits name the lease they were written under: one per run, the last the
    # lease the output keeps (released).
    from reconstructor.contract.lease import LEASE_NAME, FileLeaseStore
    from reconstructor.contract.writer import lease_in_metadata, offsets_in_metadata

    commits = [r["userMetadata"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{out}/row_changes`").collect()]
    tokens = [lease_in_metadata(m) for m in commits if offsets_in_metadata(m, None) is not None]
    assert tokens and None not in tokens and len(set(tokens)) == 2, tokens
    kept, _ = FileLeaseStore(Path(out) / LEASE_NAME).read()
    assert kept is not None and tokens[0] == kept.token  # the history is newest first


def test_the_same_s3a_checkpoint_with_a_trailing_slash_continues_exactly(spark, stack, run_id):
    spec, messages, half = _fleet(f"wslash{run_id}-sensor-")
    pattern = f"wslash{run_id}-sensor-[0-9]+"
    root = f"s3a://{stack.S3_BUCKET}/it/{run_id}"
    out, chk = f"{root}/out", f"{root}/chk"
    produce(spec, messages[:half], 2)
    run(spark, pattern, out, chk)
    produce(spec, messages[half:], 2, create=False)
    run(spark, pattern, out, chk + "/")
    assert_exact(spark, out, messages, NAMES)


def test_replay_with_the_main_config_leaves_the_main_checkpoint_alone(stack, spark, run_id, tmp_path):
    spec, messages, half = _fleet(f"wreplay{run_id}-sensor-")
    pattern, bootstrap = f"wreplay{run_id}-sensor-[0-9]+", stack.bootstrap_servers()
    main_out, main_chk = str(tmp_path / "main"), str(tmp_path / "main-chk")
    config = tmp_path / "prod.toml"
    config.write_text(f'bootstrap_servers = "{bootstrap}"\ntopic_pattern = "{pattern}"\n'
                      f'output = "{main_out}"\ncheckpoint = "{main_chk}"\ncompact_every = "off"\n'
                      '[kafka]\n"security.protocol" = "PLAINTEXT"\n')
    produce(spec, messages[:half], 2)
    first = cli("run", "--config", str(config))
    assert first.returncode == 0, first.stderr[-2000:]

    produce(spec, messages[half:], 2, create=False)
    # A replay's own --checkpoint must hold no committed batch: the main one is refused.
    line = refusal_line(cli("replay", "--config", str(config), "--checkpoint", main_chk,
                        "--output", str(tmp_path / "refused"), "--from-timestamp", "2000-01-01T00:00:00Z"))
    assert main_chk in line
    replay_out = str(tmp_path / "replay")
    # A time before 1970 is the earliest offset, not one of Kafka's special timestamps (-1 is latest).
    replayed = cli("replay", "--config", str(config), "--output", replay_out,
                   "--from-timestamp", "1969-12-31T23:59:59.999Z")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert f"{main_chk} is left alone" in replayed.stderr
    assert_exact(spark, replay_out, messages, NAMES)
    # The replay's output records no writer; the main checkpoint is the main output's all the same.
    line = refusal_line(cli("run", "--config", str(config), "--output", replay_out))
    assert line == (f"reconstructor: the checkpoint {main_chk} holds the progress of the output {main_out}, not "
                    f"{replay_out}: give this output a --checkpoint of its own"), line

    again = cli("run", "--config", str(config))
    assert again.returncode == 0, again.stderr[-2000:]
    assert_exact(spark, main_out, messages, NAMES)


def test_a_run_on_a_replays_checkpoint_behind_the_writer_is_refused_naming_how_far_behind(
        stack, spark, run_id, tmp_path, capsys, monkeypatch):
    """A replay's checkpoint takes over as writer only at or past where the writer got to: each
    batch's commits record its offsets.  Behind, it would append again what the writer wrote; and
    the writer's last commit is found however many commits came after it (here more than the first
    look at the history reads)."""
    from reconstructor.cli import main as cli_main
    from reconstructor.spark.sinks import history

    spec, messages, half = _fleet(f"wstale{run_id}-sensor-")
    pattern, bootstrap = f"wstale{run_id}-sensor-[0-9]+", stack.bootstrap_servers()
    out, chk, replay_chk = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "chk-replay")
    produce(spec, messages[:half], 2)
    run(spark, pattern, out, chk)
    code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                     "--checkpoint", replay_chk, "--from", "earliest"])
    assert code == 0, capsys.readouterr().err[-2000:]
    produce(spec, messages[half:], 2, create=False)
    run(spark, pattern, out, chk)  # the writer goes on past the replay
    monkeypatch.setattr(history, "HISTORY_SEARCHED", 2)
    for name in ("row_changes", "current_rows", "sessions", "violations"):
        for i in range(3):  # commits by no writer after the writer's last: it is past the first look
            spark.sql(f"ALTER TABLE delta.`{out}/{name}` SET TBLPROPERTIES ('test.after' = '{i}')")
    before = table_versions(spark, out)


    def refused_takeover() -> str:
        """A run on the replay's checkpoint, refused (exit 2): its one line."""
        capsys.readouterr()
        code = cli_main(["run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out,
                         "--checkpoint", replay_chk, "--compact-every", "off"])
        assert code == 2
        return capsys.readouterr().err.strip().splitlines()[-1]

    line = refused_takeover()
    assert line.startswith(f"reconstructor: the tables under {out} were written further by their writer, query ")
    assert f"than the checkpoint {replay_chk} reached: {spec.topics()[0]}[" in line and " behind)" in line
    assert table_versions(spark, out) == before
    assert_exact(spark, out, messages, NAMES)

    # Once Delta's log cleanup has removed the writer's commits (a checkpoint, then every commit
    # file before it), how far it got cannot be told: refused, not taken as "no writer ahead".
    for name in ("row_changes", "current_rows", "sessions", "violations"):
        log = Path(out) / name / "_delta_log"
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(log.parent)).checkpoint()
        last = max(int(f.stem) for f in log.glob("*.json"))
        for f in log.glob("*.json"):
            if int(f.stem) < last:
                f.unlink()
    before = table_versions(spark, out)
    line = refused_takeover()
    assert line.startswith(f"reconstructor: the tables under {out} no longer hold the commits of their writer, "
                           "query "), line
    assert line.endswith(f"so the checkpoint {replay_chk} cannot take over from it; replay into a new output "
                         "instead"), line
    assert table_versions(spark, out) == before
