"""The command line as a user runs it: a subprocess of this interpreter (``cli``), or the same
entry point in this process over the suite's one SparkSession (``cli_in_process``)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.request


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "reconstructor", *args], capture_output=True,
                          text=True, timeout=timeout)


def cli_in_process(*args) -> subprocess.CompletedProcess:
    """``reconstructor ARGS`` through its entry point (``reconstructor.cli.main``) in this process:
    its exit code and its stdout and stderr, as ``cli`` gives them.  The command's SparkSession is
    the suite's (``getOrCreate`` finds it), so no JVM starts.  For the tests whose subject is not
    the process boundary: exit codes of a real process, signals, crashes and the wheel keep
    ``cli``.  What a command leaves in the process is put back: the SQL settings it applied to the
    session, the signal handlers a run installs and the log handlers."""
    from pyspark.sql import SparkSession

    from reconstructor.cli import main

    spark = SparkSession.getActiveSession()
    assert spark is not None, "cli_in_process runs over the suite's SparkSession: use the spark fixture"
    conf = dict(spark.conf.getAll)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    out, err = io.StringIO(), io.StringIO()
    root.handlers = [logging.StreamHandler(err)]
    root.handlers[0].setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exit_:  # argparse's usage errors and --help
                code = exit_.code if isinstance(exit_.code, int) else 2
    finally:
        root.handlers, root.level = saved_handlers, saved_level
        for s, handler in handlers.items():
            signal.signal(s, handler)
        now = dict(spark.conf.getAll)
        for key in now.keys() - conf.keys():
            with contextlib.suppress(Exception):  # a static setting the command could not change
                spark.conf.unset(key)
        for key, value in conf.items():
            if now.get(key) != value:
                with contextlib.suppress(Exception):
                    spark.conf.set(key, value)
    return subprocess.CompletedProcess(["reconstructor", *args], code, out.getvalue(), err.getvalue())


def produce(*args, timeout=600):
    """The workbench's demo fleet producer (``python -m workbench produce``), as ``make demo`` runs it."""
    return subprocess.run([sys.executable, "-m", "workbench", "produce", *args], capture_output=True,
                          text=True, timeout=timeout)


def refusal_line(result) -> str:
    """The one ``reconstructor:`` line of a command refused as bad usage (exit 2)."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("reconstructor:")]
    return line


def scrape_metrics(host: str, port: int) -> dict[str, float]:
    """A metrics endpoint's samples, ``{'name{labels}': value}``, as a Prometheus scrape reads them."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def stop_run(proc: subprocess.Popen) -> int:
    """Stop a CLI run started in its own process group as an operator does: Ctrl-C (the run stops
    within its grace with one "reconstructor: stopped by SIGINT: ..." line, exit 130), then SIGKILL
    of the group if it does not end within a minute.  Returns the run's exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


class ArgumentScan:
    """Every process's command line (``ps -eww``: whole, not cut to a width), polled while the
    ``with`` block runs: ``found`` holds where a line shows one of ``values`` (any local user sees
    it there), ``seen`` whether some line showed ``marker``, which proves the scan saw the process
    it was meant to."""

    def __init__(self, values: list[str], marker: str, every_s: float = 0.1):
        self.values, self.marker, self.every_s = values, marker, every_s
        self.found: set[str] = set()
        self.seen = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="argument-scan", daemon=True)

    def __enter__(self) -> ArgumentScan:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _poll(self) -> None:
        while True:
            listed = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True).stdout
            for line in listed.splitlines():
                self.seen = self.seen or self.marker in line
                for value in self.values:
                    if value in line:
                        at = line.index(value)
                        self.found.add(f"...{line[max(0, at - 80):at + len(value)]}")
            if self._done.wait(self.every_s):
                return
