"""The command line as a user runs it: a subprocess of this interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "reconstructor", *args], capture_output=True,
                          text=True, timeout=timeout)


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
