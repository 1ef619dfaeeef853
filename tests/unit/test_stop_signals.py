"""SIGINT and SIGTERM on a run: the exit codes, what the handler does when, the grace a batch in
flight gets (the await loop's moves, as pure decisions), and the one line.  The loop itself, over a
real query, is ``tests/integration/test_signals.py``'s."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time

import pytest

from reconstructor.cli import app as cli
from reconstructor.errors import EXIT_SIGINT, EXIT_SIGTERM, StoppedBySignal
from reconstructor.spark.restarts import (
    STOP_GRACE,
    Restarts,
    StopRequest,
    StopSignals,
    StopStep,
    engine_ignores_sigterm,
    transient,
)

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


# ---- the await loop's moves after a signal (``StopRequest.next_step``) ------------------------------


def _progress(batch: int) -> dict:
    return {"batchId": batch, "durationMs": {"addBatch": 5, "triggerExecution": 9}}


def _signalled(*at: float) -> StopRequest:
    request = StopRequest(awaiting=True)
    for now in at:
        request.receive(signal.SIGTERM, now)
    return request


def test_between_batches_the_query_stops_at_once():
    request = _signalled(1001.0)
    assert request.next_step(4, _progress(4), trigger_active=False, now=1001.0) is StopStep.STOP
    assert request.next_step(None, None, trigger_active=False, now=1001.0) is StopStep.STOP


def test_a_batch_that_ends_within_the_grace_is_committed_first():
    request = _signalled(1001.0)
    assert request.next_step(4, _progress(4), trigger_active=True, now=1001.0) is StopStep.WAIT
    assert request.next_step(4, _progress(4), trigger_active=True, now=1006.0) is StopStep.WAIT
    # batch 5 committed and the next trigger already began: that one is not waited for
    assert request.next_step(4, _progress(5), trigger_active=True, now=1006.5) is StopStep.STOP
    request.progressed(_progress(5))
    assert str(request.stopped(abandoned=False)) == "stopped by SIGTERM: after batch 5"


def test_a_batch_longer_than_the_grace_is_abandoned():
    request = _signalled(1001.0)
    grace = STOP_GRACE.total_seconds()
    assert request.next_step(4, _progress(4), trigger_active=True, now=1001.0 + grace - 0.1) is StopStep.WAIT
    assert request.next_step(4, _progress(4), trigger_active=True, now=1001.0 + grace) is StopStep.ABANDON
    request.progressed(_progress(4))
    assert str(request.stopped(abandoned=True)) == (
        "stopped by SIGTERM: after batch 4; the batch in flight was abandoned after the 10s grace and the next "
        "run runs it again")


def test_a_second_signal_abandons_the_batch_in_flight_at_once():
    request = _signalled(1001.0, 1003.0)
    assert request.next_step(4, _progress(4), trigger_active=True, now=1003.0) is StopStep.ABANDON
    assert request.next_step(4, _progress(4), trigger_active=False, now=1003.0) is StopStep.STOP
    assert "abandoned on a second signal" in str(request.stopped(abandoned=True))


class _Query:
    def stop(self):
        pass


class _Sinks:
    """A batch whose own threads are still writing (or not) after the query stopped."""

    def __init__(self, writing: bool):
        self._writing, self.waited = writing, []

    def writing(self, wait_s: float = 0.0) -> bool:
        self.waited.append(wait_s)
        return self._writing


@pytest.mark.parametrize("writing", [True, False])
def test_a_stop_that_leaves_a_batch_writing_says_so_and_its_lease_is_kept_not_released(tmp_path, writing):
    """A query stopped under a batch does not stop the batch's threads, which may still commit: the
    stop waits for them as long as it waits for the query, and when they outlast it the writer
    lease is left to expire instead of being released under a commit still to land."""
    from reconstructor.contract.lease import FileLeaseStore, WriterLease
    from reconstructor.spark.pipeline import RunningPipeline

    request = StopRequest(awaiting=True)
    request.receive(signal.SIGTERM, now=1.0)
    sinks = _Sinks(writing)
    running = RunningPipeline(_Query(), sinks)  # type: ignore[arg-type]  # a stand-in query: the stop path alone is tested
    running.stop(within=3.0, stop=request)
    assert running.left_writing is writing and sinks.waited == [3.0]

    said: list[str] = []
    store = FileLeaseStore(tmp_path / "writer.lease")
    lease = WriterLease(store, "run", "chk", ttl_s=60, say=said.append)
    lease.acquire("out")
    if running.left_writing:
        lease.keep()
    lease.release()
    held = store.read()[0]
    assert (held.expires_at > 0) is writing  # kept: it expires; else released (0)
    assert bool(said) is writing and (not said or said[0].endswith(
        "is left to expire (in 60s at most): a write of this driver was still in flight when it stopped"))


def test_the_driver_jvm_this_process_started_is_ended_and_one_it_did_not_start_is_not():
    """A lease is given up under a batch still writing only once the driver's JVM has exited:
    ``driver_jvm.stop`` ends the one this process started and says so, and says when it cannot."""
    from types import SimpleNamespace

    from reconstructor.spark import driver_jvm

    started, proc = _driver_started_here()
    assert driver_jvm.stop(started) is True
    assert proc.poll() is not None and driver_jvm.exit_status(started) is not None
    assert driver_jvm.stop(started) is True  # already gone
    submitted = SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace()))  # spark-submit's
    assert driver_jvm.stop(submitted) is False


@pytest.mark.parametrize("signalled", [True, False])
def test_a_signalled_run_under_writes_ends_its_jvm_and_then_releases_its_lease(tmp_path, signalled):
    """Under a batch still writing, a run stopped by a signal ends the driver's JVM (this process
    started it), after which nothing of it can commit, and releases its lease as usual, so that
    the next run need not wait out the TTL; a run that stops otherwise leaves the lease to expire."""
    from reconstructor.contract.lease import FileLeaseStore, WriterLease
    from reconstructor.spark.stream_run import lease_under_writes

    spark, proc = _driver_started_here()
    store = FileLeaseStore(tmp_path / "writer.lease")
    lease = WriterLease(store, "run", "chk", ttl_s=60, say=lambda line: None)
    lease.acquire("out")
    try:
        lease_under_writes(spark, lease, signalled=signalled)
        lease.release()
        assert (proc.poll() is not None) is signalled
        assert (store.read()[0].expires_at == 0) is signalled  # released; else left to expire
    finally:
        proc.kill()
        proc.wait()


def _driver_started_here():
    """A SparkSession's stand-in whose driver "JVM" is a real child process of this one (what
    ``build_spark`` leaves in ``sparkContext._gateway.proc``), and that process."""
    import subprocess
    import sys
    from types import SimpleNamespace

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=proc))), proc
