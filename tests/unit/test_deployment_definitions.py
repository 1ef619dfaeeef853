"""The Databricks bundle and EMR definitions call entry points that exist, with arguments the CLI accepts."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from reconstructor.cli.parser import build_parser
from reconstructor.jars import ENGINE_JAR

ROOT = Path(__file__).resolve().parents[2]


def _accepts(args: list[str]) -> None:
    parsed = build_parser().parse_args(args)  # SystemExit(2) on anything the CLI does not know
    assert parsed.command in ("run", "compact", "replay", "state")


def test_databricks_bundle_tasks_use_the_wheel_entry_point_with_valid_arguments():
    bundle = yaml.safe_load((ROOT / "infra/databricks/databricks.yml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    jobs = bundle["resources"]["jobs"]
    assert set(jobs) == {"reconstructor_stream", "reconstructor_compact"}
    for job in jobs.values():
        assert job["max_concurrent_runs"] == 1  # one writer per table on S3
        assert "quartz_cron_expression" in job["schedule"]
        for task in job["tasks"]:
            wheel = task["python_wheel_task"]
            assert wheel["package_name"] == project["name"].replace("-", "_")
            assert wheel["entry_point"] in project["scripts"]
            args = [str(a).replace("${var.", "VAR_").replace("}", "") for a in wheel["parameters"]]
            _accepts(args)
    stream_args = jobs["reconstructor_stream"]["tasks"][0]["python_wheel_task"]["parameters"]
    assert "available-now" in stream_args
    # The stream's metrics go to a file the driver writes on DBFS.
    log = stream_args[stream_args.index("--metrics-log") + 1]
    assert bundle["variables"][log.removeprefix("${var.").removesuffix("}")]["default"].startswith("/dbfs/")


def test_databricks_bundle_clusters_run_a_classic_driver():
    """Standard (shared) access mode runs pyspark as a Spark Connect client, which the reconstructor
    refuses; Databricks picks it for a cluster that names no access mode.  Dedicated mode keeps a
    classic driver (Py4J), which Unity Catalog (``--catalog``) also accepts."""
    bundle = yaml.safe_load((ROOT / "infra/databricks/databricks.yml").read_text())
    clusters = [c["new_cluster"] for job in bundle["resources"]["jobs"].values() for c in job["job_clusters"]]
    assert clusters
    for cluster in clusters:
        assert cluster["data_security_mode"] == "SINGLE_USER"
        assert not {"spark.remote", "spark.api.mode"} & set(cluster.get("spark_conf", {}))


def _engine(args: list[str]) -> str:
    parsed = build_parser().parse_args(args)
    return str(getattr(parsed.engine, "value", parsed.engine))


def _submitted_jars(submit_args: list[str]) -> list[str]:
    """The jars a spark-submit command line ships with ``--jars`` (comma-separated)."""
    assert submit_args.count("--jars") == 1  # a second --jars would replace the first
    return submit_args[submit_args.index("--jars") + 1].split(",")


def test_the_databricks_stream_ships_the_engine_jar_and_runs_the_jvm_engine():
    bundle = yaml.safe_load((ROOT / "infra/databricks/databricks.yml").read_text())
    jobs = bundle["resources"]["jobs"]
    (task,) = jobs["reconstructor_stream"]["tasks"]
    jars = [lib["jar"] for lib in task["libraries"] if "jar" in lib]
    assert len(jars) == 1
    assert Path(jars[0]).name == ENGINE_JAR
    # Relative to the bundle's folder, the jar `make wheel` takes out of the wheel it builds, and the
    # bundle's build is `make wheel`.
    assert (ROOT / "infra/databricks" / jars[0]).resolve() == ROOT / "dist" / ENGINE_JAR
    assert bundle["artifacts"]["reconstructor_wheel"]["build"] == "make wheel"
    assert _engine(task["python_wheel_task"]["parameters"]) == "jvm"
    # The compaction job runs no stateful step: no engine jar, no --engine.
    for task in jobs["reconstructor_compact"]["tasks"]:
        assert not [lib for lib in task["libraries"] if "jar" in lib]
        assert "--engine" not in task["python_wheel_task"]["parameters"]


def test_the_emr_run_step_ships_the_engine_jar_and_runs_the_jvm_engine():
    steps = json.loads((ROOT / "infra/emr/steps.json").read_text())
    (run,) = [s["HadoopJarStep"]["Args"] for s in steps if "run" in s["HadoopJarStep"]["Args"]]
    script = next(a for a in run if a.endswith(".py"))
    submit, cli = run[:run.index(script)], run[run.index(script) + 1:]
    assert ENGINE_JAR in [Path(j).name for j in _submitted_jars(submit)]
    assert _engine(cli) == "jvm"


def test_the_emr_serverless_job_ships_the_engine_jar_and_runs_the_jvm_engine():
    driver = json.loads((ROOT / "infra/emr/serverless-job-run.json").read_text())["jobDriver"]["sparkSubmit"]
    assert ENGINE_JAR in [Path(j).name for j in _submitted_jars(shlex.split(driver["sparkSubmitParameters"]))]
    assert _engine(driver["entryPointArguments"]) == "jvm"


def test_every_emr_job_that_commits_to_s3a_writes_its_log_put_if_absent():
    """A second driver committing the same version must fail, not replace the first's commit: each
    EMR job that writes the s3a:// tables ships the project's jar and sets its log store."""
    from reconstructor.spark.builder import PUT_IF_ABSENT_LOG_STORE, S3A_LOG_STORE_KEY

    steps = json.loads((ROOT / "infra/emr/steps.json").read_text())
    serverless = json.loads((ROOT / "infra/emr/serverless-job-run.json").read_text())["jobDriver"]["sparkSubmit"]
    submits = [s["HadoopJarStep"]["Args"] for s in steps] + [shlex.split(serverless["sparkSubmitParameters"])]
    assert len(submits) == 3
    for args in submits:
        confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
        assert f"{S3A_LOG_STORE_KEY}={PUT_IF_ABSENT_LOG_STORE}" in confs, args
        assert ENGINE_JAR in [Path(j).name for j in _submitted_jars(args)]


def test_the_databricks_stream_that_ships_the_jar_writes_its_s3a_logs_put_if_absent():
    from reconstructor.spark.builder import PUT_IF_ABSENT_LOG_STORE, S3A_LOG_STORE_KEY

    bundle = yaml.safe_load((ROOT / "infra/databricks/databricks.yml").read_text())
    shipping = 0
    for job in bundle["resources"]["jobs"].values():
        clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
        for task in job["tasks"]:
            if any(Path(lib.get("jar", "")).name == ENGINE_JAR for lib in task["libraries"]):
                shipping += 1
                conf = clusters[task["job_cluster_key"]].get("spark_conf", {})
                assert conf.get(S3A_LOG_STORE_KEY) == PUT_IF_ABSENT_LOG_STORE, task["task_key"]
    assert shipping == 1


def test_make_wheel_ships_the_jar_taken_out_of_the_wheel_it_built(tmp_path):
    """The deployments' jar is the wheel's own copy, so the two cannot be of different builds: the
    recipe's extraction, run on a wheel, writes dist/reconstructor-engine.jar with the wheel's bytes."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\nwheel:"):].split("\n\n")[0]
    assert "pip wheel" in recipe and "-w dist ." in recipe and ".jars/" not in recipe
    (extract,) = [line.strip().lstrip("@") for line in recipe.splitlines() if "zipfile" in line]
    wheel = tmp_path / "dist" / "sensor_reconstructor-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"reconstructor/jars/{ENGINE_JAR}", b"the wheel's jar")
    args = [a.replace("$(VPY)", sys.executable).replace("$(WHEEL_FILE)", str(wheel)) for a in shlex.split(extract)]
    subprocess.run(args, cwd=tmp_path, check=True, timeout=60)
    assert (tmp_path / "dist" / ENGINE_JAR).read_bytes() == b"the wheel's jar"


def test_a_local_session_with_the_project_jar_writes_s3a_logs_put_if_absent(tmp_path):
    from reconstructor.spark.builder import PUT_IF_ABSENT_LOG_STORE, S3A_LOG_STORE_KEY, spark_settings

    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "delta-spark.jar").write_bytes(b"")
    assert S3A_LOG_STORE_KEY not in spark_settings("local[2]", jars_dir=tmp_path)  # Delta's own without it
    (tmp_path / "spark" / ENGINE_JAR).write_bytes(b"")
    assert spark_settings("local[2]", jars_dir=tmp_path)[S3A_LOG_STORE_KEY] == PUT_IF_ABSENT_LOG_STORE


def test_the_emr_run_step_serves_its_metrics_on_a_port():
    steps = json.loads((ROOT / "infra/emr/steps.json").read_text())
    (run,) = [s["HadoopJarStep"]["Args"] for s in steps if "run" in s["HadoopJarStep"]["Args"]]
    parsed = build_parser().parse_args(run[run.index("run"):])
    assert parsed.metrics_port and parsed.metrics_host == "0.0.0.0"


@pytest.mark.parametrize("name", ["steps.json", "serverless-job-run.json"])
def test_emr_definitions_submit_the_entry_point_with_valid_arguments(name):
    data = json.loads((ROOT / "infra/emr" / name).read_text())
    runs = []
    if isinstance(data, list):
        for step in data:
            args = step["HadoopJarStep"]["Args"]
            assert args[0] == "spark-submit"
            script = next(a for a in args if a.endswith(".py"))
            runs.append((script, args[args.index(script) + 1:], " ".join(args)))
    else:
        driver = data["jobDriver"]["sparkSubmit"]
        runs.append((driver["entryPoint"], driver["entryPointArguments"], driver["sparkSubmitParameters"]))
    for script, cli_args, submit in runs:
        assert Path(script).name == "emr_step.py" and (ROOT / "jobs" / "emr_step.py").is_file()
        _accepts(cli_args)
        assert ".whl" in submit
        assert shlex.split(submit)  # well-formed


def test_job_entry_points_call_the_cli():
    for path in ("jobs/emr_step.py", "jobs/databricks_task.py"):
        text = (ROOT / path).read_text()
        assert "from reconstructor.cli import main" in text and "main(sys.argv[1:])" in text


def test_each_stream_registers_its_tables_in_the_platforms_catalog():
    bundle = yaml.safe_load((ROOT / "infra/databricks/databricks.yml").read_text())
    stream_args = bundle["resources"]["jobs"]["reconstructor_stream"]["tasks"][0]["python_wheel_task"]["parameters"]
    schema = stream_args[stream_args.index("--catalog") + 1]
    assert schema == "${var.catalog_schema}" and bundle["variables"]["catalog_schema"]["default"] == "main.sensors"
    # Unity Catalog takes s3:// locations for external tables, not s3a://.
    assert bundle["variables"]["output"]["default"].startswith("s3://")
    glue = "spark.hadoop.hive.metastore.client.factory.class=" \
           "com.amazonaws.glue.catalog.metastore.AWSGlueDataCatalogHiveClientFactory"
    (run_step, _) = json.loads((ROOT / "infra/emr/steps.json").read_text())
    args = run_step["HadoopJarStep"]["Args"]
    assert "--catalog" in args and glue in args and "spark.sql.catalogImplementation=hive" in args
    serverless = json.loads((ROOT / "infra/emr/serverless-job-run.json").read_text())["jobDriver"]["sparkSubmit"]
    assert "--catalog" in serverless["entryPointArguments"] and glue in serverless["sparkSubmitParameters"]


def test_a_local_driver_starts_with_the_class_archive_only_where_make_cds_made_one(tmp_path, monkeypatch):
    """The archive goes on the driver's Java options beside what is there; options that decide
    about class data sharing themselves are left as they are, and a driver that spark-submit
    started (Databricks, EMR) is not the builder's to start."""
    from reconstructor.spark.builder import DRIVER_JAVA_OPTIONS, spark_settings
    from reconstructor.spark.class_archive import ARCHIVE

    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "delta-spark.jar").write_bytes(b"")
    assert "SharedArchiveFile" not in spark_settings("local[2]", jars_dir=tmp_path)[DRIVER_JAVA_OPTIONS]
    (tmp_path / ARCHIVE).parent.mkdir()
    (tmp_path / ARCHIVE).write_bytes(b"archive")
    options = spark_settings("local[2]", jars_dir=tmp_path, conf={DRIVER_JAVA_OPTIONS: "-Dx=1"})[DRIVER_JAVA_OPTIONS]
    assert options.startswith("-Dx=1 -Xss8m") and f"-XX:SharedArchiveFile={(tmp_path / ARCHIVE).resolve()}" in options
    assert "-Xlog:cds=off" in options
    own = spark_settings("local[2]", jars_dir=tmp_path, conf={DRIVER_JAVA_OPTIONS: "-Xshare:off"})
    assert "SharedArchiveFile" not in own[DRIVER_JAVA_OPTIONS]
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4040")
    assert "SharedArchiveFile" not in spark_settings(None, jars_dir=tmp_path)[DRIVER_JAVA_OPTIONS]


def test_the_secrets_file_holds_each_setting_as_a_java_properties_file_reads_it_and_only_its_user_may():
    import os
    import stat

    from reconstructor.spark.builder import java_properties, secrets_file

    assert java_properties({"spark.hadoop.fs.s3a.secret.key": "a=b:c\\d#e\n f"}) == (
        "spark.hadoop.fs.s3a.secret.key=a=b:c\\\\d#e\\n f\n")
    assert java_properties({"odd key=": " lead"}) == "odd\\ key\\==\\ lead\n"
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    with secrets_file({"spark.hadoop.fs.s3a.secret.key": "s3cr3t"}):
        args = os.environ["PYSPARK_SUBMIT_ARGS"].split()
        path = args[args.index("--properties-file") + 1]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path) as fh:
            assert fh.read() == "spark.hadoop.fs.s3a.secret.key=s3cr3t\n"
        assert args[-1] == "pyspark-shell" and "s3cr3t" not in os.environ["PYSPARK_SUBMIT_ARGS"]
    assert not os.path.exists(path) and os.environ.get("PYSPARK_SUBMIT_ARGS") == before
