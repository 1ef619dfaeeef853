"""Bad usage exits 2 (or 1 for an unreachable broker) with one clear line, before anything starts."""

import datetime as dt
import subprocess
import sys

import pytest

BASE = ["run", "--bootstrap-servers", "127.0.0.1:1", "--topic-pattern", "sensor-.*"]


def cli(*args, tmp_path=None):
    return subprocess.run([sys.executable, "-m", "reconstructor", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, code, words", [
    (["run", "--no-such-flag"], 2, "unrecognized arguments: --no-such-flag"),
    (["run", "--topic-pattern", "sensor-("], 2, "missing --bootstrap-servers"),
    (["run", "--bootstrap-servers", "h:1", "--topic-pattern", "sensor-(", "--output", "OUT",
      "--checkpoint", "CHK"], 2, "is not a valid regex"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK", "--starting-offsets", "{oops"], 2,
     "--starting-offsets must be earliest, latest or JSON offsets"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK", "--starting-offsets", '{"t": {"0": "x"}}'], 2,
     "is not a partition number with an offset"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK", "--trigger", "sometimes"], 2, "not a duration"),
    (BASE + ["--output", "/proc/forbidden/out", "--checkpoint", "CHK"], 2, "is not writable"),
    (BASE + ["--output", "OUT`x`", "--checkpoint", "CHK"], 2,
     "cannot create tables at a path with a back-quote (`): choose another path"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK"], 1, "Kafka at 127.0.0.1:1 does not answer"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK", "--session-timeout", "2 hours",
             "--state-retention", "1 hour"], 2, "--state-retention '1 hour' must be longer than --session-timeout"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK", "--resync-topic", "sensor-resync"], 2,
     "--resync-topic 'sensor-resync' is matched by --topic-pattern 'sensor-.*': the run would read its own"),
])
def test_bad_usage_fails_with_one_line_and_writes_nothing(tmp_path, monkeypatch, args, code, words):
    monkeypatch.chdir(tmp_path)
    args = [a.replace("OUT", str(tmp_path / "out")).replace("CHK", str(tmp_path / "chk")) for a in args]
    result = cli(*args)
    assert result.returncode == code, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert words in lines[0]
    assert "Traceback" not in result.stderr
    # Nothing was written: no table, no checkpoint.
    assert not (tmp_path / "out" / "row_changes").exists() and not (tmp_path / "chk" / "offsets").exists()


def test_help_lists_every_command_with_examples():
    result = cli("--help")
    assert result.returncode == 0
    for command in ("run", "replay", "compact", "state", "verify", "asof", "config"):
        assert command in result.stdout
    assert "examples:" in result.stdout
    run_help = cli("run", "--help").stdout
    for flag in ("--bootstrap-servers", "--topic-pattern", "--output", "--checkpoint", "--trigger",
                 "--starting-offsets", "--max-offsets-per-trigger", "--session-timeout", "--config"):
        assert flag in run_help


def _main(capsys, *args) -> tuple[int, list[str]]:
    """``reconstructor.cli.main`` (the entry point) in this process: its exit code and its stderr lines."""
    from reconstructor.cli import main

    code = main(list(args))
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _run_args(tmp_path, *extra):
    return [*BASE, "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "chk"), *extra]



def _duration_args(tmp_path, flag_or_setting: str, value: str, *config_flags: str) -> tuple[list, str]:
    """``run``'s arguments setting one duration, by its flag or (a setting ``run`` takes from
    ``--config`` only) in a config file; and the flag a message names it by."""
    if flag_or_setting.startswith("--"):
        return _run_args(tmp_path, flag_or_setting, value), flag_or_setting
    (tmp_path / "c.toml").write_text(f'{flag_or_setting} = "{value}"\n')
    flag = "--grace" if flag_or_setting == "compact_grace" else "--" + flag_or_setting.replace("_", "-")
    return _run_args(tmp_path, "--config", str(tmp_path / "c.toml"), *config_flags), flag

# Every duration but --grace must be longer than zero: a zero session timeout fails at the first
# batch, a zero compaction interval spins, a zero trigger interval or VACUUM retention is a typo.
@pytest.mark.parametrize("flag_or_setting, value", [
    ("--session-timeout", "0s"),
    ("--session-timeout", "0 seconds"),
    ("--trigger", "0 seconds"),
    ("--compact-every", "0s"),
    ("vacuum_retention", "0 hours"),
])
def test_a_zero_duration_is_refused_with_one_line_naming_the_flag(tmp_path, monkeypatch, capsys,
                                                                 flag_or_setting, value):
    monkeypatch.chdir(tmp_path)
    args, flag = _duration_args(tmp_path, flag_or_setting, value, "--unsafe-vacuum-retention")
    code, lines = _main(capsys, *args)
    assert code == 2, lines
    assert len(lines) == 1 and flag in lines[0] and value in lines[0], lines
    assert not (tmp_path / "chk" / "offsets").exists()


# A duration longer than any wait can be (a timer's, a sleep's, a date's) is a typo, refused
# before anything starts rather than an OverflowError in a thread or in Spark.
@pytest.mark.parametrize("flag_or_setting, value", [
    ("--trigger", "999999999999999 days"),
    ("--trigger", "1000000000 days"),
    ("--session-timeout", "99999999999999999999 ms"),
    ("--state-retention", "1" + "0" * 400 + " days"),
    ("--compact-every", "1000000 days"),
    ("--restart-backoff", "999999999999999 hours"),
    ("compact_grace", "999999999999 minutes"),
    ("vacuum_retention", "999999999999999 days"),
])
def test_a_duration_too_long_to_wait_is_refused_with_one_line_naming_the_flag(tmp_path, monkeypatch, capsys,
                                                                             flag_or_setting, value):
    monkeypatch.chdir(tmp_path)
    args, flag = _duration_args(tmp_path, flag_or_setting, value)
    code, lines = _main(capsys, *args)
    assert code == 2, lines
    assert len(lines) == 1 and flag in lines[0] and value in lines[0] and "too long" in lines[0], lines
    assert not (tmp_path / "chk" / "offsets").exists()


@pytest.mark.parametrize("column", ["row_pos", "Topic", "value"])
def test_a_row_schema_column_named_as_the_pipelines_own_is_refused_with_one_line(tmp_path, monkeypatch, capsys,
                                                                                column):
    monkeypatch.chdir(tmp_path)
    schema = tmp_path / "mine.json"
    schema.write_text('{"name": "mine", "columns": [{"name": "temperature", "type": "double"}, '
                      f'{{"name": "{column}", "type": "string"}}]}}')
    code, lines = _main(capsys, *_run_args(tmp_path, "--row-schema", str(schema)))
    assert code == 2, lines
    assert len(lines) == 1 and f"column name '{column}' is reserved" in lines[0] and str(schema) in lines[0], lines
    assert not (tmp_path / "chk" / "offsets").exists()


def test_a_zero_grace_is_accepted_an_hour_closes_right_at_its_end(tmp_path, monkeypatch, capsys):
    # Validation passes the durations and stops at the next check, the unwritable output.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('compact_grace = "0 seconds"\n')
    code, lines = _main(capsys, *BASE, "--output", "/proc/forbidden/out", "--checkpoint", "chk",
                        "--config", str(tmp_path / "c.toml"))
    assert code == 2 and len(lines) == 1 and "is not writable" in lines[0], lines


def test_compact_refuses_a_vacuum_retention_under_168_hours(tmp_path, capsys):
    code, lines = _main(capsys, "compact", "--output", str(tmp_path / "out"), "--vacuum-retention", "24 hours")
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert "--vacuum-retention" in lines[0] and "24 hours" in lines[0]
    assert "--unsafe-vacuum-retention" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["flag", "file", "env"])
def test_run_refuses_a_short_vacuum_retention_unless_told_it_is_unsafe(tmp_path, monkeypatch, capsys, how):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECON_UNSAFE_VACUUM_RETENTION", raising=False)
    (tmp_path / "c.toml").write_text('vacuum_retention = "1 hour"\n')
    args = [*BASE, "--output", "/proc/forbidden/out", "--checkpoint", "chk", "--config", str(tmp_path / "c.toml")]
    code, lines = _main(capsys, *args)
    assert code == 2 and len(lines) == 1 and "--unsafe-vacuum-retention" in lines[0], lines

    if how == "flag":
        args.append("--unsafe-vacuum-retention")
    elif how == "file":
        (tmp_path / "c.toml").write_text('vacuum_retention = "1 hour"\nunsafe_vacuum_retention = true\n')
    else:
        monkeypatch.setenv("RECON_UNSAFE_VACUUM_RETENTION", "true")
    code, lines = _main(capsys, *args)
    # Accepted: validation goes on to the next check, the unwritable output.
    assert code == 2 and len(lines) == 1 and "is not writable" in lines[0], lines


def test_compact_accepts_a_short_vacuum_retention_with_the_unsafe_flag():
    from reconstructor.cli import validate
    from reconstructor.settings import Duration

    assert validate.vacuum_retention(Duration("24 hours"), unsafe=True) == dt.timedelta(hours=24)
    assert validate.vacuum_retention(Duration("168 hours"), unsafe=False) == dt.timedelta(hours=168)


def test_every_command_that_vacuums_documents_the_unsafe_flag_and_its_risk():
    for command in (["run"], ["replay"], ["compact"], ["config", "show"]):
        text = " ".join(cli(*command, "--help").stdout.split())
        assert "--unsafe-vacuum-retention" in text, command
        assert "reader or a concurrent writer still needs" in text, command


def test_verify_and_asof_have_help_with_examples():
    result = cli("--help")
    assert "verify" in result.stdout and "asof" in result.stdout
    for command, flags in (("verify", ("--output", "--topic-pattern", "--against-kafka", "--bootstrap-servers")),
                           ("asof", ("--output", "--topic", "--session", "--at", "--seq", "--format"))):
        shown = cli(command, "--help")
        assert shown.returncode == 0 and "examples:" in shown.stdout
        assert all(flag in shown.stdout for flag in flags)


@pytest.mark.parametrize("args, words", [
    (["verify"], "missing --output"),
    (["verify", "--output", "OUT", "--topic-pattern", "sensor-("], "is not a valid regex"),
    (["verify", "--output", "OUT", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["verify", "--output", "OUT", "--against-kafka"], "missing --bootstrap-servers"),
    (["verify", "--output", "OUT", "--against-kafka", "--bootstrap-servers", "127.0.0.1:1"],
     "Kafka at 127.0.0.1:1 does not answer"),
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s"], "one of the arguments --at --seq is required"),
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s", "--seq", "1", "--at", "2026-11-21T10:00:00Z"],
     "not allowed with argument"),
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s", "--seq", "x"], "invalid int value"),
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s", "--at", "yesterday"],
     "--at 'yesterday' is not an RFC 3339 timestamp"),
    # A time of day alone, or a date-time without its offset, names no instant.
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s", "--at", "10:30:00"],
     "--at '10:30:00' is not an RFC 3339 timestamp"),
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s", "--at", "2026-11-20T10:30:00"],
     "--at '2026-11-20T10:30:00' is not an RFC 3339 timestamp"),
    (["asof", "--output", "OUT", "--topic", "t", "--session", "s", "--seq", "1", "--format", "xml"],
     "invalid choice: 'xml'"),
])
def test_verify_and_asof_bad_usage_exits_2_with_one_line(tmp_path, monkeypatch, capsys, args, words):
    monkeypatch.chdir(tmp_path)
    args = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    try:
        code, lines = _main(capsys, *args)
    except SystemExit as stop:  # argparse's own refusals
        code, lines = stop.code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, lines
    assert len(lines) == 1 and words in lines[0], lines


def test_verify_of_an_output_with_no_tables_exits_1_naming_the_table(tmp_path, capsys):
    code, lines = _main(capsys, "verify", "--output", str(tmp_path / "empty"))
    assert code == 1 and lines == [f"reconstructor: no Delta table sessions under {tmp_path / 'empty'}"]


@pytest.mark.parametrize("command", ["run", "replay"])
def test_a_kafka_table_cannot_read_uncommitted_records(tmp_path, capsys, command):
    """Aborted transactions are never data: ``[kafka] isolation.level`` is the contract's, not a
    setting."""
    config = tmp_path / "recon.toml"
    config.write_text('[kafka]\n"isolation.level" = "read_uncommitted"\n')
    args = ["--bootstrap-servers", "127.0.0.1:1", "--topic-pattern", "sensor-.*", "--output",
            str(tmp_path / "out"), "--config", str(config)]
    args += ["--checkpoint", str(tmp_path / "chk")] + (["--from", '{"sensor-1": {"0": -2}}'] if command == "replay" else [])
    code, lines = _main(capsys, command, *args)
    assert code == 2, lines
    assert lines == ["reconstructor: [kafka] isolation.level cannot be changed: the reconstructor reads "
                     "only committed records (isolation.level = read_committed)"], lines


def test_the_command_line_loads_no_pandas_before_a_run_starts_its_driver_jvm():
    """A scheduled run pays its imports before its driver JVM starts; pandas (about half a second)
    is loaded beside that start, by the modules that drive Spark, not by the command line's own."""
    probe = ("import sys, reconstructor.cli.app, reconstructor.cli.commands\n"
             "print(sorted(m for m in ('pandas', 'pyspark') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded
