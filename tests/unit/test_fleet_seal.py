"""The fleet seal: its encoding, ``verify``'s check of it, and the driver's account of a batch."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from reconstructor.audit.fleet_check import FleetCheck
from reconstructor.contract.fleet_history import SealedState, changes_data, sealed_state
from reconstructor.contract.writer import (
    FleetRecord,
    batch_metadata,
    carried_metadata,
    fleet_in_metadata,
    newest_first,
    stamp_metadata,
)
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


def in_log(found: FleetRecord | SealedState | None) -> SealedState:
    """A seal as a table's whole log holds it (its commit the newest)."""
    return found if isinstance(found, SealedState) else SealedState(found, None if found is None else 3, None, 0)


def check(sessions, violations, in_sessions, in_violations=None, required=True):
    fleet = FleetCheck([r["chain_seal"] for r in sessions], violations, in_log(in_sessions), in_log(in_violations),
                       KEY)
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


# -- the seal in force in a table's log ------------------------------------------------------------

CREATE = '{"commitInfo":{"operation":"CREATE TABLE"}}\n{"protocol":{"minReaderVersion":1}}\n{"metaData":{"id":"t"}}'
WRITE = '{"commitInfo":{"operation":"MERGE"}}\n{"remove":{"path":"a","dataChange":true}}\n{"add":{"path":"b","dataChange":true}}'
OPTIMIZE = '{"commitInfo":{"operation":"OPTIMIZE"}}\n{"remove":{"path":"b","dataChange":false}}\n{"add":{"path":"c","dataChange":false}}'
VACUUM = '{"commitInfo":{"operation":"VACUUM START"}}'
PROPERTY = '{"commitInfo":{"operation":"SET TBLPROPERTIES"}}\n{"metaData":{"id":"t"}}'


def test_a_commit_changes_data_when_one_of_its_rows_actions_does_not_say_otherwise():
    assert changes_data(WRITE) and not changes_data(OPTIMIZE) and not changes_data(VACUUM)
    assert not changes_data(PROPERTY) and not changes_data(CREATE)
    assert changes_data('{"add":{"path":"x"}}')  # no dataChange: Delta's default is a change
    assert changes_data('{"cdc":{"path":"x","dataChange":true}}') and changes_data("not json")


def test_a_carried_seal_names_its_origin_and_reads_back():
    seal = fleet_of([session_row()], [])
    carried = fleet_in_metadata(carried_metadata(seal.to_json(), 7))
    assert carried is not None and carried.origin == 7 and FleetSeal.from_json(carried.fleet) == seal
    assert record(seal).origin is None


class Log:
    """A table's log as the pipeline and a user write it: each commit's userMetadata and text."""

    def __init__(self):
        self.commits: list[tuple[str | None, str]] = [(None, CREATE)]
        self.batches: list[int] = []

    def state(self, first: int = 0) -> SealedState:
        kept = list(enumerate(self.commits))[first:]
        texts = dict((v, text) for v, (_, text) in kept)
        return sealed_state([(v, meta) for v, (meta, _) in reversed(kept)], lambda v: changes_data(texts[v])
                            if v in texts else None)

    def batch(self) -> None:
        version = len(self.commits)
        seal = FleetSeal(TableSum(version, version), after=f"m{version - 1}", mac=f"m{version}")
        self.commits.append((batch_metadata("q", version, {}, seal.to_json()), WRITE))
        self.batches.append(version)

    def compaction(self, text: str = OPTIMIZE) -> bool:
        """The pipeline's compaction: it carries the seal in force, unless data changed since."""
        state = self.state()
        carries = state.record is not None and state.origin is not None and state.unsealed is None
        self.commits.append((carried_metadata(state.record.fleet, state.origin) if carries else None, text))
        return carries


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(("batch", "compaction", "vacuum", "optimize", "property", "edit")), max_size=14),
       st.integers(0, 15))
def test_the_seal_in_force_is_the_last_batchs_over_any_commits_that_change_no_data_whatever_the_log_keeps(
        writes, cleaned):
    """Whatever follows a batch (the pipeline's compactions, a user's OPTIMIZE or property, a user's
    write) and wherever the log cleanup starts it: the seal is the last batch's while its commit or
    one carrying it is in the log, and a write after it that changed data is named."""
    log, carriers = Log(), set()
    for write in writes:
        if write == "batch":
            log.batch()
        elif write in ("compaction", "vacuum"):
            if log.compaction(OPTIMIZE if write == "compaction" else VACUUM):
                carriers.add(len(log.commits) - 1)
        else:
            log.commits.append((None, {"optimize": OPTIMIZE, "property": PROPERTY, "edit": WRITE}[write]))
    first = min(cleaned, len(log.commits) - 1)  # the cleanup keeps the newest commit at least
    state = log.state(first)
    last = log.batches[-1] if log.batches else -1
    edits = [v for v, (meta, text) in enumerate(log.commits)
             if v >= first and v > last and meta is None and text == WRITE]
    assert state.unsealed == (max(edits) if edits else None)
    kept = {v for v in range(first, len(log.commits)) if v == last or (v in carriers and v > last)}
    if kept:
        assert state.record is not None and state.origin == last
        assert state.record.fleet == fleet_in_metadata(log.commits[last][0]).fleet
    else:
        assert state.record is None and state.oldest == first  # read back to where the log starts


def test_a_compaction_that_read_the_seal_before_a_batch_committed_gives_way_to_the_batchs():
    log = Log()
    log.batch()
    stale = log.state()
    log.batch()
    log.commits.append((carried_metadata(stale.record.fleet, stale.origin), VACUUM))  # committed after the batch
    state = log.state()
    assert state.origin == 2 and state.record == fleet_in_metadata(log.commits[2][0])
    log.compaction()  # the next one carries the batch's, and the log cleanup may then pass both
    assert log.state(4).origin == 2


def test_verify_passes_a_log_cleaned_past_its_seal_and_names_a_write_of_data_without_one():
    sessions, violations = [session_row(), session_row(session="b")], [violation_row()]
    seal = fleet_of(sessions, violations)
    log = [(1, batch_metadata("q", 1, {}, seal.to_json()), WRITE)]
    log += [(v, carried_metadata(seal.to_json(), 1), VACUUM) for v in (2, 3)]
    log += [(4, None, OPTIMIZE), (5, None, PROPERTY)]  # a user's

    def state(commits):
        texts = {v: text for v, _, text in commits}
        return sealed_state([(v, meta) for v, meta, _ in reversed(commits)],
                            lambda v: changes_data(texts[v]) if v in texts else None)

    for first in range(3):  # wherever the cleanup starts while a commit carrying the seal stays
        assert check(sessions, violations, state(log[first:]), state([]))[0] is None, first
    assert check(sessions, violations, state(log[3:]), state([]))[0].detail.startswith(
        "the table's log (from its commit 4) holds no fleet seal")
    edited = log + [(6, None, WRITE)]
    broken = check(sessions, violations, state(edited), state([]))[0]
    assert broken is not None and broken.table == "sessions"
    assert broken.detail == ("Delta commit 6 changed the table's data and carries no fleet seal: it was written by "
                             "something other than a keyed run or replay")
    removed = check(sessions[:1], violations, state(edited), state([]))[0]
    assert removed.detail.endswith("a session's row was removed, added or replaced (Delta commit 6 changed the "
                                   "table's data and carries no fleet seal)")
    # violations: a write after its own seal is named; a log that never held one is an earlier release's
    in_violations = [(1, batch_metadata("q", 1, {}, seal.to_json()), WRITE), (2, None, WRITE)]
    assert check(sessions, violations, state(log), state(in_violations))[0].detail.startswith("Delta commit 2 ")
    assert check(sessions, violations, state(log), state([(1, None, WRITE), (2, None, WRITE)]))[0] is None
