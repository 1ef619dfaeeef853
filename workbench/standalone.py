"""A Spark standalone cluster on 127.0.0.1 (one Master, N Workers) from pyspark's own jars.

Why: ``local[*]`` runs driver and tasks in one JVM, so it never shows what a real cluster does to
the job: tasks of one micro-batch spread over several executors, the state store loaded by
whichever executor runs a partition, executors that die and are replaced while the query runs.
This module starts a small real cluster on loopback so that tests (and a curious engineer) can run
the unchanged pipeline against ``spark://127.0.0.1:<port>``.

pyspark's pip package ships ``bin/spark-class`` but not ``sbin/start-master.sh``, so the daemons
are started here directly::

    spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port P --webui-port W
    spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:P --host 127.0.0.1 \\
        --cores 1 --memory 2g --webui-port W2 --work-dir DIR

Every daemon gets free ports, ``SPARK_LOCAL_IP=127.0.0.1`` and its own process group (executors a
worker launches join that group, so stopping the group stops them too). Logs and work dirs live in
a folder the caller gives. An application reaches it with ``master_url`` and ``app_conf()``.

Usage: ``python -m workbench.standalone up|down|status [--dir DIR] [--workers N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from workbench.processes import pid_alive, stack_dir

HOST = "127.0.0.1"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
_STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The cluster could not start or answer; the message names the log to read."""


def spark_home() -> Path:
    """pyspark's package folder: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A port that was free a moment ago (bind port 0 on loopback and read what the OS picked)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class Daemon:
    name: str
    cmd: list[str]
    log: Path
    webui_port: int
    work_dir: Path | None = None
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Cluster:
    """A running (or stopped) standalone cluster; ``stop()`` ends every process it started."""

    folder: Path
    master_port: int
    master: Daemon
    workers: list[Daemon]
    worker_cores: int = 1

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.master.webui_port}"

    def app_conf(self, python: str | None = None, executor_memory: str = "1g") -> dict[str, str]:
        """Spark settings for an application on this cluster: 1 core and ``executor_memory`` per
        executor, one executor per worker, the given Python (default: this interpreter) on the
        executors, and the driver waits until every executor has registered (up to 30 s) so the
        first batch already runs on all of them. ``build_spark`` adds the rest: the project's jars
        on both sides (``spark.driver/executor.extraClassPath``) and, for a master on loopback, the
        driver bound to 127.0.0.1 (``spark.driver.host``/``bindAddress``)."""
        python = python or sys.executable
        return {
            "spark.executor.cores": "1",
            "spark.executor.memory": executor_memory,
            "spark.cores.max": str(len(self.workers) * self.worker_cores),
            "spark.executorEnv.PYSPARK_PYTHON": python,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "30s",
        }

    # -- inspection ------------------------------------------------------------------------------

    def master_json(self, timeout: float = 5.0) -> dict:
        return _get_json(f"{self.webui_url}/json/", timeout)

    def worker_json(self, index: int, timeout: float = 5.0) -> dict:
        return _get_json(f"http://{HOST}:{self.workers[index].webui_port}/json/", timeout)

    def alive_workers(self) -> int:
        return sum(1 for w in self.master_json().get("workers", []) if w.get("state") == "ALIVE")

    def executor_dirs(self, app_id: str) -> list[tuple[int, str, Path]]:
        """(worker index, executor id, folder) of every executor of ``app_id`` ever launched here;
        the folder holds the executor's ``stdout`` and ``stderr``."""
        found = []
        for i, w in enumerate(self.workers):
            app_dir = w.work_dir / app_id if w.work_dir else None
            if app_dir is not None and app_dir.is_dir():
                for d in sorted(app_dir.iterdir(), key=lambda p: p.name):
                    if d.is_dir():
                        found.append((i, d.name, d))
        return found

    def app_ids(self) -> set[str]:
        """Applications that have a folder in some worker's work dir (running or finished)."""
        return {d.name for w in self.workers if w.work_dir and w.work_dir.is_dir()
                for d in w.work_dir.iterdir() if d.is_dir() and d.name.startswith("app-")}

    def executor_pids(self, app_id: str | None = None) -> dict[int, str]:
        """{pid: executor id} of the live executor JVMs of this cluster (of ``app_id`` if given).

        Read from /proc: a java process whose command line names ``CoarseGrainedExecutorBackend``
        and whose working directory lies under one of this cluster's work dirs (the worker starts
        every executor in ``<work-dir>/<app-id>/<executor-id>``)."""
        roots = [w.work_dir.resolve() for w in self.workers if w.work_dir]
        pids: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
                if EXECUTOR_CLASS.encode() not in args:
                    continue
                cwd = Path(os.readlink(entry / "cwd")).resolve()
            except OSError:
                continue
            if not any(cwd.is_relative_to(r) for r in roots) or not pid_alive(int(entry.name)):
                continue
            argv = [a.decode(errors="replace") for a in args]
            if app_id is not None and _arg(argv, "--app-id") != app_id:
                continue
            pids[int(entry.name)] = _arg(argv, "--executor-id") or cwd.name
        return pids

    # -- lifecycle -------------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the master's JSON UI reports every worker ALIVE; a clear error otherwise."""
        deadline = time.monotonic() + timeout
        alive = 0
        while time.monotonic() < deadline:
            for d in [self.master, *self.workers]:
                if not d.alive():
                    raise ClusterError(f"the Spark {d.name} exited during start-up; see {d.log}:\n"
                                       f"{d.log_tail()}")
            try:
                alive = self.alive_workers()
            except (OSError, ValueError):  # not listening yet, or /json/ not routed yet (HTML)
                alive = 0
            if alive >= len(self.workers):
                return
            time.sleep(0.5)
        raise ClusterError(
            f"the Spark master at {self.webui_url}/json/ reported {alive} of {len(self.workers)} "
            f"workers ALIVE after {timeout:.0f}s; see {self.master.log} and "
            f"{', '.join(str(w.log) for w in self.workers)}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the workers (each stops and reaps its executors), then the master; after
        ``timeout`` SIGKILL whatever is left in their process groups (executors included)."""
        daemons = [*self.workers, self.master]
        deadline = time.monotonic() + timeout
        for group in (self.workers, [self.master]):
            for d in group:
                _signal(d.pid, signal.SIGTERM)
            while time.monotonic() < deadline and any(_group_alive(d.pid) for d in group):
                time.sleep(0.2)
        for d in daemons:
            if _group_alive(d.pid):
                _signal(d.pid, signal.SIGKILL, group=True)
        for d in daemons:
            if d.proc is not None:
                try:
                    d.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        (self.folder / _STATE_FILE).unlink(missing_ok=True)

    # -- persistence, for the detached CLI -------------------------------------------------------

    def save(self) -> None:
        data = {"master_port": self.master_port, "worker_cores": self.worker_cores,
                "daemons": [{"name": d.name, "pid": d.pid, "log": str(d.log), "webui_port": d.webui_port,
                             "work_dir": str(d.work_dir) if d.work_dir else None}
                            for d in [self.master, *self.workers]]}
        (self.folder / _STATE_FILE).write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, folder: Path) -> Cluster | None:
        try:
            data = json.loads((Path(folder) / _STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        # A pid from the file counts only while it is still a Spark daemon (pids get reused).
        daemons = [Daemon(d["name"], [], Path(d["log"]), d["webui_port"],
                          Path(d["work_dir"]) if d["work_dir"] else None,
                          d["pid"] if _is_spark_daemon(d["pid"]) else None)
                   for d in data["daemons"]]
        return cls(Path(folder), data["master_port"], daemons[0], daemons[1:],
                   data.get("worker_cores", 1))


def start(folder: str | os.PathLike, *, workers: int = 2, cores: int = 1, memory: str = "2g",
          daemon_memory: str = "512m", python: str | None = None, timeout: float = 120.0) -> Cluster:
    """Start a Master and ``workers`` Workers on 127.0.0.1 and wait until all are ALIVE.

    Logs go to ``<folder>/logs/``, worker work dirs (executor stdout/stderr) to
    ``<folder>/work/worker-<i>/``. On any start-up failure everything started is stopped again.
    """
    _require_java()
    folder = Path(folder).resolve()
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    home = spark_home()
    spark_class = home / "bin" / "spark-class"
    if not spark_class.exists():
        raise ClusterError(f"{spark_class} is missing: is pyspark installed from pip?")
    python = python or sys.executable
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST,
           "SPARK_DAEMON_MEMORY": daemon_memory, "PYSPARK_PYTHON": python,
           # The master's REST submission server would take the fixed port 6066: not needed here.
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    env.pop("SPARK_CONF_DIR", None)
    master_port, master_ui = free_port(), free_port()
    master = Daemon("master", [str(spark_class), "org.apache.spark.deploy.master.Master",
                               "--host", HOST, "--port", str(master_port),
                               "--webui-port", str(master_ui)],
                    logs / "master.log", master_ui)
    cluster = Cluster(folder, master_port, master, [], cores)
    for i in range(workers):
        ui = free_port()
        work = folder / "work" / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        cluster.workers.append(Daemon(
            f"worker-{i}",
            [str(spark_class), "org.apache.spark.deploy.worker.Worker", cluster.master_url,
             "--host", HOST, "--cores", str(cores), "--memory", memory, "--webui-port", str(ui),
             "--work-dir", str(work)],
            logs / f"worker-{i}.log", ui, work))
    try:
        _launch(master, env)
        _wait_port(master, master_port, timeout)
        for w in cluster.workers:
            _launch(w, env)
        cluster.wait_ready(timeout)
    except BaseException:
        cluster.stop()
        raise
    cluster.save()
    return cluster


@contextmanager
def standalone_cluster(folder: str | os.PathLike, **kw) -> Iterator[Cluster]:
    """``with standalone_cluster(tmp) as c: ...`` -- started and ALIVE inside, stopped after."""
    cluster = start(folder, **kw)
    try:
        yield cluster
    finally:
        cluster.stop()


# --------------------------------------------------------------------------------------------------


def _launch(d: Daemon, env: dict[str, str]) -> None:
    with open(d.log, "ab") as log:
        d.proc = subprocess.Popen(d.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=env, start_new_session=True)
    d.pid = d.proc.pid


def _wait_port(d: Daemon, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not d.alive():
            raise ClusterError(f"the Spark {d.name} exited during start-up; see {d.log}:\n{d.log_tail()}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.3)
    raise ClusterError(f"the Spark {d.name} did not listen on {HOST}:{port} within {timeout:.0f}s; "
                       f"see {d.log}")


def _get_json(url: str, timeout: float) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def _arg(argv: list[str], flag: str) -> str | None:
    try:
        return argv[argv.index(flag) + 1]
    except (ValueError, IndexError):
        return None


def _is_spark_daemon(pid: int | None) -> bool:
    try:
        return pid is not None and b"org.apache.spark.deploy." in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _group_alive(pgid: int | None) -> bool:
    if pgid is None:
        return False
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":  # fields after ")": state ppid pgrp
                return True
    return False


def _signal(pid: int | None, sig: int, *, group: bool = False) -> None:
    """Signal a process (or, with ``group``, its process group) that may already be gone."""
    if pid is None:
        return
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _require_java() -> None:
    if shutil.which("java") is None and not (
            os.environ.get("JAVA_HOME") and (Path(os.environ["JAVA_HOME"]) / "bin" / "java").exists()):
        raise ClusterError("Java is not installed: install OpenJDK 17 or set JAVA_HOME")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.standalone",
                                     description="A Spark standalone cluster on 127.0.0.1 (detached).")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--dir", default=str(stack_dir() / "standalone"),
                        help="logs, work dirs and the pid file (default .stack/standalone)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    folder = Path(args.dir).resolve()
    running = Cluster.load(folder)
    if running is not None and not running.master.alive():
        running.stop()
        running = None
    if args.action == "up":
        if running is None:
            try:
                running = start(folder, workers=args.workers)
            except ClusterError as exc:
                print(f"standalone: {exc}", file=sys.stderr)
                return 1
            print(f"started: {running.master_url} (UI {running.webui_url}, logs {folder / 'logs'})")
        else:
            print(f"already running: {running.master_url} (UI {running.webui_url})")
        print("run the pipeline on it with `reconstructor run --config cluster.toml ...`, where "
              f"cluster.toml holds:\n  master = \"{running.master_url}\"\n  [spark]")
        for k, v in running.app_conf().items():
            print(f'  "{k}" = "{v}"')
    elif args.action == "down":
        if running is None:
            print(f"no cluster running from {folder}")
        else:
            running.stop()
            print(f"stopped {running.master_url}")
    else:
        if running is None:
            print(f"no cluster running from {folder}")
            return 1
        try:
            print(f"{running.master_url}: {running.alive_workers()} worker(s) ALIVE (UI {running.webui_url})")
        except OSError as exc:
            print(f"{running.master_url}: master UI does not answer ({exc})")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
