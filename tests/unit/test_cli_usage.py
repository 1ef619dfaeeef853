"""Bad usage exits 2 (or 1 for an unreachable broker) with one clear line, before anything starts."""

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
    (BASE + ["--output", "OUT", "--checkpoint", "CHK"], 1, "Kafka at 127.0.0.1:1 does not answer"),
    (BASE + ["--output", "OUT", "--checkpoint", "CHK", "--session-timeout", "2 hours",
             "--state-retention", "1 hour"], 2, "--state-retention '1 hour' must be longer than --session-timeout"),
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
    for command in ("run", "replay", "compact", "state", "produce", "demo", "config"):
        assert command in result.stdout
    assert "examples:" in result.stdout
    run_help = cli("run", "--help").stdout
    for flag in ("--bootstrap-servers", "--topic-pattern", "--output", "--checkpoint", "--trigger",
                 "--starting-offsets", "--max-offsets-per-trigger", "--session-timeout", "--config"):
        assert flag in run_help
