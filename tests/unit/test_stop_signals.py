"""SIGINT and SIGTERM on a run: the exit codes, what the handler does when, the grace a batch in
flight gets (over a stand-in for the streaming query: no Spark), and the one line."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
import types

import pytest

from reconstructor.cli import app as cli
from reconstructor.spark import pipeline
from reconstructor.errors import EXIT_SIGINT, EXIT_SIGTERM, StoppedBySignal
from reconstructor.spark.restarts import (STOP_GRACE, Restarts, StopRequest, StopSignals, engine_ignores_sigterm,
                                    transient)

SECOND = dt.timedelta(seconds=1)
RAN = {"batchId": 7, "durationMs": {"addBatch": 120, "triggerExecution": 300}}


def test_a_signal_ends_a_run_with_128_plus_its_number_and_never_restarts():
    assert (EXIT_SIGINT, EXIT_SIGTERM) == (130, 143)
    stopped = StoppedBySignal(signal.SIGTERM, "after batch 7")
    assert stopped.exit_code == 143 and str(stopped) == "stopped by SIGTERM: after batch 7"
    assert StoppedBySignal(signal.SIGINT, "x").exit_code == 130
    assert not transient(stopped)
    assert Restarts(5, SECOND).after(stopped) is None


def test_the_first_signal_is_left_to_an_awaited_query_and_ends_anything_else_at_once():
    request = StopRequest()
    assert request.receive(signal.SIGTERM, now=1.0)  # starting or restarting: the handler raises
    request = StopRequest(awaiting=True)
    assert not request.receive(signal.SIGTERM, now=1.0)
    assert request.requested and not request.at_once and request.signum == signal.SIGTERM
    assert not request.receive(signal.SIGINT, now=2.0)  # the loop cuts its waits short instead
    assert request.at_once and request.signum == signal.SIGTERM  # the first signal's exit code
    assert request.stopped().exit_code == 143


def test_a_batch_in_flight_is_waited_for_up_to_the_grace_and_not_after_a_second_signal():
    request = StopRequest(awaiting=True)
    request.receive(signal.SIGINT, now=100.0)
    grace = STOP_GRACE.total_seconds()
    assert request.waits(in_flight=True, now=100.0 + grace - 0.1)
    assert not request.waits(in_flight=True, now=100.0 + grace)
    assert not request.waits(in_flight=False, now=100.0)  # between batches: stop at once
    request.receive(signal.SIGINT, now=101.0)
    assert not request.waits(in_flight=True, now=101.0)


def test_the_line_says_after_which_batch_and_what_became_of_the_one_in_flight():
    request = StopRequest(awaiting=True)
    request.receive(signal.SIGTERM, now=0.0)
    assert request.where() == "before this run committed a batch"
    request.progressed({"batchId": 3, "durationMs": {"triggerExecution": 2}})  # an idle trigger
    assert request.last_batch is None
    request.progressed(RAN)
    assert request.where() == "after batch 7"
    assert request.where(abandoned=True) == (
        "after batch 7; the batch in flight was abandoned after the 10s grace and the next run runs it again")
    request.receive(signal.SIGTERM, now=1.0)
    assert "abandoned on a second signal" in request.where(abandoned=True)


@pytest.fixture
def handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_the_handler_raises_only_when_no_query_is_awaited(handlers):
    signals = StopSignals()
    assert signals.install()
    signals.request.awaiting = True
    os.kill(os.getpid(), signal.SIGTERM)
    assert signals.request.requested  # recorded, nothing raised
    signals = StopSignals()
    signals.install()
    with pytest.raises(StoppedBySignal) as stopped:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs in this thread at once
    assert stopped.value.exit_code == 130
    assert str(stopped.value) == "stopped by SIGINT: before this run committed a batch"


def test_the_engine_is_started_with_sigterm_ignored_and_other_children_are_not():
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGTERM).name)"]
    with engine_ignores_sigterm():  # PySpark launches the JVM with a preexec_fn, as here
        inside = subprocess.run(probe, capture_output=True, text=True, preexec_fn=lambda: None).stdout
    outside = subprocess.run(probe, capture_output=True, text=True, preexec_fn=lambda: None).stdout
    assert inside.strip() == "SIG_IGN", inside
    assert outside.strip() == "SIG_DFL", outside


def test_the_cli_ends_a_stop_or_an_interrupt_with_one_line_and_its_exit_code(monkeypatch, capsys):
    def stopped(args):
        raise StoppedBySignal(signal.SIGTERM, "after batch 4")

    monkeypatch.setattr(cli, "_dispatch", stopped)
    assert cli.main(["config", "show"]) == 143
    assert capsys.readouterr().err == "reconstructor: stopped by SIGTERM: after batch 4\n"

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_dispatch", interrupted)
    assert cli.main(["config", "show"]) == 130
    assert capsys.readouterr().err == "reconstructor: stopped by SIGINT: interrupted before it finished\n"


# ---- the await loop over a stand-in for the streaming query --------------------------------------


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Query:
    """A streaming query that commits ``batch`` and then runs the next one for ``runs_for`` seconds
    of the clock (forever when None), with ``signal_at`` the clock's time a signal arrives."""

    def __init__(self, clock: Clock, request: StopRequest, *, in_flight: bool, runs_for: float | None = None,
                 signals: tuple = (), fails: BaseException | None = None):
        self.clock, self.request = clock, request
        self.batch, self.in_flight, self.runs_for = 4, in_flight, runs_for
        self.signals, self.fails = list(signals), fails
        self.started = clock.now
        self.stopped = False

    def awaitTermination(self, timeout=None):
        self.clock.now += timeout or 0
        while self.signals and self.signals[0][0] <= self.clock.now:
            _, sig = self.signals.pop(0)
            assert not self.request.receive(sig, self.clock.now)  # the handler raises nothing
        if self.fails is not None and self.request.requested:
            raise self.fails
        if (self.in_flight and self.runs_for is not None
                and self.clock.now - self.started >= self.runs_for):
            self.batch, self.in_flight = self.batch + 1, False
        return self.stopped

    @property
    def lastProgress(self):
        return {"batchId": self.batch, "durationMs": {"addBatch": 5, "triggerExecution": 9}}

    @property
    def status(self):
        return {"isTriggerActive": self.in_flight}

    def stop(self):
        self.stopped = True


def _await(monkeypatch, **query) -> tuple[StoppedBySignal, Query, Clock]:
    clock, request = Clock(), StopRequest()
    monkeypatch.setattr(pipeline, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(pipeline, "_bounded", lambda call, seconds, stop=None: call())
    q = Query(clock, request, **query)
    # The sinks' SparkSession is only handed to ``_mute_engine`` (before a batch is abandoned): a
    # marker object, and ``q.muted`` records what was muted.
    spark, q.muted = object(), []
    monkeypatch.setattr(pipeline, "_mute_engine", lambda session: q.muted.append(session is spark))
    running = pipeline.RunningPipeline(q, types.SimpleNamespace(violation=None, spark=spark))
    with pytest.raises(StoppedBySignal) as stopped:
        running.await_termination(poll_s=0.5, stop=request)
    return stopped.value, q, clock


def test_between_batches_the_query_stops_at_once(monkeypatch):
    stopped, q, clock = _await(monkeypatch, in_flight=False, signals=[(1001.0, signal.SIGTERM)])
    assert q.stopped and clock.now - 1001.0 < 1 and q.muted == []
    assert str(stopped) == "stopped by SIGTERM: after batch 4" and stopped.exit_code == 143


def test_a_batch_that_ends_within_the_grace_is_committed_first(monkeypatch):
    stopped, q, clock = _await(monkeypatch, in_flight=True, runs_for=6.0, signals=[(1001.0, signal.SIGINT)])
    assert q.stopped and 1006.0 <= clock.now < 1001.0 + STOP_GRACE.total_seconds() and q.muted == []
    assert str(stopped) == "stopped by SIGINT: after batch 5" and stopped.exit_code == 130


def test_a_batch_longer_than_the_grace_is_abandoned(monkeypatch):
    stopped, q, clock = _await(monkeypatch, in_flight=True, signals=[(1001.0, signal.SIGTERM)])
    assert q.stopped and clock.now == pytest.approx(1001.0 + STOP_GRACE.total_seconds(), abs=0.6)
    assert q.muted == [True]  # the engine's own report of the interrupted batch is silenced
    assert str(stopped) == ("stopped by SIGTERM: after batch 4; the batch in flight was abandoned after the "
                            "10s grace and the next run runs it again")


def test_a_second_signal_abandons_the_batch_in_flight_at_once(monkeypatch):
    stopped, q, clock = _await(monkeypatch, in_flight=True,
                               signals=[(1001.0, signal.SIGTERM), (1003.0, signal.SIGTERM)])
    assert q.stopped and clock.now < 1004.0 and q.muted == [True]
    assert "abandoned on a second signal" in str(stopped) and stopped.exit_code == 143


def test_a_failure_after_the_signal_is_the_stop_never_a_restart(monkeypatch):
    # e.g. a driver JVM that got the SIGTERM too and went away
    stopped, q, clock = _await(monkeypatch, in_flight=True, signals=[(1001.0, signal.SIGTERM)],
                               fails=RuntimeError("Answer from Java side is empty"))
    assert stopped.exit_code == 143 and "abandoned" in str(stopped)
