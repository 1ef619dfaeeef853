"""Which JVM jars a driver gets (``builder._jar_settings``'s rule), the one list of Maven coordinates
held to ``infra/maven/pom.xml``, the one line a failed resolution ends with, and ``reconstructor
jars``' own work on files."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reconstructor.jars import ENGINE_JAR, maven
from reconstructor.spark import builder, jar_route
from reconstructor.spark.builder import (
    EXCLUDES_KEY,
    IVY_SETTINGS_KEY,
    JARS_KEY,
    PACKAGES_KEY,
    PUT_IF_ABSENT_LOG_STORE,
    S3A_LOG_STORE_KEY,
    spark_settings,
)
from tests.support.cli import cli

POM = Path(__file__).resolve().parents[2] / "infra" / "maven" / "pom.xml"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _spark_profile() -> tuple[set[str], set[str], set[str]]:
    """The pom's spark profile: its dependencies' coordinates, the ``group:artifact`` of its
    exclusions, and the artifact ids it leaves out of the copy; properties substituted."""
    root = ET.parse(POM).getroot()
    props = {p.tag.split("}")[1]: p.text or "" for p in root.find("m:properties", NS)}
    (profile,) = [p for p in root.iterfind("m:profiles/m:profile", NS) if p.findtext("m:id", namespaces=NS) == "spark"]
    props.update({p.tag.split("}")[1]: p.text or "" for p in profile.find("m:properties", NS)})

    def sub(text: str) -> str:
        return re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], text)

    deps, exclusions = set(), set()
    for dep in profile.iterfind("m:dependencies/m:dependency", NS):
        deps.add(sub(":".join(dep.findtext(f"m:{k}", namespaces=NS) for k in ("groupId", "artifactId", "version"))))
        for ex in dep.iterfind("m:exclusions/m:exclusion", NS):
            exclusions.add(sub(f"{ex.findtext('m:groupId', namespaces=NS)}:{ex.findtext('m:artifactId', namespaces=NS)}"))
    return deps, exclusions, set(sub(props["jars.exclude"]).split(","))


def test_the_packages_are_the_ones_the_pom_pins():
    deps, _, _ = _spark_profile()
    assert set(maven.packages(s3a=True)) == deps
    assert set(maven.packages(s3a=False)) == deps - {maven.HADOOP_AWS}


def test_the_excludes_are_what_the_pom_leaves_out():
    _, exclusions, copy_excluded = _spark_profile()
    assert exclusions <= set(maven.EXCLUDES)
    assert {maven.artifact(e + ":0") for e in maven.EXCLUDES} == copy_excluded | {e.split(":")[1] for e in exclusions}


@pytest.fixture
def started_here(monkeypatch):
    """This process starts the driver JVM (no spark-submit around it)."""
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS"):
        monkeypatch.delenv(name, raising=False)


def _engine(monkeypatch, jar: Path | None) -> None:
    monkeypatch.setattr(builder, "packaged_engine_jar", lambda: jar)


def test_with_no_jars_dir_a_driver_resolves_delta_and_kafka_and_no_s3a_for_local_outputs(
        tmp_path, monkeypatch, started_here):
    _engine(monkeypatch, None)
    settings = spark_settings("local[2]", jars_dir=tmp_path / "none")
    assert settings[PACKAGES_KEY].split(",") == [maven.DELTA, maven.KAFKA_SOURCE]
    assert "hadoop-aws" not in settings[PACKAGES_KEY]
    assert set(settings[EXCLUDES_KEY].split(",")) == set(maven.EXCLUDES)
    assert "org.slf4j:slf4j-api" in settings[EXCLUDES_KEY].split(",")
    # No engine jar installed (a checkout without `make jars`): nothing to add, no log store of its.
    assert JARS_KEY not in settings and S3A_LOG_STORE_KEY not in settings
    assert "spark.driver.extraClassPath" not in settings


def test_an_s3a_location_adds_s3a(tmp_path, monkeypatch, started_here):
    _engine(monkeypatch, None)
    assert builder.uses_s3a("/data/out", "s3a://bucket/chk") and not builder.uses_s3a("/data/out", None)
    assert not builder.uses_s3a("file:///s3a://x")
    packages = spark_settings("local[2]", jars_dir=tmp_path, s3a=True)[PACKAGES_KEY].split(",")
    assert packages == [maven.DELTA, maven.KAFKA_SOURCE, maven.HADOOP_AWS]


def test_the_installed_engine_jar_goes_on_with_the_put_if_absent_log_store(tmp_path, monkeypatch, started_here):
    jar = tmp_path / ENGINE_JAR
    jar.write_bytes(b"")
    _engine(monkeypatch, jar)
    settings = spark_settings("local[2]", jars_dir=tmp_path / "none")
    assert settings[JARS_KEY] == str(jar)
    assert settings[S3A_LOG_STORE_KEY] == PUT_IF_ABSENT_LOG_STORE


def test_a_jars_dir_with_spark_jars_wins(tmp_path, monkeypatch, started_here):
    _engine(monkeypatch, tmp_path / ENGINE_JAR)
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    (tmp_path / "jars" / "spark" / "delta-spark.jar").write_bytes(b"")
    settings = spark_settings("local[2]", jars_dir=tmp_path / "jars", s3a=True)
    assert PACKAGES_KEY not in settings and JARS_KEY not in settings
    assert settings["spark.driver.extraClassPath"] == f"{(tmp_path / 'jars' / 'spark').resolve()}/*"
    assert S3A_LOG_STORE_KEY not in settings  # no engine jar in that folder
    (tmp_path / "jars" / "spark" / ENGINE_JAR).write_bytes(b"")
    assert spark_settings("local[2]", jars_dir=tmp_path / "jars")[S3A_LOG_STORE_KEY] == PUT_IF_ABSENT_LOG_STORE


def test_a_driver_spark_submit_started_gets_no_jars_from_the_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    _engine(monkeypatch, tmp_path / ENGINE_JAR)
    settings = spark_settings(None, jars_dir=tmp_path, s3a=True)
    assert not {PACKAGES_KEY, JARS_KEY, S3A_LOG_STORE_KEY, "spark.driver.extraClassPath"} & settings.keys()


def test_a_spark_setting_of_the_config_wins_over_the_route(tmp_path, monkeypatch, started_here):
    _engine(monkeypatch, None)
    settings = spark_settings("local[2]", jars_dir=tmp_path, conf={PACKAGES_KEY: "g:a:1"})
    assert settings[PACKAGES_KEY] == "g:a:1"


def test_the_ivy_settings_leave_the_local_maven_repository_out(monkeypatch):
    monkeypatch.delenv("DEFAULT_ARTIFACT_REPOSITORY", raising=False)
    with builder.ivy_settings_file({PACKAGES_KEY: maven.DELTA}) as ivy:
        text = Path(ivy[IVY_SETTINGS_KEY]).read_text()
    assert not Path(ivy[IVY_SETTINGS_KEY]).exists()  # gone once the JVM started
    resolvers = ET.fromstring(text).find("resolvers")
    assert [(r.tag, r.get("root")) for r in resolvers] == [("ibiblio", maven.MAVEN_CENTRAL)]
    assert ".m2" not in text
    monkeypatch.setenv("DEFAULT_ARTIFACT_REPOSITORY", "https://mirror.example/maven2/")
    with builder.ivy_settings_file({PACKAGES_KEY: maven.DELTA}) as ivy:
        assert 'root="https://mirror.example/maven2/"' in Path(ivy[IVY_SETTINGS_KEY]).read_text()
    # Ivy settings of the user's own, or nothing to resolve: none of these.
    with builder.ivy_settings_file({PACKAGES_KEY: maven.DELTA, IVY_SETTINGS_KEY: "/etc/ivy.xml"}) as ivy:
        assert ivy == {}
    with builder.ivy_settings_file({}) as ivy:
        assert ivy == {}


# The launcher's stderr when Maven cannot be reached (Spark 4.2.0, abridged).
UNREACHABLE = """\
:: loading settings :: file = /tmp/ivysettings.xml
Ivy Default Cache set to: /tmp/ivy/cache
:: resolving dependencies :: org.apache.spark#spark-submit-parent-ce41;1.0
:: problems summary ::
:::: WARNINGS
		module not found: io.delta#delta-spark_4.2_2.13;4.4.0
		::          UNRESOLVED DEPENDENCIES         ::
		:: io.delta#delta-spark_4.2_2.13;4.4.0: not found

:::: ERRORS
	Server access error at url http://127.0.0.1:9/io/delta/delta-spark_4.2_2.13/4.4.0/delta-spark_4.2_2.13-4.4.0.pom (java.net.ConnectException: Connection refused)

	Server access error at url http://127.0.0.1:9/io/delta/delta-spark_4.2_2.13/4.4.0/delta-spark_4.2_2.13-4.4.0.jar (java.net.ConnectException: Connection refused)

:: USE VERBOSE OR DEBUG MESSAGE LEVEL FOR MORE DETAILS
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: io.delta#delta-spark_4.2_2.13;4.4.0: not found, unresolved dependency: org.apache.spark#spark-sql-kafka-0-10_2.13;4.2.0: not found]
	at org.apache.spark.util.MavenUtils$.resolveMavenCoordinates(MavenUtils.scala:539)
	at org.apache.spark.deploy.SparkSubmit.prepareSubmitEnvironment(SparkSubmit.scala:343)
""".splitlines(keepends=True)


def test_a_failed_resolution_is_one_line_naming_the_first_ivy_error_and_the_way_out():
    detail = jar_route.resolution_failure(UNREACHABLE)
    assert detail == ("Server access error at url http://127.0.0.1:9/io/delta/delta-spark_4.2_2.13/4.4.0/"
                      "delta-spark_4.2_2.13-4.4.0.pom (java.net.ConnectException: Connection refused)")
    line = str(jar_route.unresolved(detail, s3a=False))
    assert "\n" not in line and "Delta and the Kafka source" in line and "hadoop-aws" not in line
    assert "reconstructor jars DIR'" in line and "jars_dir / RECON_JARS_DIR" in line
    assert "reconstructor jars DIR --s3a'" in str(jar_route.unresolved(detail, s3a=True))
    assert jar_route.unresolved(detail, s3a=False).exit_code == 2


def test_without_ivy_errors_the_failure_names_its_first_unresolved_artifact():
    lines = [line for line in UNREACHABLE if "Server access" not in line]
    lines[-3] = ('Exception in thread "main" java.lang.RuntimeException: [download failed: '
                 'org.slf4j#slf4j-api;2.0.13!slf4j-api.jar, download failed: x#y;1!y.jar]\n')
    assert jar_route.resolution_failure(lines) == "download failed: org.slf4j#slf4j-api;2.0.13!slf4j-api.jar"


def test_a_launcher_that_failed_for_another_reason_is_not_a_resolution_failure():
    assert jar_route.resolution_failure(["Error: Could not find or load main class x\n"]) is None
    assert jar_route.resolution_failure(['Exception in thread "main" java.lang.OutOfMemoryError: heap\n',
                                         "\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)\n"]) is None


def test_a_start_that_succeeded_shows_no_ivy_report():
    lines = ["WARNING: x\n", ":: retrieving :: org.apache.spark#spark-submit-parent\n",
             "\t12 artifacts copied, 0 already retrieved (22806kB/24ms)\n", "ERROR something else\n"]
    assert jar_route.without_ivy_report(lines) == ["ERROR something else\n"]
    assert jar_route.without_ivy_report(["ERROR a\n"]) == ["ERROR a\n"]


def test_jars_writes_the_resolved_jars_under_maven_names_and_removes_stale_ones(tmp_path, monkeypatch):
    ivy = tmp_path / "ivy" / "jars"
    ivy.mkdir(parents=True)
    resolved = [ivy / "io.delta_delta-spark_4.2_2.13-4.4.0.jar", ivy / "org.apache.kafka_kafka-clients-3.9.2.jar"]
    for jar in resolved:
        jar.write_bytes(jar.name.encode())
    engine = tmp_path / ENGINE_JAR
    engine.write_bytes(b"engine")
    monkeypatch.setattr(jar_route, "resolve_packages", lambda **_: resolved)
    (tmp_path / "out" / "spark").mkdir(parents=True)
    (tmp_path / "out" / "spark" / "hadoop-aws-3.5.0.jar").write_bytes(b"")
    told: list[str] = []
    written = jar_route.fill_jars_dir(tmp_path / "out", s3a=False, engine_only=False, engine=engine, conf={},
                                      verbose=False, tell=told.append)
    names = sorted(p.name for p in (tmp_path / "out" / "spark").iterdir())
    assert names == sorted(["delta-spark_4.2_2.13-4.4.0.jar", "kafka-clients-3.9.2.jar", ENGINE_JAR])
    assert sorted(p.name for p in written) == names
    assert told == ["removing hadoop-aws-3.5.0.jar (not among the jars resolved now)"]
    # The folder is a jars_dir now: it wins.
    assert builder.spark_jars(tmp_path / "out") == tmp_path / "out" / "spark"


def test_jars_engine_only_writes_the_engine_jar_alone_outside_spark(tmp_path):
    engine = tmp_path / ENGINE_JAR
    engine.write_bytes(b"engine")
    (written,) = jar_route.fill_jars_dir(tmp_path / "dist", s3a=False, engine_only=True, engine=engine, conf={},
                                         verbose=False, tell=print)
    assert written == tmp_path / "dist" / ENGINE_JAR and written.read_bytes() == b"engine"
    assert builder.spark_jars(tmp_path / "dist") is None  # not a jars_dir: it would lack Delta


def test_jars_without_an_engine_jar_says_make_jars_builds_it(tmp_path, monkeypatch):
    monkeypatch.setattr(jar_route, "packaged_engine_jar", lambda: None)
    with pytest.raises(jar_route.UsageError, match="'make jars'"):
        jar_route.engine_jar_to_copy(tmp_path)
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / ENGINE_JAR).write_bytes(b"")
    assert jar_route.engine_jar_to_copy(tmp_path) == tmp_path / "spark" / ENGINE_JAR


def test_jars_has_help_with_examples_and_refuses_a_file_for_a_folder(tmp_path):
    shown = cli("jars", "--help")
    assert shown.returncode == 0 and "examples:" in shown.stdout
    for words in ("--s3a", "--engine-only", "RECON_JARS_DIR", "Maven"):
        assert words in shown.stdout
    (tmp_path / "f").write_text("")
    refused = cli("jars", str(tmp_path / "f"))
    assert refused.returncode == 2 and refused.stderr.strip() == f"reconstructor: {tmp_path / 'f'} is not a folder"
    both = cli("jars", "--s3a", "--engine-only", str(tmp_path))
    assert both.returncode == 2 and "not allowed with" in both.stderr
