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
    with_write,
    write_name,
)
from reconstructor.contract.writer import CheckpointState, batch_metadata, lease_in_metadata, offsets_in_metadata

Q = "q-1"


def commit(batch: int, write: str | None, query: str = Q) -> str:
    meta = batch_metadata(query, batch, {("sensor-1", 0): batch * 10}, lease="t")
    return with_write(meta, write) if write is not None else meta


def newest_first(*metadata: str | None, first_version: int = 0) -> list[tuple[int, str | None]]:
    """Commits as (version, userMetadata), oldest given first, read newest first."""
    return list(reversed([(first_version + i, m) for i, m in enumerate(metadata)]))


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
