"""The shipped artefact end to end: the built wheel in a fresh virtualenv, and the EMR step.

Nothing here imports the working tree: the wheel is built, installed with its dependencies into a
new virtualenv, and every command runs from a folder outside the repository, so a file missing from
the wheel (the row schema, a module) fails here as it would on a cluster. The EMR path is the real
one: ``spark-submit --py-files <wheel> --jars <engine jar> jobs/emr_step.py run --engine jvm ...``
writing to s3a:// on the local S3 endpoint, the JVM engine and the Delta log store loaded from the
jar the wheel carries.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.jars import ENGINE_JAR
from reconstructor.spark.builder import PUT_IF_ABSENT_LOG_STORE, S3A_LOG_STORE_KEY
from reconstructor.spark.checkpoint import read_checkpoint_file
from reconstructor.spark.engines import ENGINE_FILE
from tests.support.cli import produce
from tests.support.pipeline import current_tables, expected_all, replayed_tables
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
NAMES = RowSchema.load().names


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(wheel path, virtualenv bin folder): the project as a user installs it."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"),
                    str(REPO)], check=True, timeout=600)
    (wheel,) = (root / "dist").glob("sensor_reconstructor-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    bin_dir = root / "venv" / "bin"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True,
                   timeout=1800)
    return wheel, bin_dir


def _env(bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    python = str(bin_dir / "python")
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, RECON_JARS_DIR=str(localstack.jars_dir()),
               PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    env.pop("PYTHONPATH", None)
    return env


def _call(bin_dir: Path, cwd: Path, *args: str, timeout: int = 900,
          extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env={**_env(bin_dir), **(extra_env or {})},
                          capture_output=True, text=True, timeout=timeout)


def test_the_wheel_is_what_runs(wheel_env, tmp_path):
    _, bin_dir = wheel_env
    probe = _call(bin_dir, tmp_path, str(bin_dir / "python"), "-c",
                  "import reconstructor, reconstructor.contract.row_schema as s; print(reconstructor.__file__); "
                  "print(len(s.RowSchema.load().names))")
    assert probe.returncode == 0, probe.stderr
    where, columns = probe.stdout.split()
    assert "site-packages" in where and str(REPO) not in where
    assert int(columns) == len(NAMES)


def test_the_test_kit_in_the_wheel_runs_the_documented_examples(wheel_env, tmp_path):
    """``reconstructor.testing`` as a producer or consumer team installs it: the wheel alone in a new
    virtualenv that sees this one's packages (its dependencies and hypothesis) through a ``.pth``
    file, and ``docs/testing.md``'s examples run there as scripts, outside the checkout."""
    wheel, _ = wheel_env
    venv = tmp_path / "kit"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=600)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    examples = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "testing.md").read_text(), re.S)
    assert len(examples) == 2
    for n, example in enumerate(examples):
        script = tmp_path / f"example_{n}.py"
        script.write_text(example + "\nimport reconstructor.testing\nprint(reconstructor.testing.__file__)\n")
        ran = _call(venv / "bin", tmp_path, str(python), str(script), timeout=600)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert str(venv) in ran.stdout and str(REPO) not in ran.stdout, ran.stdout


def test_the_wheel_holds_the_product_and_no_workbench(wheel_env):
    wheel, bin_dir = wheel_env
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every module of the package and every file of schemas/ that git tracks, and the engine jar
    # the build made: nothing drops out because a list in pyproject.toml missed it.
    tracked = subprocess.run(["git", "ls-files", "reconstructor", "schemas"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.split()
    shipped = {n if n.startswith("reconstructor/") else "reconstructor/" + n for n in tracked
               if n.startswith("schemas/") or n.endswith(".py")}
    assert "reconstructor/spark/stateful.py" in shipped and "reconstructor/schemas/demo_sensor.json" in shipped
    assert not shipped - names, sorted(shipped - names)
    assert f"reconstructor/jars/{ENGINE_JAR}" in names
    assert not [n for n in names if n.startswith(("workbench/", "tests/", "jobs/", "jvm/")) or "devstack" in n], names
    # The metadata as the registry reads it.
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)], capture_output=True,
                             text=True, timeout=120)
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr
    # The product's CLI names the workbench for the commands it left to it.
    refused = subprocess.run([str(bin_dir / "reconstructor"), "demo"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "python -m workbench demo" in refused.stderr


def test_produce_run_then_state_equals_current_rows_from_the_wheel(wheel_env, stack, spark, run_id, tmp_path):
    _, bin_dir = wheel_env
    cli = str(bin_dir / "reconstructor")
    bootstrap = stack.bootstrap_servers()
    prefix = f"wh{run_id}-sensor-"
    produced = produce("--bootstrap-servers", bootstrap, "--topic-prefix",
                       prefix, "--sensors", "2", "--sessions", "2", "--rows", "30", "--updates", "50", "--no-end")
    assert produced.returncode == 0, produced.stderr
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    ran = _call(bin_dir, tmp_path, cli, "run", "--bootstrap-servers", bootstrap, "--topic-pattern",
                f"{prefix}[0-9]+", "--output", out, "--checkpoint", chk, "--trigger", "available-now",
                "--compact-every", "off")
    assert ran.returncode == 0, ran.stderr[-3000:]

    live = current_tables(spark, out, NAMES)
    assert len(live) == 4
    for (topic, session), rows in live.items():
        shown = _call(bin_dir, tmp_path, cli, "state", "--checkpoint", chk, "--topic", topic, "--session",
                      session, "--format", "json")
        assert shown.returncode == 0, shown.stderr[-3000:]
        state = json.loads(shown.stdout)
        assert state["session"]["status"] == "open" and state["session"]["last_seq"] == 50
        from_state = {r["row_id"]: {c: r[c] for c in NAMES} for r in state["rows"]}
        assert set(from_state) == set(rows), session
        for rid, values in rows.items():
            for c in ("temperature", "humidity", "status", "reading_count", "firmware", "active"):
                if c in values:
                    assert from_state[rid][c] == values[c], (session, rid, c)


def test_the_emr_step_runs_under_spark_submit_into_s3(wheel_env, stack, spark, run_id, tmp_path):
    wheel, bin_dir = wheel_env
    bootstrap = stack.bootstrap_servers()
    prefix = f"emr{run_id}-sensor-"
    produced = produce("--bootstrap-servers", bootstrap, "--topic-prefix", prefix, "--sensors", "2",
                       "--sessions", "1", "--rows", "20", "--updates", "30")
    assert produced.returncode == 0, produced.stderr
    # The jars EMR would provide (Delta, the Kafka source, S3A) on the classpath, and not the engine
    # jar: that one the step ships with --jars, as infra/emr/steps.json does, taken out of the wheel
    # as `make wheel` does.
    engine_jar = tmp_path / ENGINE_JAR
    engine_jar.write_bytes(zipfile.ZipFile(wheel).read(f"reconstructor/jars/{ENGINE_JAR}"))
    jars = os.pathsep.join(str(j) for j in sorted((localstack.jars_dir() / "spark").glob("*.jar"))
                           if j.name != ENGINE_JAR)
    out = f"s3a://{localstack.S3_BUCKET}/emr-{run_id}/tables"
    checkpoint = f"s3a://{localstack.S3_BUCKET}/emr-{run_id}/checkpoint"
    s3_env = {"RECON_S3_ENDPOINT": localstack.s3_endpoint(), "RECON_S3_REGION": localstack.S3_REGION,
              "RECON_S3_ACCESS_KEY": localstack.S3_ACCESS_KEY, "RECON_S3_SECRET_KEY": localstack.S3_SECRET_KEY,
              "RECON_S3_PATH_STYLE": "true",
              # No jars folder, as on EMR: the session adds nothing to the classpath itself.
              "RECON_JARS_DIR": str(tmp_path / "no-jars")}
    # The arguments of infra/emr/steps.json, with a local master.
    submitted = _call(
        bin_dir, tmp_path, str(bin_dir / "spark-submit"), "--master", "local[2]",
        "--driver-class-path", jars, "--conf", f"spark.executor.extraClassPath={jars}",
        "--conf", "spark.ui.enabled=false", "--py-files", str(wheel), "--jars", str(engine_jar),
        "--conf", f"{S3A_LOG_STORE_KEY}={PUT_IF_ABSENT_LOG_STORE}",
        str(REPO / "jobs" / "emr_step.py"),
        "run", "--bootstrap-servers", bootstrap, "--topic-pattern", f"{prefix}[0-9]+", "--output", out,
        "--checkpoint", checkpoint, "--trigger", "available-now", "--compact-every", "off", "--engine", "jvm",
        extra_env=s3_env)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    # The JVM engine wrote the checkpoint's state (a missing jar is exit 2, never the Python engine).
    assert read_checkpoint_file(spark, checkpoint, ENGINE_FILE).strip() == "jvm"

    # The same fleet `produce` planned (seed 7 is its default): every table exact.
    messages = list(plan_fleet(FleetSpec(topic_prefix=prefix, sensors=2, sessions_per_sensor=1, rows=20,
                                         updates=30, seed=7)))
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES)
    sessions = {r["session"]: r["status"] for r in spark.read.format("delta").load(f"{out}/sessions").collect()}
    assert sessions == {p.session: "ended" for p in messages}
    assert spark.read.format("delta").load(f"{out}/current_rows").count() == 0


def test_the_wheel_alone_runs_both_engines_with_the_jars_it_carries_and_resolves(wheel_env, stack, spark, run_id,
                                                                                 tmp_path):
    """A user who installed the wheel, and nothing else: no jars folder (``RECON_JARS_DIR`` an empty
    folder, none in the working directory, none beside site-packages), no checkout on the path.  The
    driver gets Delta and the Kafka source from Maven through ``spark.jars.packages`` (Ivy's cache:
    only the machine's first run downloads them) and the engine jar from the wheel: a fleet run by
    both engines into local outputs is exact, and ``verify``, ``check`` and ``state`` agree."""
    wheel, bin_dir = wheel_env
    assert f"reconstructor/jars/{ENGINE_JAR}" in zipfile.ZipFile(wheel).namelist()
    cli = str(bin_dir / "reconstructor")
    bootstrap = stack.bootstrap_servers()
    prefix = f"mvn{run_id}-sensor-"
    produced = produce("--bootstrap-servers", bootstrap, "--topic-prefix", prefix, "--sensors", "2",
                       "--sessions", "1", "--rows", "20", "--updates", "30", "--no-end")
    assert produced.returncode == 0, produced.stderr
    messages = list(plan_fleet(FleetSpec(topic_prefix=prefix, sensors=2, sessions_per_sensor=1, rows=20,
                                         updates=30, end_sessions=False, seed=7)))
    expected = expected_all(messages, NAMES)
    no_jars = {"RECON_JARS_DIR": str(tmp_path / "no-jars")}
    (tmp_path / "no-jars").mkdir()
    pattern = f"{prefix}[0-9]+"

    for engine in ("python", "jvm"):
        out, chk = str(tmp_path / f"out-{engine}"), str(tmp_path / f"chk-{engine}")
        ran = _call(bin_dir, tmp_path, cli, "run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
                    "--output", out, "--checkpoint", chk, "--compact-every", "off", "--engine", engine,
                    extra_env=no_jars)
        assert ran.returncode == 0, ran.stderr[-3000:]
        # Ivy's report of the resolution is not the user's to read (-v shows it).
        assert ":: resolution report ::" not in ran.stderr and "found io.delta" not in ran.stderr, ran.stderr
        assert read_checkpoint_file(spark, chk, ENGINE_FILE).strip() == engine
        assert replayed_tables(spark, out, NAMES) == expected, engine
        assert current_tables(spark, out, NAMES) == expected, engine
        verified = _call(bin_dir, tmp_path, cli, "verify", "--output", out, extra_env=no_jars)
        assert verified.returncode == 0, verified.stderr[-3000:]

    checked = _call(bin_dir, tmp_path, cli, "check", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
                    extra_env=no_jars)
    assert checked.returncode == 0, checked.stderr[-3000:] + checked.stdout[-3000:]
    # For a host that cannot reach Maven: `reconstructor jars DIR` writes what the route resolves
    # into a jars folder, and a driver with that folder takes its jars from it.
    filled = _call(bin_dir, tmp_path, cli, "jars", str(tmp_path / "filled"), extra_env=no_jars)
    assert filled.returncode == 0, filled.stderr[-3000:]
    names = {jar.name for jar in (tmp_path / "filled" / "spark").glob("*.jar")}
    assert ENGINE_JAR in names and {"delta-spark_4.2_2.13-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"} <= names
    assert not [n for n in names if n.startswith(("hadoop-aws", "bundle-"))], names  # no S3A for local outputs
    (topic, session), rows = sorted(current_tables(spark, str(tmp_path / "out-jvm"), NAMES).items())[0]
    shown = _call(bin_dir, tmp_path, cli, "state", "--checkpoint", str(tmp_path / "chk-jvm"), "--topic", topic,
                  "--session", session, "--format", "json", extra_env={"RECON_JARS_DIR": str(tmp_path / "filled")})
    assert shown.returncode == 0, shown.stderr[-3000:]
    state = json.loads(shown.stdout)
    assert state["session"]["status"] == "open" and state["session"]["last_seq"] == 30
    from_state = {r["row_id"]: r for r in state["rows"]}
    assert set(from_state) == set(rows)
    for rid, values in rows.items():
        for c in ("temperature", "humidity", "status", "reading_count", "firmware", "active"):
            if c in values:
                assert from_state[rid][c] == values[c], (rid, c)


def test_the_wheel_writes_delta_logs_on_s3a_put_if_absent(wheel_env, stack, spark, run_id, tmp_path):
    """Whenever the engine jar is on the classpath, Delta's log on ``s3a://`` goes through its
    put-if-absent log store: Delta names the store it picked for the scheme as it opens a table's
    log there (the jars folder of the checkout here, as its S3A jars spare this test the download of
    the AWS SDK)."""
    _, bin_dir = wheel_env
    out = f"s3a://{localstack.S3_BUCKET}/wheel-{run_id}/tables"
    spark.range(3).write.format("delta").save(f"{out}/row_changes")
    s3_env = {"RECON_S3_ENDPOINT": localstack.s3_endpoint(), "RECON_S3_REGION": localstack.S3_REGION,
              "RECON_S3_ACCESS_KEY": localstack.S3_ACCESS_KEY, "RECON_S3_SECRET_KEY": localstack.S3_SECRET_KEY,
              "RECON_S3_PATH_STYLE": "true", "RECON_SPARK_LOG_LEVEL": "INFO"}
    compacted = _call(bin_dir, tmp_path, str(bin_dir / "reconstructor"), "compact", "-v", "--output", out,
                      extra_env=s3_env)
    assert compacted.returncode == 0, compacted.stderr[-3000:]
    # Delta's line at INFO: "LogStore LogStoreAdapter(reconstructor.delta.PutIfAbsentLogStore) is used for scheme s3a"
    assert re.search(r"LogStore \S*reconstructor\.delta\.PutIfAbsentLogStore\S* is used for scheme s3a\b",
                     compacted.stderr), compacted.stderr[-3000:]
