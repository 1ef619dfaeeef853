"""A continuous ``run`` stopped as operators and schedulers stop it: SIGTERM (systemd, YARN,
Kubernetes, a job's cancel) and Ctrl-C's SIGINT, each sent to the run's whole process group (the
driver JVM gets it too).  Each ends with one ``reconstructor:`` line and exit 143 or 130, never a
traceback and never a restart, and the next run on the same checkpoint leaves the tables exact.

Three runs in all, one checkpoint: SIGTERM while a batch is in flight, SIGINT after the next run's
first batch, then a run to the end that catches up (in the test's own process)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconstructor.contract.row_schema import RowSchema
from tests.support.pipeline import assert_exact, produce, run
from workbench.fleet import FleetSpec, plan_fleet

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names
PARTITIONS = 2
WAIT_S = 300
# The grace a batch in flight gets (reconstructor.spark.restarts.STOP_GRACE), with room for the stop
# itself and the driver's exit on a busy machine.
STOP_BOUND_S = 60
STOPPED = re.compile(r"^reconstructor: stopped by (SIGTERM|SIGINT): \S.*$")


def _start(bootstrap: str, pattern: str, out: Path, chk: Path, err: Path, *flags: str):
    """The installed CLI (the venv's ``reconstructor``), run from a folder other than the checkout:
    it finds the jars ``make jars`` filled there."""
    folder = err.parent / "elsewhere"
    folder.mkdir(exist_ok=True)
    with open(err, "w") as fh:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "reconstructor"), "run", "--bootstrap-servers", bootstrap,
             "--topic-pattern", pattern, "--output", str(out), "--checkpoint", str(chk),
             "--compact-every", "off", *flags],
            stdout=subprocess.DEVNULL, stderr=fh, start_new_session=True, cwd=folder,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _committed(chk: Path) -> set[int]:
    """The batches the checkpoint has committed (its ``commits`` log)."""
    try:
        return {int(f.name) for f in (chk / "commits").iterdir() if f.name.isdigit()}
    except FileNotFoundError:
        return set()


def _planned(chk: Path) -> set[int]:
    """The batches the checkpoint has planned (its ``offsets`` log): one beyond the last commit is
    in flight."""
    try:
        return {int(f.name) for f in (chk / "offsets").iterdir() if f.name.isdigit()}
    except FileNotFoundError:
        return set()


def _await(what: str, done, proc, err: Path, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended ({proc.returncode}) before {what}:\n{_tail(err)}"
        if done():
            return
        time.sleep(poll_s)
    pytest.fail(f"never {what}:\n{_tail(err)}")


def _tail(err: Path) -> str:
    return err.read_text(errors="replace")[-4000:]


def _signal_and_wait(proc, sig: int, err: Path) -> tuple[str, float]:
    """Send ``sig`` to the run's process group (as a terminal's Ctrl-C, systemd or YARN do) and
    return its stderr and the seconds it took to end."""
    sent = time.monotonic()
    os.killpg(proc.pid, sig)
    try:
        proc.wait(STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the run did not end within {STOP_BOUND_S}s of {sig.name}:\n{_tail(err)}")
    return err.read_text(errors="replace"), time.monotonic() - sent


def _assert_one_line(text: str, sig: signal.Signals, proc) -> str:
    assert proc.returncode == 128 + sig, (proc.returncode, text[-4000:])
    assert "Traceback" not in text and "py4j" not in text.lower(), text[-4000:]
    ours = [line for line in text.splitlines() if line.startswith("reconstructor:")]
    assert len(ours) == 1, text[-4000:]
    match = STOPPED.match(ours[0])
    assert match and match.group(1) == sig.name, ours
    assert text.rstrip().splitlines()[-1] == ours[0], text[-4000:]
    return ours[0]


def test_sigterm_and_sigint_stop_a_continuous_run_with_one_line_and_the_next_run_is_exact(
        stack, spark, run_id, tmp_path, capsys):
    from reconstructor.cli import main as cli_main

    spec = FleetSpec(topic_prefix=f"sig{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=20,
                     updates=200, rows_per_update=2, resync_every=80, end_sessions=True, seed=11)
    messages = list(plan_fleet(spec))
    first, second = len(messages) * 2 // 3, len(messages) * 5 // 6
    bootstrap, pattern = stack.bootstrap_servers(), f"sig{run_id}-sensor-[0-9]+"
    out, chk = tmp_path / "out", tmp_path / "chk"
    produce(spec, messages[:first], PARTITIONS)

    # SIGTERM while a batch is in flight: small batches back to back over a backlog.
    err = tmp_path / "sigterm.err"
    proc = _start(bootstrap, pattern, out, chk, err, "--trigger", "2 seconds",
                  "--max-offsets-per-trigger", "120")
    try:
        _await("a first batch committed", lambda: 0 in _committed(chk), proc, err, poll_s=0.5)
        _await("a batch in flight", lambda: max(_planned(chk)) > max(_committed(chk)), proc, err)
        text, took = _signal_and_wait(proc, signal.SIGTERM, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    line = _assert_one_line(text, signal.SIGTERM, proc)
    assert "restart" not in text, text[-4000:]
    print(f"\nSIGTERM with a batch in flight, ended in {took:.1f}s: {line}")
    after_sigterm = max(_committed(chk))

    # SIGINT (Ctrl-C) on the next run between batches: once it ran what the first one left (the
    # batch that run planned, then the rest in one batch), with no batch in flight.
    produce(spec, messages[first:second], PARTITIONS, create=False)
    err = tmp_path / "sigint.err"
    proc = _start(bootstrap, pattern, out, chk, err, "--trigger", "2 seconds")
    try:
        _await("two batches committed", lambda: max(_committed(chk)) > after_sigterm + 1, proc, err,
               poll_s=0.2)
        # One writing driver per output: a replay into the live run's output is refused before
        # it starts Spark, and the hourly compact job leaves the work to the run's compaction.
        code = cli_main(["replay", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern, "--output",
                         str(out), "--checkpoint", str(tmp_path / "chk-replay"), "--from", "earliest"])
        assert code == 2
        refused = capsys.readouterr().err.strip().splitlines()[-1]
        assert refused.startswith(f"reconstructor: the output {out} is being written by a run of the checkpoint "
                                  f"{chk} on "), refused
        assert cli_main(["compact", "--output", str(out)]) == 0
        compacted = capsys.readouterr().out.strip()
        assert compacted.startswith(f"nothing to do: the output {out} is being written by a run of the "
                                    f"checkpoint {chk} on ") and compacted.endswith("in-stream compaction compacts it")
        _await("no batch in flight", lambda: max(_planned(chk)) == max(_committed(chk)), proc, err)
        text, took = _signal_and_wait(proc, signal.SIGINT, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    line = _assert_one_line(text, signal.SIGINT, proc)
    assert "abandoned" not in line, line  # no batch in flight, or one that ended within the grace
    print(f"SIGINT between batches, ended in {took:.1f}s: {line}")

    # The next run catches up on the same checkpoint (in this process: its subject is the tables,
    # not the process): the tables are exact.
    produce(spec, messages[second:], PARTITIONS, create=False)
    run(spark, pattern, str(out), str(chk))
    assert_exact(spark, str(out), messages, NAMES)
