"""Which of a batch's writes a table already holds, read off its commits (``contract.batch_writes``)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from reconstructor.contract.batch_writes import (
    NOTHING_FOUND,
    FoundWrites,
    WriteMode,
    found_writes,
    planned_at,
    unknown_writes_line,
    with_write,
    write_name,
)
from reconstructor.contract.writer import CheckpointState, batch_metadata, lease_in_metadata, offsets_in_metadata

Q = "q-1"


def commit(batch: int, write: str | None, query: str = Q) -> str:
    meta = batch_metadata(query, batch, {("sensor-1", 0): batch * 10}, lease="t")
    return with_write(meta, write) if write is not None else meta


def newest_first(*metadata: str | None, first_version: int = 0) -> list[tuple[int, int, str | None]]:
    """Commits as (version, time in ms, userMetadata), oldest given first, read newest first;
    version v committed at time ``millis(v)``."""
    return list(reversed([(first_version + i, millis(first_version + i), m) for i, m in enumerate(metadata)]))


def millis(version: int) -> int:
    return 1_790_000_000_000 + 1000 * version


def test_a_commit_names_its_write_beside_what_the_batch_records():
    meta = with_write(batch_metadata(Q, 7, {("sensor-1", 0): 1200}, lease="5f0c"), write_name("current_rows", "-closed"))
    assert json.loads(meta)["reconstructor"]["write"] == "current_rows-closed"
    assert offsets_in_metadata(meta, Q) == {("sensor-1", 0): 1200} and lease_in_metadata(meta) == "5f0c"


def test_the_writes_an_earlier_attempt_committed_are_skipped_and_the_rest_written():
    commits = newest_first(commit(3, "row_changes"), commit(3, "current_rows"), commit(3, "sessions"),
                           None,  # a compaction
                           commit(4, "row_changes"), commit(4, "current_rows"))
    found = found_writes(commits, Q, 4)
    assert found == FoundWrites(frozenset({"row_changes", "current_rows"}))
    assert found.mode("row_changes") is WriteMode.SKIP and found.mode("current_rows") is WriteMode.SKIP
    assert found.mode("sessions") is WriteMode.WRITE and found.mode("current_rows-closed") is WriteMode.WRITE


def test_a_batch_whose_attempt_committed_nothing_writes_everything():
    commits = newest_first(commit(3, "row_changes"), commit(3, "sessions"), commit(9, "row_changes", query="q-other"))
    assert found_writes(commits, Q, 4) == NOTHING_FOUND
    assert found_writes([], Q, 0) == NOTHING_FOUND  # a table with no commit
    assert found_writes(newest_first(None, None), Q, 0) == NOTHING_FOUND  # created, never written by a batch


def test_another_writers_commits_of_the_same_batch_id_do_not_count():
    commits = newest_first(commit(3, "row_changes"), commit(4, "row_changes", query="q-replay"))
    assert found_writes(commits, Q, 4) == NOTHING_FOUND


def test_a_later_batchs_commit_counts_as_delta_s_transaction_ids_counted_it():
    commits = newest_first(commit(3, "row_changes"), commit(6, "row_changes"))
    assert found_writes(commits, Q, 4).mode("row_changes") is WriteMode.SKIP


def test_an_earlier_releases_commit_of_the_batch_leaves_the_table_to_deltas_transaction_ids():
    commits = newest_first(commit(3, None), commit(4, None))
    found = found_writes(commits, Q, 4)
    assert found == FoundWrites(frozenset(), by_earlier_release=True)
    assert found.mode("sessions") is WriteMode.DELTA
    # An earlier release's commit of an earlier batch only ends the search.
    assert found_writes(newest_first(commit(3, None)), Q, 4) == NOTHING_FOUND


def test_a_log_cleaned_past_the_writers_commits_cannot_tell():
    # Versions 40 on: the first 40 commits were cleaned, and none left is this writer's.
    commits = newest_first(None, commit(9, "row_changes", query="q-other"), first_version=40)
    assert found_writes(commits, Q, 4) is None
    # What a cleaned log still holds of the batch, or of an earlier one, tells.
    assert found_writes(newest_first(commit(4, "sessions"), first_version=40), Q, 4) == FoundWrites(
        frozenset({"sessions"}))
    assert found_writes(newest_first(commit(2, "sessions"), first_version=40), Q, 4) == NOTHING_FOUND


def test_a_new_querys_first_batch_over_a_cleaned_log_resumes_when_the_log_keeps_every_commit_since_its_plan():
    # Versions 40 on: a replay's query planned its batch 0 after version 41 and was killed before
    # it committed; the log's first 40 commits were cleaned long before.
    commits = newest_first(None, commit(9, "row_changes", query="q-run"), first_version=40)
    assert found_writes(commits, Q, 0, planned_at=millis(41) + 1) == NOTHING_FOUND
    # What it committed before it was killed is found, as in any log.
    commits = newest_first(None, commit(9, "row_changes", query="q-run"), commit(0, "row_changes"), first_version=40)
    assert found_writes(commits, Q, 0, planned_at=millis(41) + 1) == FoundWrites(frozenset({"row_changes"}))
    # Any batch: the log keeps everything since the plan, so what it holds of the batch is all.
    commits = newest_first(None, commit(7, "sessions"), first_version=40)
    assert found_writes(commits, Q, 7, planned_at=millis(40) + 1) == FoundWrites(frozenset({"sessions"}))
    assert found_writes(newest_first(None, first_version=40), Q, 7, planned_at=millis(40) + 1) == NOTHING_FOUND


def test_a_batch_planned_before_the_oldest_commit_the_log_keeps_cannot_tell():
    # Resumed after the retention: the cleaned part may have held the batch's commits.
    commits = newest_first(None, commit(9, "row_changes", query="q-run"), first_version=40)
    assert found_writes(commits, Q, 0, planned_at=millis(40)) is None
    assert found_writes(commits, Q, 0, planned_at=millis(40) - 5_000) is None
    assert found_writes(commits, Q, 0) is None  # when the batch was planned is not known


def test_a_batch_is_planned_at_the_earlier_of_its_offsets_files_time_and_the_time_inside_it():
    text = '\x00v1\n{"batchWatermarkMs":0,"batchTimestampMs":1790000005000,"conf":{}}\n{"t":{"0":12}}\n'
    assert planned_at(1_790_000_006_000, text) == 1_790_000_005_000
    assert planned_at(1_790_000_004_000, text) == 1_790_000_004_000
    assert planned_at(1_790_000_004_000, "v1\n") == 1_790_000_004_000  # no metadata: the file's time


def test_a_stop_on_writes_that_cannot_be_told_gives_advice_that_works():
    path = "s3a://b/out/sessions"
    replay = unknown_writes_line(0, path, replay=True)
    assert replay.startswith(f"cannot tell which writes of batch 0 reached {path}: ")
    assert replay.endswith("run the same replay again with a new --checkpoint (it inserts only what the tables lack)")
    assert "new output" not in replay
    assert unknown_writes_line(3, path, replay=False).endswith("replay into a new output instead")


def test_only_a_batch_planned_and_not_committed_is_pending():
    assert CheckpointState("/chk", None, None).pending is None
    assert CheckpointState("/chk", "q", None, last_planned=0).pending == 0
    assert CheckpointState("/chk", "q", 6, last_planned=6).pending is None
    assert CheckpointState("/chk", "q", 6, last_planned=7).pending == 7


WRITES = ["row_changes", "violations", "current_rows", "current_rows-closed", "sessions", "sessions-resync"]


@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(WRITES), st.sampled_from([Q, "q-2", None])),
                max_size=30),
       st.integers(0, 6))
def test_a_write_is_skipped_exactly_when_the_writer_committed_it_for_that_batch_or_a_later_one(history, batch):
    """Over any whole log of batch commits in batch order: a write is found done exactly when
    this writer has a commit of it at this batch or a later one (what Delta's ids decided)."""
    history = sorted(history, key=lambda c: c[0])  # a writer's batches commit in order
    commits = newest_first(*[commit(b, w, q) if q else None for b, w, q in history])
    found = found_writes(commits, Q, batch)
    assert found is not None
    for write in WRITES:
        committed = any(q == Q and w == write and b >= batch for b, w, q in history)
        assert (found.mode(write) is WriteMode.SKIP) == committed


def test_a_stop_on_writes_that_cannot_be_told_is_not_restarted():
    from reconstructor.errors import WritesUnknown
    from reconstructor.spark.restarts import transient

    assert not transient(WritesUnknown(unknown_writes_line(0, "/out/sessions", replay=True)))
