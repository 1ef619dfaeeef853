"""What the CLI prints on the real stack: its own lines only (progress, the result, one line for a
failure), Spark's and the JVM's with ``-v``; a storage or broker failure is one line naming the
setting to fix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from tests.integration.test_verdicts import send, snapshot, update
from tests.support.cli import ArgumentScan
from tests.support.kafka import create_topics

pytestmark = pytest.mark.integration

# The lines a command prints itself on stderr.
OWN_LINES = [
    # run's progress
    re.compile(r"^batch \d+: [\d,]+ records in [\d.]+s"
               r"(; [\d,]+ more waiting( \(the batch read its cap: --max-offsets-per-trigger [\d,]+\))?)?$"),
    re.compile(r"^batch \d+: [\d,]+/[\d,]+ offsets \( *[\d.]+%\), [\d,]+ offsets/s, \S+ left$"),  # replay's
    re.compile(r"^replaying from \{.*\} into \S+ \(checkpoint \S+.*\)$"),
]
# What Spark, log4j, SLF4J, the JVM, Delta and py4j print when left alone.
ENGINE_LINE = re.compile(r"\b(WARN|INFO|ERROR|DEBUG)\b|SLF4J|log4j|WARNING|^Setting default log level|"
                         r"^To adjust logging level|^Deleted \d+ files|py4j|^\d\d/\d\d/\d\d \d\d:\d\d:\d\d")


def cli(*args: str, env: dict[str, str | None] | None = None, timeout: float = 1500):
    """The CLI as an operator runs it: the engine's log level left to the CLI; ``env`` entries
    set to ``None`` are removed."""
    environ = {**os.environ, "RECON_SPARK_LOG_LEVEL": None, **(env or {})}
    return subprocess.run([sys.executable, "-m", "reconstructor", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={k: v for k, v in environ.items() if v is not None})


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_only_own_lines(ran) -> None:
    for line in lines(ran.stderr):
        assert not ENGINE_LINE.search(line), f"not the CLI's own line: {line!r}\n{ran.stderr[-3000:]}"
        assert any(p.match(line) for p in OWN_LINES), f"not the CLI's own line: {line!r}"


def _secret_config(stack, run_id: str, path) -> tuple[list[str], str]:
    """A config file that sets every kind of secret the settings hold (the S3 keys, the chain key,
    a ``[kafka]`` and a ``[spark]`` one), each a value found nowhere else, and a ``[spark]`` marker
    that is no secret; the secrets and the marker."""
    access, secret, chain, sasl, account = (f"{kind}-{run_id}-{uuid.uuid4().hex}" for kind in
                                            ("s3access", "s3secret", "chainkey", "saslpassword", "accountkey"))
    marker = f"marker-{run_id}-{uuid.uuid4().hex}"
    path.write_text(f"""chain_key = "{chain}"
[s3]
endpoint = "{stack.s3_endpoint()}"
region = "{stack.S3_REGION}"
path_style = true
access_key = "{access}"
secret_key = "{secret}"
[kafka]
"sasl.jaas.config" = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{sasl}";'
[spark]
"spark.hadoop.fs.azure.account.key.recon.dfs.core.windows.net" = "{account}"
"spark.reconstructor.test.marker" = "{marker}"
""")
    return [access, secret, chain, sasl, account], marker


def test_run_and_replay_print_only_their_own_lines_and_v_brings_back_sparks(stack, run_id, tmp_path):
    bootstrap, topic = stack.bootstrap_servers(), f"quiet{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    send(bootstrap, topic, "s-1", [snapshot(1), update(2, "a"), update(3, "b")])
    # On S3, with every kind of secret set (the config file's): no process shows one in its
    # command line, for any local user to read.
    secrets, marker = _secret_config(stack, run_id, tmp_path / "secrets.toml")
    root = f"s3a://{stack.S3_BUCKET}/quiet{run_id}"
    run = ["run", "--config", str(tmp_path / "secrets.toml"), "--bootstrap-servers", bootstrap, "--topic-pattern",
           topic, "--compact-every", "off"]
    file_only = {name: None for name in ("RECON_S3_ENDPOINT", "RECON_S3_REGION", "RECON_S3_PATH_STYLE",
                                         "RECON_S3_ACCESS_KEY", "RECON_S3_SECRET_KEY", "RECON_CHAIN_KEY")}

    with ArgumentScan(secrets, marker) as scan:
        ran = cli(*run, "--output", f"{root}/out", "--checkpoint", f"{root}/chk", env=file_only)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert scan.seen, "the scan never saw the run's driver"
    assert not scan.found, scan.found
    assert ran.stdout == ""
    assert_only_own_lines(ran)
    assert any(line.startswith("batch 0: 3 records") for line in lines(ran.stderr)), ran.stderr

    replayed = cli("replay", "--config", str(tmp_path / "secrets.toml"), "--bootstrap-servers", bootstrap,
                   "--topic-pattern", topic, "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "replay-chk"),
                   "--from", json.dumps({topic: {"0": 0}}), env=file_only)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert replayed.stdout == ""
    assert_only_own_lines(replayed)

    loud = cli(*run, "--output", str(tmp_path / "loud-out"), "--checkpoint", str(tmp_path / "loud-chk"), "-v",
               env=file_only)
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert [line for line in lines(loud.stderr) if re.search(r" WARN \S+: ", line)], loud.stderr[-3000:]


def test_an_s3_endpoint_that_does_not_answer_is_one_line_before_spark_starts(stack, tmp_path):
    ran = cli("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", "nothing",
              "--output", "s3a://recon/quiet/out", "--checkpoint", "s3a://recon/quiet/chk",
              env={"RECON_S3_ENDPOINT": "http://127.0.0.1:9", "RECON_S3_ACCESS_KEY": "test",
                   "RECON_S3_SECRET_KEY": "test", "RECON_S3_PATH_STYLE": "true"}, timeout=120)
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert lines(ran.stderr) == ["reconstructor: S3 endpoint http://127.0.0.1:9 does not answer: "
                                 "check s3.endpoint (RECON_S3_ENDPOINT)"]


def test_an_unknown_broker_host_is_one_line_naming_the_flag(tmp_path):
    ran = cli("run", "--bootstrap-servers", "nohost.invalid:9092", "--topic-pattern", "nothing",
              "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "chk"), timeout=120)
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert lines(ran.stderr) == ["reconstructor: Kafka at nohost.invalid:9092 does not answer: "
                                 "check --bootstrap-servers (and that the broker is up)"]


@pytest.mark.parametrize("keys, output, line", [
    ({"RECON_S3_ACCESS_KEY": "test", "RECON_S3_SECRET_KEY": "test"}, "s3a://nobucket{id}/out",
     "--output s3a://nobucket{id}/out: bucket nobucket{id} does not exist (check the bucket and s3.endpoint)"),
    ({}, "s3a://recon/quiet{id}/out",
     "--output s3a://recon/quiet{id}/out: no S3 credentials: set s3.access_key and s3.secret_key "
     "(RECON_S3_ACCESS_KEY, RECON_S3_SECRET_KEY) or the AWS credential chain"),
])
def test_a_missing_bucket_or_missing_credentials_is_one_line_naming_the_setting(stack, run_id, tmp_path,
                                                                                keys, output, line):
    output = output.format(id=run_id)
    # No AWS credentials from the environment: the keys given here are all there are.
    env = {"RECON_S3_ENDPOINT": stack.s3_endpoint(), "RECON_S3_PATH_STYLE": "true",
           "RECON_S3_REGION": stack.S3_REGION, "AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None,
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none"),
           **keys}
    ran = cli("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", "nothing",
              "--output", output, "--checkpoint", f"{output}/_checkpoint", env=env)
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert lines(ran.stderr) == ["reconstructor: " + line.format(id=run_id)]


@pytest.mark.parametrize("message, shown", [
    # Spark 4.2's race between the executor heartbeat and a task deserializing an accumulator
    # (SPARK-59451): logged with a NullPointerException's stack trace on a loaded driver.
    ("Uncaught exception in thread executor-heartbeater", False),
    ("Uncaught exception in thread stream execution thread for [id = 1]", True),
])
def test_the_clis_log_configuration_drops_the_heartbeat_race_and_keeps_other_errors(spark, message, shown):
    """The driver's log4j configuration the CLI starts the JVM with (``reconstructor.spark.logs``),
    built in the suite's JVM apart from its running logging, judging an ERROR of Spark's ``Utils``."""
    from reconstructor.spark.logs import LOG4J2_CONFIG

    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    path = str(LOG4J2_CONFIG)
    source = log4j.core.config.ConfigurationSource(jvm.java.io.FileInputStream(path), jvm.java.io.File(path))
    config = log4j.core.config.properties.PropertiesConfigurationFactory().getConfiguration(None, source)
    config.initialize()
    try:
        utils = config.getLoggerConfig("org.apache.spark.util.Utils")
        event = (log4j.core.impl.Log4jLogEvent.newBuilder().setLoggerName("org.apache.spark.util.Utils")
                 .setLevel(log4j.Level.ERROR).setMessage(log4j.message.SimpleMessage(message)).build())
        assert utils.getName() == "org.apache.spark.util.Utils"  # not the root's configuration
        assert utils.getLevel().isLessSpecificThan(log4j.Level.ERROR)  # its errors are logged ...
        assert utils.isFiltered(event) is (not shown)  # ... but for the race
    finally:
        config.stop()
