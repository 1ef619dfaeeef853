"""The pipeline on a real Spark standalone cluster (1 master, 2 workers, 2 executors on 127.0.0.1).

``local[*]`` runs every task in the driver's JVM. Here the tasks of each micro-batch run in two
executor JVMs launched by two workers, state stores are loaded by whichever executor gets a
partition, and the output and checkpoint live on ``s3a://`` (the local S3 endpoint) as in a real
deployment. One run (one driver, one application: CI's time) shows both: both executors run its
tasks, and one of them is killed -9 mid-stream: Spark reruns its tasks, the master launches a
replacement, the run ends by itself (``available-now``) with exit 0, and the tables are exact --
nothing lost, nothing applied twice.

The pipeline runs as ``python -m reconstructor run --master spark://...`` in a subprocess: this
test process already holds the local SparkSession of the ``spark`` fixture (one SparkContext per
process), which reads the tables back.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconstructor.contract.row_schema import RowSchema
from tests.support.pipeline import assert_exact, produce
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet
from workbench.standalone import Cluster, standalone_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NAMES = RowSchema.load().names
PARTITIONS = 2
RUN_TIMEOUT_S = 420  # generous: a 2-core machine, three JVMs of the cluster plus the driver's
BATCH_LINE = re.compile(r"^batch (\d+): ([\d,]+) records")


@pytest.fixture(scope="module")
def cluster(stack, tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("standalone"), workers=2) as c:
        yield c


def _config(cluster: Cluster, folder: Path) -> Path:
    """A TOML config: the cluster's master, one shuffle partition per executor, its app settings."""
    lines = [f"master = {json.dumps(cluster.master_url)}", "shuffle_partitions = 2", "", "[spark]"]
    lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in cluster.app_conf().items()]
    path = folder / "cluster.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _start(cluster: Cluster, folder: Path, pattern: str, root: str, max_offsets: int, log,
           log_level: str = "ERROR") -> subprocess.Popen:
    env = {**os.environ, "RECON_SPARK_LOG_LEVEL": log_level,
           "RECON_S3_ENDPOINT": localstack.s3_endpoint(), "RECON_S3_REGION": localstack.S3_REGION,
           "RECON_S3_ACCESS_KEY": localstack.S3_ACCESS_KEY, "RECON_S3_SECRET_KEY": localstack.S3_SECRET_KEY,
           "RECON_S3_PATH_STYLE": "true"}
    cmd = [sys.executable, "-u", "-m", "reconstructor", "run", "--config", str(_config(cluster, folder)),
           "--master", cluster.master_url, "--bootstrap-servers", localstack.bootstrap_servers(),
           "--topic-pattern", pattern, "--output", f"{root}/tables", "--checkpoint", f"{root}/checkpoint",
           "--trigger", "available-now", "--max-offsets-per-trigger", str(max_offsets),
           "--compact-every", "off"]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _batches(log_path: Path) -> list[int]:
    """Records read by each finished micro-batch, from the run's ``batch N: R records`` lines."""
    with open(log_path) as fh:
        return [int(m.group(2).replace(",", "")) for m in map(BATCH_LINE.match, fh) if m]


def _tail(log_path: Path, chars: int = 4000) -> str:
    return log_path.read_text(errors="replace")[-chars:]


def _finish(proc: subprocess.Popen, log_path: Path) -> None:
    try:
        proc.wait(RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the run on the cluster did not finish within {RUN_TIMEOUT_S}s; log tail:\n"
                    f"{_tail(log_path)}")
    assert proc.returncode == 0, f"the run exited {proc.returncode}; log tail:\n{_tail(log_path)}"


def _await_app(cluster: Cluster, before: set[str], proc: subprocess.Popen, log_path: Path) -> str:
    """The id of the application this run registered (its folder appears in a worker's work dir)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        new = cluster.app_ids() - before
        if new:
            assert len(new) == 1, f"more than one new application on the cluster: {new}"
            return new.pop()
        if proc.poll() is not None:
            pytest.fail(f"the run exited {proc.returncode} before any executor started; log tail:\n"
                        f"{_tail(log_path)}")
        time.sleep(0.3)
    pytest.fail(f"no executor was launched for the run within {RUN_TIMEOUT_S}s; master: "
                f"{cluster.master_json()}; see {cluster.master.log}")


def _running_tasks(executor_dir: Path) -> set[int]:
    """TIDs the executor's log shows started and not (yet) ended."""
    try:
        text = (executor_dir / "stderr").read_text(errors="replace")
    except OSError:
        return set()
    started = {int(t) for t in re.findall(r"Executor: Running task \S+ in stage \S+ \(TID (\d+)\)", text)}
    ended = {int(t) for t in re.findall(r"(?:Finished|killed) task \S+ in stage \S+ \(TID (\d+)\)", text)}
    ended |= {int(t) for t in re.findall(r"Exception in task \S+ in stage \S+ \(TID (\d+)\)", text)}
    return started - ended


def _finished_tasks(executor_dir: Path) -> int:
    """Tasks an executor finished, counted in its own log (the worker keeps it in the work dir)."""
    try:
        text = (executor_dir / "stderr").read_text(errors="replace")
    except OSError:
        return 0
    return len(re.findall(r"Executor: Finished task ", text))


def _fleet(run_id: str, prefix: str, updates: int):
    spec = FleetSpec(topic_prefix=f"{prefix}{run_id}-sensor-", sensors=2, sessions_per_sensor=2,
                     rows=30, updates=updates, rows_per_update=2, resync_every=120, seed=29)
    messages = list(plan_fleet(spec))
    produce(spec, messages, PARTITIONS)
    return messages, f"{prefix}{run_id}-sensor-[0-9]+"


def test_both_executors_run_the_pipeline_and_one_killed_mid_stream_loses_and_repeats_nothing(
        cluster, spark, run_id, tmp_path):
    messages, pattern = _fleet(run_id, "sakill", updates=145)  # 588: four batches of <= 150
    root = f"s3a://{localstack.S3_BUCKET}/standalone/{run_id}"
    log_path = tmp_path / "run.log"
    before = cluster.app_ids()
    with open(log_path, "w") as log:
        # INFO: the driver's "Lost task ... (TID n)" lines show which tasks it had to run again, and
        # its "Finished task ... (TID n) in N ms" lines which results reached it.
        proc = _start(cluster, tmp_path, pattern, root, 150, log, log_level="INFO")
        app = _await_app(cluster, before, proc, log_path)
        # Let a few batches through, then kill -9 an executor while it runs a task of the next.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(_batches(log_path)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        victim = None
        while victim is None and proc.poll() is None and time.monotonic() < deadline:
            executors = cluster.executor_pids(app)
            assert len(executors) == 2, f"expected 2 live executors of {app}, found {executors}"
            dirs = {exec_id: d for _, exec_id, d in cluster.executor_dirs(app)}
            busy = [pid for pid, exec_id in sorted(executors.items()) if _running_tasks(dirs[exec_id])]
            victim = busy[0] if busy else None
            time.sleep(0 if victim else 0.05)
        assert victim is not None, f"the run ended before the kill; log tail:\n{_tail(log_path)}"
        done_before_kill = _batches(log_path)
        victim_id = executors[victim]
        os.kill(victim, signal.SIGKILL)
        _finish(proc, log_path)

    # The kill landed mid-stream: data remained, and later batches read it.
    batches = _batches(log_path)
    assert sum(done_before_kill) < len(messages) and len(batches) >= len(done_before_kill) + 2, (
        done_before_kill, batches, len(messages))
    assert sum(batches) == len(messages), _tail(log_path)
    assert victim not in cluster.executor_pids(), f"executor pid {victim} survived SIGKILL"
    # The driver saw the executor go and marked every task it had in flight lost (to run again).
    driver_log = log_path.read_text(errors="replace")
    assert f"Lost executor {victim_id} " in driver_log, _tail(log_path)
    in_flight = _running_tasks({e: d for _, e, d in cluster.executor_dirs(app)}[victim_id])
    lost = {int(t) for t in re.findall(r"Lost task \S+ in stage \S+ \(TID (\d+)\)", driver_log)}
    # A task whose result reached the driver as the kill landed is done, though the executor died
    # before its own log said so.
    finished = {int(t) for t in re.findall(r"Finished task \S+ in stage \S+ \(TID (\d+)\) in \d+ ms", driver_log)}
    assert in_flight <= lost | finished, (f"tasks in flight at the kill: {in_flight}; the driver re-ran: {lost}, "
                                          f"and received the results of: {sorted(in_flight & finished)}")
    # The master replaced the dead executor: a third executor of this application was launched.
    launched = cluster.executor_dirs(app)
    assert len(launched) >= 3, f"no replacement executor for {app}: {launched}"
    assert_exact(spark, f"{root}/tables", messages, NAMES)

    # Both executors, on both workers, ran tasks of this application (the killed one before its kill).
    tasks = {(worker, exec_id): _finished_tasks(d) for worker, exec_id, d in launched}
    assert {worker for (worker, _), n in tasks.items() if n > 0} == {0, 1}, (
        f"finished tasks per (worker, executor) of {app}: {tasks}")
