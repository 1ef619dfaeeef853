"""Which quarantined sessions a batch asks for a snapshot, and the request's JSON
(``reconstructor.core.resync``)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconstructor.cli import validate
from reconstructor.core.resync import DEFAULT_RESYNC_INTERVAL, SetAside, due, requests_due
from reconstructor.errors import UsageError

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)


def _set_aside(kind="GAP", status="quarantined", requested_at=None, session="s1", topic="sensor-1"):
    return SetAside(topic, session, kind, 0, 42, 7, 9, status, 6, requested_at)


def test_a_session_the_batch_quarantined_is_asked_whenever_it_was_last_asked():
    for kind in ("GAP", "DUPLICATE", "MALFORMED", "DATA_LOSS", "NO_SNAPSHOT", "AFTER_END"):
        assert due(_set_aside(kind, requested_at=NOW - dt.timedelta(seconds=1)), NOW, DEFAULT_RESYNC_INTERVAL)


def test_a_session_still_quarantined_is_asked_again_only_once_the_interval_has_passed():
    interval = 5 * MINUTE
    assert due(_set_aside("SKIPPED", requested_at=None), NOW, interval)  # never asked (asked before the upgrade)
    assert not due(_set_aside("SKIPPED", requested_at=NOW - 4 * MINUTE), NOW, interval)
    assert due(_set_aside("SKIPPED", requested_at=NOW - 5 * MINUTE), NOW, interval)


def test_a_session_the_batch_left_open_or_ended_is_not_asked():
    assert not due(_set_aside("GAP", status="open"), NOW, MINUTE)  # resynced in the same batch
    assert not due(_set_aside("GAP", status="ended"), NOW, MINUTE)
    assert not due(_set_aside("GAP", status=None), NOW, MINUTE)


@given(st.lists(st.tuples(st.sampled_from(["GAP", "SKIPPED"]), st.integers(0, 20),
                          st.sampled_from(["open", "quarantined"])), max_size=30))
def test_the_requests_are_the_due_sessions_once_each_in_order(cases):
    set_aside = [_set_aside(kind, status, NOW - minutes * MINUTE, session=f"s{i}")
                 for i, (kind, minutes, status) in enumerate(cases)]
    sent = requests_due(set_aside, NOW, 5 * MINUTE)
    expected = {f"s{i}" for i, (kind, minutes, status) in enumerate(cases)
                if status == "quarantined" and (kind != "SKIPPED" or minutes >= 5)}
    assert [r.session for r in sent] == sorted(expected)
    assert all(r.requested_at == NOW for r in sent)


def test_a_request_names_the_session_the_violation_and_the_last_applied_seq():
    (request,) = requests_due([_set_aside("GAP")], NOW, MINUTE)
    assert request.key() == "s1"
    assert json.loads(request.to_json()) == {
        "topic": "sensor-1", "partition": 0, "session": "s1", "kind": "GAP", "offset": 42,
        "expected_seq": 7, "found_seq": 9, "last_applied_seq": 6, "requested_at": "2026-11-25T12:00:00Z"}


def test_a_resync_topic_the_run_would_read_or_no_topic_name_is_refused():
    validate.resync_topic(None, "sensor-.*")
    validate.resync_topic("sensor-resync", "sensor-[0-9]+")
    with pytest.raises(UsageError, match=r"matched by --topic-pattern 'sensor-\.\*': the run would read its own"):
        validate.resync_topic("sensor-resync", "sensor-.*")
    with pytest.raises(UsageError, match="is not a Kafka topic name"):
        validate.resync_topic("resync requests", "sensor-.*")
