"""The two engines as an operator meets them, on the real stack: a checkpoint keeps the engine it
started with, a new one gets the jvm engine unless told otherwise, a replay into the same output is the way over, ``state`` reads either engine's
checkpoint, and an engine jar of another version is refused before Kafka is read."""

from __future__ import annotations

import json

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.spark import jvm_engine
from reconstructor.spark.checkpoint import read_checkpoint_file
from reconstructor.spark.engines import ENGINE_FILE
from tests.support.cli import cli_in_process as cli
from tests.support.cli import refusal_line
from tests.support.pipeline import assert_exact, current_tables, produce
from workbench.fleet import FleetSpec, plan_fleet

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("spark")]
NAMES = RowSchema.load().names


def test_a_checkpoint_keeps_its_engine_a_new_one_gets_the_jvm_engine_and_a_replay_moves_the_output(
        stack, spark, run_id, tmp_path, monkeypatch):
    monkeypatch.delenv("RECON_ENGINE", raising=False)  # the suite's pin to the reference engine: off here
    spec = FleetSpec(topic_prefix=f"eng{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=20, updates=60,
                     seed=3, end_sessions=False)
    messages = list(plan_fleet(spec))
    half = len(messages) // 2
    bootstrap, pattern = stack.bootstrap_servers(), f"eng{run_id}-sensor-[0-9]+"
    out, chk, jvm_chk = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "chk-jvm")
    common = ("--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output", out)

    produce(spec, messages[:half], 2)
    ran = cli("run", *common, "--checkpoint", chk, "--engine", "python", "--compact-every", "off")
    assert ran.returncode == 0, ran.stderr[-3000:]
    # Without --engine, the python engine's checkpoint goes on under it, though a new one would not.
    ran = cli("run", *common, "--checkpoint", chk, "--compact-every", "off")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "nothing new in Kafka" in ran.stderr  # the same start as the last: its engine too
    assert read_checkpoint_file(spark, chk, ENGINE_FILE).strip() == "python"

    # The python engine's checkpoint refuses the jvm engine, before anything is read or written.
    line = refusal_line(cli("run", *common, "--checkpoint", chk, "--engine", "jvm", "--compact-every", "off"))
    assert f"checkpoint {chk} was written by the python engine" in line
    assert "--engine python" in line and "replay" in line

    # The way over: a replay into the same output on a checkpoint of its own, which then runs on as
    # the writer.  A new checkpoint with no --engine gets the jvm engine, whose jar is loaded.
    replayed = cli("replay", *common, "--checkpoint", jvm_chk, "--from", "earliest")
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert read_checkpoint_file(spark, jvm_chk, ENGINE_FILE).strip() == "jvm"
    produce(spec, messages[half:], 2, create=False)
    ran = cli("run", *common, "--checkpoint", jvm_chk, "--compact-every", "off")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert_exact(spark, out, messages, NAMES)
    assert cli("verify", "--output", out).returncode == 0

    # And the jvm engine's checkpoint refuses the python engine the same way.
    line = refusal_line(cli("run", *common, "--checkpoint", jvm_chk, "--engine", "python", "--compact-every", "off"))
    assert f"checkpoint {jvm_chk} was written by the jvm engine" in line

    # `state` reads the jvm engine's checkpoint: the session's rows are those of current_rows.
    topic, session = spec.topics()[0], messages[0].session
    shown = cli("state", "--checkpoint", jvm_chk, "--topic", topic, "--session", session, "--format", "json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    state = json.loads(shown.stdout)
    assert state["session"]["status"] == "open"
    live = current_tables(spark, out, NAMES)[(topic, session)]
    plain = [c for c in NAMES if c != "calibrated_at"]  # a time prints as text
    assert {r["row_id"]: {c: r[c] for c in plain} for r in state["rows"]} == {
        rid: {c: values[c] for c in plain} for rid, values in live.items()}


def test_an_engine_jar_of_another_version_is_refused_naming_the_rebuild(stack, run_id, tmp_path, monkeypatch):
    built = jvm_engine.ENGINE_VERSION  # the version make jars built, which the driver now does not speak
    monkeypatch.setattr(jvm_engine, "ENGINE_VERSION", "0")
    ran = cli("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", f"ver{run_id}-.*",
              "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "chk"), "--engine", "jvm",
              "--compact-every", "off")
    line = refusal_line(ran)
    assert f"reconstructor-engine.jar on the classpath is version {built}" in line and "make jars" in line
