"""The restart policy of a continuous run: which failures restart, how long it waits, and how the
attempts are counted and earned back."""

import datetime as dt
import subprocess
import sys

import pytest

from reconstructor import settings as config
from reconstructor.core import ViolationKind, ViolationRecord
from reconstructor.errors import IntegrityViolationError, ReconstructorError, UsageError
from reconstructor.spark.restarts import (
    BACKOFF_CAP,
    DEFAULT_RESTART_ATTEMPTS,
    Restarts,
    attempts_for,
    backoff,
    batch_committed,
    transient,
)

SECOND = dt.timedelta(seconds=1)
RAN = {"batchId": 7, "durationMs": {"addBatch": 120, "triggerExecution": 300}}
IDLE = {"batchId": 8, "durationMs": {"latestOffset": 3, "triggerExecution": 3}}


def violation_error() -> IntegrityViolationError:
    return IntegrityViolationError(ViolationRecord(
        kind=ViolationKind.GAP, topic="sensor-1", partition=0, offset=9, session="s", expected_seq=4,
        found_seq=5, detail="gap"))


@pytest.mark.parametrize("exc", [
    ReconstructorError("the streaming query failed: Cannot fetch record for offset 42"),
    RuntimeError("py4j: Connection refused"),
    OSError("timed out"),
])
def test_a_failure_of_the_broker_storage_or_engine_restarts(exc):
    assert transient(exc)
    assert Restarts(3, SECOND).after(exc) == SECOND


@pytest.mark.parametrize("exc", [violation_error(), UsageError("bad flag"), KeyboardInterrupt(),
                                 SystemExit(1)])
def test_a_violation_a_usage_error_or_an_interrupt_never_restarts(exc):
    assert not transient(exc)
    restarts = Restarts(5, SECOND)
    assert restarts.after(exc) is None
    assert restarts.used == 0


def test_the_backoff_doubles_from_the_first_wait_up_to_the_cap():
    first = 2 * SECOND
    waits = [backoff(n, first) for n in range(1, 9)]
    assert waits[:5] == [2 * SECOND, 4 * SECOND, 8 * SECOND, 16 * SECOND, 32 * SECOND]
    assert waits[5:] == [BACKOFF_CAP] * 3
    assert backoff(10_000, first) == BACKOFF_CAP  # no overflow however long it runs


def test_a_first_wait_longer_than_the_cap_stays_the_wait():
    assert backoff(1, dt.timedelta(minutes=5)) == dt.timedelta(minutes=5)
    assert backoff(4, dt.timedelta(minutes=5)) == dt.timedelta(minutes=5)


def test_attempts_are_spent_then_the_run_gives_up():
    restarts = Restarts(2, SECOND)
    failure = ReconstructorError("S3 endpoint http://127.0.0.1:9000 does not answer")
    assert restarts.after(failure) == SECOND
    assert restarts.after(failure) == 2 * SECOND
    assert restarts.after(failure) is None
    assert restarts.used == 2


def test_zero_attempts_never_restart():
    assert Restarts(0, SECOND).after(ReconstructorError("broker down")) is None


def test_a_committed_batch_earns_every_attempt_back_and_an_idle_trigger_does_not():
    restarts = Restarts(2, SECOND)
    failure = ReconstructorError("broker down")
    restarts.after(failure)
    restarts.after(failure)
    restarts.progressed(IDLE)
    restarts.progressed(None)
    assert restarts.after(failure) is None
    restarts.progressed(RAN)
    assert restarts.after(failure) == SECOND  # the backoff starts over too
    assert (batch_committed(RAN), batch_committed(IDLE), batch_committed({})) == (True, False, False)


def test_only_a_continuous_run_restarts_unless_attempts_are_set():
    interval = config.Trigger("30 seconds")
    assert attempts_for(interval, None) == DEFAULT_RESTART_ATTEMPTS == 5
    assert attempts_for(config.AVAILABLE_NOW, None) == 0
    assert attempts_for(config.Trigger("once"), None) == 0
    assert attempts_for(config.AVAILABLE_NOW, 3) == 3
    assert attempts_for(interval, 0) == 0


def test_the_restart_line_is_one_line_naming_the_attempt_wait_and_cause():
    restarts = Restarts(5, 2 * SECOND)
    delay = restarts.after(ReconstructorError("x"))
    line = restarts.line(delay, ReconstructorError("the streaming query failed:\n  Cannot fetch\trecord"))
    assert line == "restart 1/5 in 2s after: the streaming query failed: Cannot fetch record"
    assert Restarts(1, dt.timedelta(milliseconds=500)).line(dt.timedelta(milliseconds=500), "x") == \
        "restart 0/1 in 0.5s after: x"


# --- the settings ---------------------------------------------------------------------------------


def test_restart_settings_default_to_unset_attempts_and_a_two_second_backoff():
    cfg = config.load(None, env={})
    assert cfg.restart_attempts is None
    assert cfg.restart_backoff == 2 * SECOND


def test_restart_settings_come_from_file_env_and_flags_in_that_order(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('restart_attempts = 7\nrestart_backoff = "10 seconds"\n')
    cfg = config.load(str(f), env={})
    assert (cfg.restart_attempts, cfg.restart_backoff) == (7, 10 * SECOND)
    cfg = config.load(str(f), env={"RECON_RESTART_ATTEMPTS": "0", "RECON_RESTART_BACKOFF": "500ms"})
    assert (cfg.restart_attempts, cfg.restart_backoff) == (0, dt.timedelta(milliseconds=500))
    cfg = config.load(str(f), env={"RECON_RESTART_ATTEMPTS": "0"},
                      flags={"restart_attempts": 2, "restart_backoff": "1 minute"})
    assert (cfg.restart_attempts, cfg.restart_backoff) == (2, dt.timedelta(minutes=1))
    assert 'restart_backoff = "1 minute"' in cfg.to_toml()


@pytest.mark.parametrize("layer, message", [
    ({"RECON_RESTART_ATTEMPTS": "-1"}, "restart_attempts must be zero or more"),
    ({"RECON_RESTART_ATTEMPTS": "many"}, "restart_attempts must be a whole number"),
    ({"RECON_RESTART_BACKOFF": "soon"}, "--restart-backoff: not a duration"),
    ({"RECON_RESTART_BACKOFF": "0 seconds"}, "--restart-backoff '0 seconds' must be longer than zero"),
])
def test_a_bad_restart_setting_is_a_usage_error(layer, message):
    with pytest.raises(UsageError, match=message):
        config.load(None, env=layer)


@pytest.mark.parametrize("flags, words", [
    (["--restart-attempts", "-2"], "flags: restart_attempts must be zero or more, got -2"),
    (["--restart-attempts", "lots"], "argument --restart-attempts: invalid int value: 'lots'"),
    (["--restart-backoff", "a while"], "--restart-backoff: not a duration: 'a while'"),
])
def test_a_bad_restart_flag_exits_2_with_one_line(tmp_path, flags, words):
    result = subprocess.run(
        [sys.executable, "-m", "reconstructor", "run", "--bootstrap-servers", "127.0.0.1:1",
         "--topic-pattern", "sensor-.*", "--output", str(tmp_path / "out"), "--checkpoint",
         str(tmp_path / "chk"), "--trigger", "1 minute", *flags],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_config_show_prints_the_restart_settings(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "reconstructor", "config", "show", "--restart-attempts", "0",
         "--restart-backoff", "5 seconds"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "restart_attempts = 0" in result.stdout
    assert 'restart_backoff = "5 seconds"' in result.stdout
