"""Spark Connect is refused with one line before Spark starts: the run needs a classic driver."""

import subprocess
import sys

import pytest

from reconstructor.cli.validate import classic_spark, spark_connect_asked
from reconstructor.errors import UsageError


@pytest.mark.parametrize("master, conf, environ, named", [
    ("sc://127.0.0.1:15002", {}, {}, "master sc://127.0.0.1:15002"),
    ("SC://host:443/;token=abc", {}, {}, "master sc://host:443"),
    (None, {"spark.remote": "sc://h:15002"}, {}, "[spark] spark.remote"),
    (None, {"spark.api.mode": "connect"}, {}, "[spark] spark.api.mode = connect"),
    (None, {}, {"SPARK_REMOTE": "sc://h:15002/;token=secret"}, "SPARK_REMOTE is set"),
    (None, {}, {"SPARK_CONNECT_MODE_ENABLED": "1"}, "SPARK_CONNECT_MODE_ENABLED is set"),
    ("local[2]", {}, {"SPARK_API_MODE": "Connect"}, "SPARK_API_MODE=connect"),
    (None, {}, {"SPARK_CONNECT_MODE": "1"}, "SPARK_CONNECT_MODE=1"),
])
def test_what_asks_for_spark_connect_is_named_without_its_token(master, conf, environ, named):
    assert spark_connect_asked(master, conf, environ) == named
    with pytest.raises(UsageError) as refused:
        classic_spark(master, conf, environ)
    line = str(refused.value)
    assert line.startswith(f"Spark Connect is not supported ({named}): ")
    assert "Py4J" in line and "spark-submit" in line and "\n" not in line
    assert "token" not in line and "secret" not in line


@pytest.mark.parametrize("master, conf, environ", [
    (None, {}, {}),
    ("local[*]", {}, {}),
    ("spark://127.0.0.1:7077", {}, {}),
    ("yarn", {"spark.api.mode": "classic"}, {"SPARK_API_MODE": "connect"}),  # the setting wins, as in pyspark
    (None, {}, {"SPARK_API_MODE": "classic", "SPARK_CONNECT_MODE": "1"}),
])
def test_a_classic_driver_is_let_through(master, conf, environ):
    assert spark_connect_asked(master, conf, environ) is None
    classic_spark(master, conf, environ)


RUN = ["run", "--bootstrap-servers", "127.0.0.1:1", "--topic-pattern", "sensor-.*"]


@pytest.mark.parametrize("flags, environ, named", [
    (["--master", "sc://127.0.0.1:15002"], {}, "master sc://127.0.0.1:15002"),
    ([], {"SPARK_REMOTE": "sc://127.0.0.1:15002"}, "SPARK_REMOTE is set"),
])
def test_run_on_spark_connect_exits_2_with_one_line_and_writes_nothing(tmp_path, monkeypatch, flags, environ,
                                                                        named):
    monkeypatch.chdir(tmp_path)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    out, chk = tmp_path / "out", tmp_path / "chk"
    result = subprocess.run([sys.executable, "-m", "reconstructor", *RUN, "--output", str(out),
                             "--checkpoint", str(chk), *flags], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"reconstructor: Spark Connect is not supported ({named}): ")
    assert not out.exists() and not chk.exists()
