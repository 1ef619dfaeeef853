"""The Databricks bundle and EMR definitions call entry points that exist, with arguments the CLI accepts."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from reconstructor.cli.parser import build_parser

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
