"""The in-stream compactor's loop: a Delta write conflict is retried at once, quietly; any other
failure is a warning and waits for the next run.  The compactor here is a stand-in for
``Compactor`` (whose Delta work the integration tests run): what is tested is the loop."""

from __future__ import annotations

import logging

from reconstructor.spark.compaction import CONFLICT_RETRIES, BackgroundCompactor, CompactionReport

CONFLICT = ("[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata of the Delta table has been "
            "changed by a concurrent update. Please try the operation again.")


class FailingFirst:
    """Fails its first ``failures`` runs with ``message``, then compacts nothing."""

    def __init__(self, message: str, failures: int):
        self.message, self.failures, self.calls = message, failures, 0

    def run(self, vacuum: bool = True) -> CompactionReport:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(self.message)
        return CompactionReport(vacuumed=["row_changes"] if vacuum else [])


def _one_run(compactor) -> BackgroundCompactor:
    background = BackgroundCompactor(compactor, every_s=3600)
    background.run_once()  # the loop's body, in this thread
    return background


def test_a_run_that_meets_a_concurrent_commit_is_retried_without_a_warning(caplog):
    compactor = FailingFirst(CONFLICT, failures=1)
    with caplog.at_level(logging.INFO, logger="reconstructor.spark.compaction"):
        background = _one_run(compactor)
    assert compactor.calls == 2 and background.runs == 1
    assert background.last_report.vacuumed == ["row_changes"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_conflicts_past_the_retries_and_other_failures_are_one_warning_and_no_run(caplog):
    for compactor, calls in ((FailingFirst(CONFLICT, failures=CONFLICT_RETRIES + 1), CONFLICT_RETRIES + 1),
                             (FailingFirst("disk full", failures=1), 1)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="reconstructor.spark.compaction"):
            background = _one_run(compactor)
        assert compactor.calls == calls and background.runs == 0
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith("compaction failed, will retry: ")
