"""The fleet seal: its encoding, ``verify``'s check of it, and the driver's account of a batch."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from reconstructor.audit.fleet_check import FleetCheck
from reconstructor.contract.writer import FleetRecord, batch_metadata, fleet_in_metadata, newest_first, stamp_metadata
from reconstructor.core.chain import ChainKey
from reconstructor.core.fleet_seal import (
    FLEET_DOMAIN,
    MEMBER_DOMAIN,
    FleetSeal,
    TableSum,
    canonical_violation,
    session_member,
    violation_member,
)
from reconstructor.core.seal import SEAL_DOMAIN_V1, canonical_session, seal_version, session_seal
from reconstructor.spark.sinks.ahead import at_or_after, history_point
from reconstructor.spark.sinks.fleet_seal import FleetLedger

KEY = ChainKey("fleet-key")
STATUSES = ("open", "timed_out", "quarantined", "ended")


def session_row(topic="s-1", session="a", last_seq=3, status="open", last_offset=10, key=KEY):
    row = {"topic": topic, "session": session, "partition": 0, "first_seq": 0, "last_seq": last_seq,
           "last_offset": last_offset, "status": status, "row_count": 2, "chain_head": "hmac-sha256:" + "0" * 64}
    row["chain_seal"] = session_seal(key, row)
    return row


def violation_row(offset=5, kind="GAP", session="a"):
    return {"topic": "s-1", "partition": 0, "offset": offset, "session": session, "kind": kind,
            "expected_seq": 2, "found_seq": 2 ** 62 + 1, "detail": "a \"gap\"", "value": None,
            "detected_at": None}


def fleet_of(sessions, violations, after="", key=KEY) -> FleetSeal:
    return FleetSeal(TableSum.of(session_member(r["chain_seal"]) for r in sessions),
                     TableSum.of(violation_member(key, v) for v in violations), after).sealed(key)


def record(seal: FleetSeal, query="q", batch=1) -> FleetRecord:
    found = fleet_in_metadata(batch_metadata(query, batch, {}, seal.to_json()))
    assert found is not None
    return found


# -- encoding ------------------------------------------------------------------------------------


def test_the_mac_is_the_contracts_encoding():
    seal = FleetSeal(TableSum(2, 5), TableSum(1, 2 ** 255), after="hmac-sha256:ab")
    canonical = ('{"after":"hmac-sha256:ab","sessions_rows":"2","sessions_sum":"' + "0" * 63 + '5",'
                 '"violations_rows":"1","violations_sum":"8' + "0" * 63 + '"}').encode()
    mac = hmac.new(b"fleet-key", FLEET_DOMAIN + canonical, hashlib.sha256).hexdigest()
    assert seal.sealed(KEY).mac == f"hmac-sha256:{mac}"


def test_a_violations_member_is_an_hmac_of_its_row_without_its_write_time():
    row = violation_row()
    canonical = (b'{"detail":"a \\"gap\\"","expected_seq":"2","found_seq":"4611686018427387905","kind":"GAP",'
                 b'"offset":"5","partition":"0","session":"a","topic":"s-1"}')
    assert canonical_violation(row) == canonical
    assert violation_member(KEY, row) == int(hmac.new(b"fleet-key", MEMBER_DOMAIN + canonical,
                                                      hashlib.sha256).hexdigest(), 16)
    assert violation_member(KEY, {**row, "detected_at": "2026-01-01"}) == violation_member(KEY, row)
    # Text and numbers read alike from Arrow (ints) and from Spark's text (``violations_sum``).
    assert violation_member(KEY, {**row, "offset": "5", "found_seq": str(2 ** 62 + 1)}) == violation_member(KEY, row)


@given(st.lists(st.integers(0, 2 ** 256 - 1), max_size=8), st.integers(0, 2 ** 256 - 1))
def test_a_sum_takes_back_what_it_added(members, member):
    total = TableSum.of(members)
    assert total.add(member).remove(member) == total
    assert len(total.hex) == 64


def test_a_seal_holds_only_as_written_and_only_with_its_key():
    seal = fleet_of([session_row()], [violation_row()])
    assert seal.holds(KEY)
    assert FleetSeal.from_json(seal.to_json()) == seal
    assert not seal.holds(ChainKey("other-key"))
    for field, value in (("sessions_rows", 0), ("violations_rows", 2), ("after", "x"),
                         ("sessions_sum", "0" * 64)):
        assert not FleetSeal.from_json({**seal.to_json(), field: value}).holds(KEY), field


def test_a_commit_records_the_seal_beside_its_batch():
    seal = fleet_of([session_row()], [])
    found = record(seal, "q-9", 4)
    assert (found.query, found.batch, FleetSeal.from_json(found.fleet)) == ("q-9", 4, seal)
    stamped = fleet_in_metadata(stamp_metadata(seal.to_json()))
    assert stamped is not None and (stamped.query, stamped.batch) == (None, None)
    assert fleet_in_metadata(batch_metadata("q", 1, {})) is None
    assert fleet_in_metadata("not json") is None and fleet_in_metadata(None) is None


def test_a_row_tells_which_domain_sealed_it():
    row = session_row()
    assert seal_version(KEY, row) == 2
    v1 = hmac.new(b"fleet-key", SEAL_DOMAIN_V1 + canonical_session(row), hashlib.sha256).hexdigest()
    assert seal_version(KEY, {**row, "chain_seal": f"hmac-sha256:{v1}"}) == 1
    assert seal_version(KEY, {**row, "last_seq": 2}) is None


# -- verify's check ------------------------------------------------------------------------------


def check(sessions, violations, in_sessions, in_violations=None, required=True):
    fleet = FleetCheck([r["chain_seal"] for r in sessions], violations, in_sessions, in_violations, KEY)
    return fleet.check(required), fleet


def test_the_tables_as_sealed_pass():
    sessions, violations = [session_row(), session_row(session="b")], [violation_row()]
    broken, fleet = check(sessions, violations, record(fleet_of(sessions, violations)))
    assert broken is None and fleet.seal is not None and fleet.seal.sessions.rows == 2


def test_a_session_removed_from_sessions_fails():
    sessions, violations = [session_row(), session_row(session="b")], [violation_row()]
    broken, _ = check(sessions[:1], violations, record(fleet_of(sessions, violations)))
    assert broken is not None and broken.table == "sessions"
    assert "holds 1 rows; the fleet seal counts 2" in broken.detail


def test_a_session_replaced_by_an_older_sealed_row_fails():
    sessions = [session_row(), session_row(session="b", last_seq=9, last_offset=20)]
    older = [sessions[0], session_row(session="b", last_seq=3, last_offset=10)]
    broken, _ = check(older, [], record(fleet_of(sessions, [])))
    assert broken is not None and "not their sum" in broken.detail


def test_a_violation_removed_fails():
    sessions, violations = [session_row()], [violation_row(), violation_row(6, "SKIPPED")]
    broken, _ = check(sessions, violations[:1], record(fleet_of(sessions, violations)))
    assert broken is not None and broken.table == "violations"


def test_a_batch_cut_between_its_violations_and_sessions_commits_passes():
    sessions, before = [session_row()], [violation_row()]
    last = fleet_of(sessions, before)
    after = before + [violation_row(7)]
    cut = last.next(TableSum.of(session_member(r["chain_seal"]) for r in sessions),
                    TableSum.of(violation_member(KEY, v) for v in after)).sealed(KEY)
    assert check(sessions, after, record(last, batch=1), record(cut, batch=2))[0] is None
    # Not the batch right after the sessions seal: an older violations seal proves nothing now.
    stale = FleetSeal(last.sessions, TableSum.of(violation_member(KEY, v) for v in after), "other").sealed(KEY)
    assert check(sessions, after, record(last), record(stale))[0] is not None


def test_a_seal_that_does_not_hold_fails():
    sessions = [session_row()]
    forged = FleetSeal.from_json({**fleet_of(sessions, []).to_json(), "sessions_rows": 2})
    broken, _ = check(sessions, [], record(forged))
    assert broken is not None and "does not hold with the key" in broken.detail
    garbled = FleetRecord({"sessions_rows": "x"}, "q", 1)
    assert "not one the pipeline writes" in check(sessions, [], garbled)[0].detail


def test_an_output_without_a_fleet_seal_passes_only_when_none_is_required():
    sessions = [session_row()]
    broken, fleet = check(sessions, [], None, required=False)
    assert broken is None and fleet.seal is None  # written before fleet seals
    broken, _ = check(sessions, [], None, required=True)
    assert broken is not None and broken.table == "sessions"
    assert check([], [], None, required=True)[0] is None  # a keyed output before its first batch


# -- the driver's account of a batch: the MERGE's rule, over any batches ---------------------------


def test_the_history_point_orders_as_the_merge_does():
    assert at_or_after(history_point(11, "open"), history_point(10, "ended"))
    assert at_or_after(history_point(10, "ended"), history_point(10, "open"))
    assert not at_or_after(history_point(10, "open"), history_point(10, "quarantined"))
    assert not at_or_after(history_point(10, "odd"), history_point(10, "open"))  # SQL's NULL
    assert at_or_after(history_point(0, "open"), history_point(None, "open"))


session_records = st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 6), st.sampled_from(STATUSES)),
                           max_size=6, unique_by=lambda t: t[0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(session_records, st.integers(0, 3)), max_size=6), st.sets(st.integers(0, 5)))
def test_each_batch_seals_the_tables_the_merge_leaves(batches, retried):
    """Whatever the batches (records behind the table included) and wherever one is run again
    after its commits landed, the seal matches what the MERGE and the appends leave."""
    ledger = FleetLedger(None, "unused", KEY)  # type: ignore[arg-type]  # no SparkSession: the ledger is never loaded from tables
    ledger._loaded = True
    table: dict = {}
    violations: list = []
    for batch_id, (records, new_violations) in enumerate(batches):
        rows = [Row(topic="s-1", session=s, chain_seal=session_row(session=s, last_offset=o, status=st_)["chain_seal"],
                    last_offset=o, status=st_) for s, o, st_ in records]
        added = [violation_row(1000 * batch_id + i) for i in range(new_violations)]
        extra = TableSum.of(violation_member(KEY, v) for v in added) if added else None
        seal = ledger.seal("q", batch_id, rows, extra)
        for r in rows:  # the MERGE
            held = table.get(r.session)
            if held is None or at_or_after(history_point(r.last_offset, r.status),
                                           history_point(held.last_offset, held.status)):
                table[r.session] = r
        violations += added
        ledger.violations_committed()
        ledger.sessions_committed()
        if batch_id in retried:  # run again: Delta skips its writes, and the seal is the one committed
            assert ledger.seal("q", batch_id, rows, extra) == seal
            ledger.sessions_committed()
        assert seal.holds(KEY)
        assert seal.sessions == TableSum.of(session_member(r.chain_seal) for r in table.values())
        assert seal.violations == TableSum.of(violation_member(KEY, v) for v in violations)


def test_a_batch_cut_after_its_violations_commit_seals_them_once_when_run_again():
    ledger = FleetLedger(None, "unused", KEY)  # type: ignore[arg-type]  # no SparkSession: the ledger is never loaded from tables
    ledger._loaded = True
    rows = [Row(topic="s-1", session="a", chain_seal=session_row()["chain_seal"], last_offset=10, status="open")]
    added = TableSum.of([violation_member(KEY, violation_row())])
    first = ledger.seal("q", 0, rows, added)
    ledger.violations_committed()  # then the run stopped before its sessions commit
    # Run again, a replay's insert finds the row present and adds nothing: the seal is the same.
    assert ledger.seal("q", 0, rows, TableSum()) == first


def test_a_history_is_searched_newest_first_and_read_whole_only_past_its_first_look():
    log = list(range(9, -1, -1))  # versions, newest first
    reads = []

    def history(limit):
        reads.append(limit)
        return log[:limit] if limit else log

    assert next(v for v in newest_first(history, 4) if v == 8) == 8 and reads == [4]
    reads.clear()
    assert list(newest_first(history, 4)) == log and reads == [4, None]  # each commit once
    reads.clear()
    assert list(newest_first(lambda limit: (reads.append(limit), log[:3])[1], 4)) == log[:3] and reads == [4]
