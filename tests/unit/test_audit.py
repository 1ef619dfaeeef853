"""verify's checks and asof's fold, pure: the core's own change log, folded, is the model's table;
each kind of corruption of consistent tables is named by table, session, seq and row."""

from __future__ import annotations

import copy
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.audit.checks import Discrepancy, Verification
from reconstructor.audit.delta_tables import delta_uri, storage_options
from reconstructor.audit.fold import ChangeFold, changes_up_to, row_columns
from reconstructor.audit.seq_runs import SeqRuns
from reconstructor.contract.tables import SEALED_PROPERTY
from reconstructor.core.batch import process_batch
from reconstructor.core.chain import CHAIN_START, NO_KEY, ChainKey, ChainSeed, chain_messages, chain_session
from reconstructor.core.seal import session_seal
from reconstructor.errors import UsageError
from reconstructor.settings import S3Settings
from reconstructor.testing.strategies import batches_of, valid_session
from tests.support.model import SCHEMA, Model, Msg, normalise_values, to_frame

PROFILE = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPIC, SESSION = "sensor-1", "s1"
NAMES = SCHEMA.names
ROW_TYPES = [(c.name, c.type) for c in SCHEMA.columns]


def core_output(batches: list[list[Msg]], key: ChainKey = NO_KEY):
    """What the pipeline writes for one session fed ``batches``: (row_changes, sessions,
    current_rows) as frames, the change log with its ``hour`` column and its hash chain, digested
    as the stateful step digests it (``chain_messages`` from the session's head)."""
    state, logs, head = None, [], CHAIN_START
    for batch in batches:
        result = process_batch(TOPIC, SESSION, [to_frame(batch)], state, SCHEMA)
        assert result.violation is None
        prevs, digests, head = chain_messages(TOPIC, SESSION, result.columns, head, ROW_TYPES, key)
        if len(result.changes):
            logs.append(result.changes.assign(chain_prev=prevs, chain_digest=digests))
        state = result.state
    empty = result.changes.assign(chain_prev=pd.Series(dtype=object), chain_digest=pd.Series(dtype=object))
    changes = pd.concat(logs or [empty], ignore_index=True).assign(topic=TOPIC, session=SESSION)
    changes["hour"] = changes["offset"].map(lambda o: f"h{o % 3}")  # rows of one record share its hour
    sessions = pd.DataFrame([{"topic": TOPIC, "session": SESSION, "partition": state.partition,
                              "status": state.status.value, "first_seq": state.first_seq,
                              "last_seq": state.last_seq, "last_offset": state.last_offset,
                              "row_count": state.row_count, "chain_head": head or None}])
    sessions["chain_seal"] = [session_seal(key, r) for r in sessions.astype(object).to_dict("records")]
    live = state.table.reset_index() if state.status.value == "open" else state.table.reset_index().iloc[:0]
    ordered = changes.sort_values(["offset", "row_pos"], kind="stable")
    last = ordered.drop_duplicates("row_id", keep="last").set_index("row_id")  # each row's last change
    current = live.assign(topic=TOPIC, session=SESSION, seq=live["row_id"].map(last["seq"]),
                          offset=live["row_id"].map(last["offset"]))
    return changes, sessions, current


def no_violations() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in (
        ("topic", object), ("session", object), ("partition", "int64"), ("offset", "int64"),
        ("kind", object), ("expected_seq", "float64"), ("found_seq", "int64"))})


def verify(changes, sessions, current, violations=None, topics=None) -> tuple[Discrepancy | None, Verification]:
    check = Verification(sessions, no_violations() if violations is None else violations, NAMES, topics)
    for _, hour in sorted(changes.groupby("hour"), key=lambda kv: kv[0], reverse=True):  # any hour order
        found = check.add_changes(hour.reset_index(drop=True))
        if found is not None:
            return found, check
    return check.finish(current), check


def fold_of(changes) -> dict:
    fold = ChangeFold(NAMES)
    fold.add(changes)
    return {rid: normalise_values(dict(zip(NAMES, values))) for rid, values in fold.table(TOPIC, SESSION).items()}


def model_after(msgs: list[Msg]) -> dict:
    model = Model()
    for m in msgs:
        model.apply(m)
    return {rid: normalise_values(v) for rid, v in (model.table or {}).items()}


def plain(value):
    """A folded value as the model holds it (Arrow gives aware UTC times, the model naive ones)."""
    if hasattr(value, "tzinfo") and value.tzinfo is not None:
        return value.replace(tzinfo=None)
    return value


def plain_table(table: dict) -> dict:
    return {rid: {c: plain(v) for c, v in values.items()} for rid, values in table.items()}


@PROFILE
@given(data=st.data())
def test_the_core_change_log_folds_to_the_model_table_in_any_batch_order(data):
    msgs = data.draw(valid_session(restarts=True))
    changes, _, _ = core_output(data.draw(batches_of(msgs)))
    shuffled = changes.sample(frac=1, random_state=data.draw(st.integers(0, 99))).reset_index(drop=True)
    fold = ChangeFold(NAMES)
    for part in (shuffled.iloc[: len(shuffled) // 2], shuffled.iloc[len(shuffled) // 2:]):
        fold.add(part.reset_index(drop=True))
    table = {rid: normalise_values(dict(zip(NAMES, v))) for rid, v in fold.table(TOPIC, SESSION).items()}
    assert plain_table(table) == model_after(msgs)


@PROFILE
@given(data=st.data())
def test_asof_a_seq_is_the_model_after_that_message(data):
    msgs = data.draw(valid_session(restarts=True))
    changes, _, _ = core_output(data.draw(batches_of(msgs)))
    k = data.draw(st.integers(0, len(msgs) - 1))
    assert plain_table(fold_of(changes_up_to(changes, seq=msgs[k].seq))) == model_after(msgs[: k + 1])


@PROFILE
@given(data=st.data())
def test_asof_an_event_time_is_the_model_after_the_messages_up_to_it(data):
    msgs = data.draw(valid_session(restarts=True))
    changes, _, _ = core_output(data.draw(batches_of(msgs)))
    k = data.draw(st.integers(0, len(msgs) - 1))
    at = pd.Timestamp(msgs[k].event_ts).tz_localize("UTC")
    assert plain_table(fold_of(changes_up_to(changes, at=at))) == model_after(msgs[: k + 1])


@PROFILE
@given(data=st.data())
def test_the_tables_the_core_writes_verify(data):
    msgs = data.draw(valid_session(restarts=True))
    changes, sessions, current = core_output(data.draw(batches_of(msgs)))
    found, check = verify(changes, sessions, current)
    assert found is None, found.line()
    assert check.summary.change_rows == len(changes)
    rowless = sum(1 for m in msgs if not m.rows)  # an end, an update or snapshot with no rows
    assert check.summary.rowless_seqs + check.summary.set_aside_seqs <= rowless


def session_msgs() -> list[Msg]:
    rows = [{"id": f"r{i}", "values": {"temperature": float(i), "status": "ok"}} for i in range(4)]
    return [
        Msg(seq=0, type="snapshot", rows=rows, offset=10),
        Msg(seq=1, type="update", rows=[{"id": "r1", "values": {"temperature": 11.0}}], offset=11),
        Msg(seq=2, type="update", rows=[], offset=12),  # changes no row
        Msg(seq=3, type="snapshot", rows=rows[:2], offset=13),  # drops r2 and r3: two row_pos -1 rows
        Msg(seq=4, type="update", rows=[{"id": "r0", "op": "delete"}], offset=14),
        Msg(seq=5, type="update", rows=[{"id": "r1", "values": {"temperature": 15.0}}], offset=15),
    ]


@pytest.fixture
def tables():
    """Tables written before the hash chain existed: each corruption below is found by the check
    it is about, not by the chain, which would name it first."""
    changes, sessions, current = core_output([session_msgs()[:3], session_msgs()[3:]])
    return (changes.drop(columns=["chain_prev", "chain_digest"]), sessions.drop(columns=["chain_head", "chain_seal"]),
            current)


def test_asof_a_session_with_no_change_is_an_empty_table():
    changes, _, _ = core_output([[Msg(seq=0, type="snapshot", offset=1)], [Msg(seq=1, type="end", offset=2)]])
    assert fold_of(changes_up_to(changes, at=pd.Timestamp("2030-01-01", tz="UTC"))) == {}
    assert fold_of(changes_up_to(changes, seq=1)) == {}


def test_consistent_tables_verify_and_the_rowless_message_is_counted(tables):
    changes, sessions, current = tables
    assert (changes["row_pos"] == -1).sum() == 2  # the dropped rows share the snapshot's offset
    found, check = verify(changes, sessions, current)
    assert found is None, found.line()
    assert (check.summary.rowless_seqs, check.summary.set_aside_seqs) == (1, 0)
    lines = check.summary.lines("/out", 2.0)
    assert lines[0] == "verify /out: no discrepancy"
    assert any("change rows/s" in line for line in lines)


def test_a_duplicated_change_row_is_named(tables):
    changes, sessions, current = tables
    dup = changes[changes["seq"] == 1]
    found, _ = verify(pd.concat([changes, dup], ignore_index=True), sessions, current)
    assert found.line() == (f"VERIFY FAILED row_changes topic={TOPIC} session={SESSION} seq=1 row=r1: the change "
                            "at partition 0 offset 11 row_pos 0 is logged twice")


def test_a_discrepancy_line_shows_control_characters_in_its_ids_escaped_on_one_line():
    found = Discrepancy("current_rows", "a row of a session that is end\x1b[2Jed in sessions",
                        topic="sensor-\x00", session="s1\nVERIFY OK", seq=4, row_id="r\u00e9\t\x1b[31m\u2028")
    assert found.line() == ("VERIFY FAILED current_rows topic=sensor-\\x00 session=s1\\nVERIFY OK seq=4 "
                            "row=r\u00e9\\t\\x1b[31m\\u2028: a row of a session that is end\\x1b[2Jed in sessions")
    assert found.line().isprintable()


def test_a_change_row_copied_into_another_hour_is_found_by_its_seq(tables):
    changes, sessions, current = tables
    copied = changes[changes["seq"] == 5].assign(hour="h-other")
    found, _ = verify(pd.concat([changes, copied], ignore_index=True), sessions, current)
    assert (found.table, found.session, found.seq) == ("row_changes", SESSION, 5)
    assert "logged twice" in found.detail


def test_a_deleted_change_row_is_found_in_current_rows(tables):
    changes, sessions, current = tables
    found, _ = verify(changes[changes["seq"] != 5], sessions, current)
    assert (found.table, found.session, found.seq, found.row_id) == ("current_rows", SESSION, 3, "r1")
    assert "temperature is 15.0 here, 1.0 in row_changes" in found.detail


def test_a_deleted_delete_is_found_by_the_row_count(tables):
    changes, sessions, current = tables
    found, _ = verify(changes[changes["seq"] != 4], sessions, current.iloc[:0])
    assert found.line().startswith(f"VERIFY FAILED sessions topic={TOPIC} session={SESSION} seq=5: row_count is 1")


def test_a_changed_value_in_current_rows_is_named(tables):
    changes, sessions, current = tables
    current = current.copy()
    current.loc[current["row_id"] == "r1", "status"] = "tampered"
    found, _ = verify(changes, sessions, current)
    assert found.line() == (f"VERIFY FAILED current_rows topic={TOPIC} session={SESSION} seq=5 row=r1: "
                            "status is 'tampered' here, None in row_changes")


def test_rows_of_a_session_that_is_not_open_are_named(tables):
    changes, sessions, current = tables
    found, _ = verify(changes, sessions.assign(status="ended"), current)
    assert (found.table, found.row_id) == ("current_rows", "r1")
    assert "ended" in found.detail


def test_a_seq_past_the_sessions_last_seq_is_named(tables):
    changes, sessions, current = tables
    found, _ = verify(changes, sessions.assign(last_seq=4), current)
    assert (found.table, found.seq) == ("row_changes", 5)
    assert "past the session's last_seq 4" in found.detail


def test_changes_before_first_seq_verify_as_a_replay_into_the_same_output_leaves_them(tables):
    """A replay from the last snapshot writes the session's row again with that snapshot's seq as
    its first_seq; the changes before it stay in row_changes (the replay de-duplicates)."""
    changes, sessions, current = tables
    found, _ = verify(changes, sessions.assign(first_seq=3), current)
    assert found is None, found.line()


def test_a_session_missing_from_sessions_is_named(tables):
    changes, sessions, current = tables
    found, _ = verify(changes, sessions.iloc[:0], current)
    assert (found.table, found.session) == ("sessions", SESSION)


def test_a_log_that_starts_with_an_update_is_named(tables):
    changes, sessions, current = tables
    changes = changes.copy()
    changes.loc[changes["seq"] == 0, "type"] = "update"
    found, _ = verify(changes, sessions, current)
    assert (found.table, found.seq) == ("row_changes", 0) and "of type update, not a snapshot" in found.detail


def violation(kind, offset, found_seq, session=SESSION):
    return {"topic": TOPIC, "session": session, "partition": 0, "offset": offset, "kind": kind,
            "expected_seq": None, "found_seq": found_seq}


def test_a_quarantined_session_needs_its_violation_row_and_skipped_rows_their_cause(tables):
    changes, sessions, current = tables
    quarantined = sessions.assign(status="quarantined")
    found, _ = verify(changes, quarantined, current.iloc[:0])
    assert (found.table, found.session) == ("violations", SESSION)
    assert "no violation row" in found.detail

    cause = pd.DataFrame([violation("GAP", 17, 7), violation("SKIPPED", 18, 8)])
    found, _check = verify(changes, quarantined, current.iloc[:0], cause)
    assert found is None, found.line()

    skipped_alone = pd.DataFrame([violation("SKIPPED", 18, 8)])
    found, _ = verify(changes, sessions, current, skipped_alone)
    assert (found.table, found.seq) == ("violations", 8)
    assert "no violation row quarantined" in found.detail


def test_a_resync_to_a_lower_seq_is_found_even_with_a_violation_row():
    """A resync snapshot carries a seq past the last applied one: an older seq logged again is
    stale data read as live, whatever the violations say."""
    rows = [{"id": "a", "values": {"temperature": 1.0}}]
    first = [Msg(seq=0, type="snapshot", rows=rows, offset=0), Msg(seq=1, type="update", rows=rows, offset=1)]
    changes, sessions, current = core_output([first])
    resync = pd.DataFrame([{**changes.iloc[0].to_dict(), "offset": 5, "seq": 0, "hour": "h-later"}])
    log = pd.concat([changes, resync], ignore_index=True)
    cause = pd.DataFrame([violation("DUPLICATE", 3, 0)])
    for causes in (None, cause):
        found, _ = verify(log, sessions.assign(last_seq=0, last_offset=5), current.assign(seq=0, offset=5),
                          causes)
        assert found is not None and found.table == "row_changes"
        assert "seq 0 is logged twice" in found.detail or "past the session's last_seq" in found.detail


def test_the_topic_pattern_leaves_other_topics_out(tables):
    changes, sessions, current = tables
    found, check = verify(changes, sessions.assign(last_seq=1), current, topics="other-.*")
    assert found is None and check.summary.change_rows == 0


def test_row_columns_are_those_of_the_row_schema():
    assert row_columns(["topic", "partition", "offset", "session", "seq", "type", "row_pos", "row_id", "op",
                        *NAMES, "event_ts", "kafka_ts", "hour"]) == NAMES


def test_seq_runs_hold_intervals_and_name_the_gaps():
    runs = SeqRuns()
    runs.add([5, 3, 4, 9])
    runs.add([6, 12])
    assert runs.runs == [(3, 6), (9, 9), (12, 12)]
    assert 4 in runs and 7 not in runs
    assert runs.gaps(0, 13) == [(0, 2), (7, 8), (10, 11), (13, 13)]


def test_s3_settings_become_delta_rs_storage_options():
    s3 = S3Settings(endpoint="http://127.0.0.1:9000", region="us-east-1", access_key="k", secret_key="s",
                  path_style=True)
    assert delta_uri("s3a://recon/out/row_changes") == "s3://recon/out/row_changes"
    assert storage_options(s3, "s3a://recon/out") == {
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
    assert storage_options(s3, "/data/out") == {}
    https = storage_options(S3Settings(endpoint="s3.example.com"), "s3://b/x")
    assert https["AWS_ENDPOINT_URL"] == "https://s3.example.com" and "AWS_ALLOW_HTTP" not in https


def test_the_model_is_not_changed_by_the_fold():
    msgs = session_msgs()
    before = copy.deepcopy(msgs)
    changes, _, _ = core_output([msgs])
    fold_of(changes)
    assert msgs == before


def test_verify_and_asof_read_delta_tables_without_loading_spark(tmp_path, tables):
    changes, sessions, current = tables
    write_deltalake(str(tmp_path / "row_changes"), changes, partition_by=["hour"])
    write_deltalake(str(tmp_path / "sessions"), sessions)
    write_deltalake(str(tmp_path / "current_rows"), current)
    write_deltalake(str(tmp_path / "violations"), no_violations())
    script = (f"import sys\nfrom reconstructor.cli import main\n"
              f"assert main(['verify', '--output', {str(tmp_path)!r}]) == 0\n"
              f"assert main(['asof', '--output', {str(tmp_path)!r}, '--topic', {TOPIC!r}, '--session', "
              f"{SESSION!r}, '--seq', '1', '--format', 'csv']) == 0\n"
              "print('engine loaded:', any(m.split('.')[0] in ('pyspark', 'py4j', 'delta') for m in sys.modules))")
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "no discrepancy" in ran.stdout and "3 hour partitions" in ran.stdout
    assert "r1,11.0," in ran.stdout  # r1 as it was after seq 1
    assert ran.stdout.strip().endswith("engine loaded: False")


def test_a_session_whose_first_snapshot_held_no_rows_verifies():
    """Its first update starts the chain: the empty snapshot left nothing in it."""
    msgs = [Msg(seq=0, type="snapshot", rows=[], offset=10),
            Msg(seq=1, type="update", rows=[{"id": "r1", "values": {"temperature": 1.0}}], offset=11),
            Msg(seq=2, type="update", rows=[{"id": "r2", "values": {"temperature": 2.0}}], offset=12)]
    for key in (NO_KEY, ChainKey("k")):
        changes, sessions, current = core_output([msgs[:2], msgs[2:]], key)
        check = Verification(sessions, no_violations(), NAMES, chain_key=key)
        assert check.add_changes(changes) is None
        found = check.finish(current)
        assert found is None, found.line()
        assert check.summary.chains == 1 and check.summary.chained_messages == 2


def test_a_null_double_replaced_by_nan_is_named_though_its_digest_is_unchanged():
    msgs = [Msg(seq=0, type="snapshot", rows=[{"id": "r1", "values": {"status": "ok"}}], offset=10),
            Msg(seq=1, type="update", rows=[{"id": "r1", "values": {"status": "hot"}}], offset=11)]
    key = ChainKey("k")
    changes, sessions, current = core_output([msgs], key)
    assert changes["temperature"].isna().all()  # nulls (pandas holds a double's null as NaN)
    nans = pa.array([float("nan")] * len(changes), pa.float64(), from_pandas=False)
    logged = pa.Table.from_pandas(changes, preserve_index=False)
    logged = logged.set_column(logged.schema.get_field_index("temperature"), "temperature", nans)
    assert logged["temperature"].null_count == 0
    found, _ = verify_keyed(logged, sessions, current, key)
    assert found is not None and (found.table, found.seq) == ("row_changes", 0)
    assert "temperature is NaN" in found.detail


def verify_keyed(changes, sessions, current, key: ChainKey):
    check = Verification(sessions, no_violations(), NAMES, chain_key=key)
    found = check.add_changes(changes)
    return (found if found is not None else check.finish(current)), check


def test_a_replay_from_a_snapshot_that_dropped_rows_links_into_the_live_chain():
    """The live run's snapshot drops a row (a ``row_pos = -1`` delete in its digest); a replay that
    starts the session there, into an empty table, makes no such delete, so it takes the tables'
    digests of that snapshot (its seed) and its later messages get the live run's digests."""
    row = lambda rid, t: {"id": rid, "values": {"temperature": t}}  # noqa: E731 - a one-line helper beside its uses
    msgs = [Msg(seq=0, type="snapshot", rows=[row("a", 1.0), row("b", 2.0)], offset=10),
            Msg(seq=1, type="snapshot", rows=[row("a", 1.0)], offset=11),  # drops b
            Msg(seq=2, type="update", rows=[row("a", 3.0)], offset=12)]
    key = ChainKey("k")
    live, _, _ = core_output([msgs], key)
    snap = live[live["seq"] == 1].iloc[0]
    replay = process_batch(TOPIC, SESSION, [to_frame(msgs[1:])], None, SCHEMA, await_snapshot=True)
    seed = ChainSeed(snap["chain_prev"], snap["chain_digest"])
    _prevs, digests, head = chain_session(TOPIC, SESSION, replay.columns, None, seed, 1, ROW_TYPES, key)
    assert head == live["chain_digest"].iloc[-1]
    seqs = list(replay.columns["seq"])
    assert [d for q, d in zip(seqs, digests) if q == 1] == [snap["chain_digest"]]
    assert list(digests[seqs.index(2):]) == list(live[live["seq"] == 2]["chain_digest"])
    # Unseeded, the replay's own digest of the snapshot is another: what verify found linked to nothing.
    _, own, _ = chain_session(TOPIC, SESSION, replay.columns, None, None, 1, ROW_TYPES, key)
    assert own[0] != snap["chain_digest"]


# -- the seals: with the key, a session's row cannot be moved, nor its chain nulled ----------------

def keyed_tables():
    return core_output([session_msgs()[:3], session_msgs()[3:]], ChainKey("k"))


def test_sealed_tables_verify_with_the_key_and_need_it():
    changes, sessions, current = keyed_tables()
    assert sessions["chain_seal"][0].startswith("hmac-sha256:")
    found, check = verify_keyed(changes, sessions, current, ChainKey("k"))
    assert found is None, found.line()
    assert check.summary.sealed_sessions == 1
    found, _ = verify_keyed(changes, sessions, current, ChainKey("another"))
    assert found is not None  # the chain's digests, first
    with pytest.raises(UsageError):  # the seals alone need the key too
        verify_keyed(changes.drop(columns=["chain_prev", "chain_digest"]), sessions.assign(chain_head=None),
                     current, NO_KEY)


def test_the_last_messages_deleted_and_the_head_moved_back_to_a_digest_left_is_named_by_the_seal():
    changes, sessions, current = keyed_tables()
    kept = changes[changes["seq"] < 5]  # seq 5, the last message with rows, deleted
    sessions.loc[0, "chain_head"] = kept["chain_digest"].iloc[-1]  # a digest the run itself made
    live = fold_of(kept)
    current = current[current["row_id"].isin(live)].copy()  # refolded: r1 as it was at seq 1
    current.loc[current["row_id"] == "r1", ["temperature", "seq", "offset"]] = [11.0, 1, 11]
    found, _ = verify_keyed(kept, sessions, current, ChainKey("k"))
    assert (found.table, found.session) == ("sessions", SESSION)
    assert "does not give its seal" in found.detail


def test_a_sessions_chain_nulled_with_its_seal_is_named_in_a_sealed_output():
    changes, sessions, current = keyed_tables()
    changes[["chain_prev", "chain_digest"]] = None  # the rows read as written before the chain
    sessions.loc[0, "chain_head"] = None
    found, _ = verify_keyed(changes, sessions, current, ChainKey("k"))
    assert found is not None and "does not give its seal" in found.detail
    sessions.loc[0, "chain_seal"] = None  # the seal nulled too: the output's property says it is sealed
    check = Verification(sessions, no_violations(), NAMES, chain_key=ChainKey("k"),
                         sessions_properties={SEALED_PROPERTY: "hmac-sha256"})
    assert check.add_changes(changes) is None
    found = check.finish(current)
    assert found is not None and "has no seal, but the output is sealed" in found.detail
