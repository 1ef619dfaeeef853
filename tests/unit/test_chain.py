"""The change log's hash chain: its canonical form is RFC 8785's, its digests link every message
with rows, and an edit of any of them breaks the chain."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from reconstructor.audit.chain_check import ChainCheck, row_kinds
from reconstructor.core.chain import CHAIN_START, ChainKey, canonical_message, chain_messages, jcs_number
from reconstructor.errors import UsageError

COLUMNS = [("name", "string"), ("count", "long"), ("level", "double"), ("on", "boolean"), ("at", "timestamp")]
LONG = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
DOUBLE = st.floats(allow_nan=False)


def reference(topic, session, message, changes, columns) -> bytes:
    """The same message built as a plain object and encoded by an independent RFC 8785 encoder."""

    def value(v, kind):
        if v is None:
            return None
        if kind == "long":
            return str(v)
        if kind == "timestamp":
            return str(pd.Timestamp(v).value // 1000)
        if kind == "double" and math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v

    rows = []
    for c in sorted(changes, key=lambda c: (c["row_pos"], c["row_id"].encode())):
        values = {n: value(c.get(n), k) for n, k in columns if c.get(n) is not None}
        rows.append({"row_pos": str(c["row_pos"]), "row_id": c["row_id"], "op": c["op"], "values": values})
    obj = {"topic": topic, "session": session, "partition": str(message["partition"]),
           "offset": str(message["offset"]), "seq": str(message["seq"]), "type": message["type"],
           "changes": rows}
    for t in ("event_ts", "kafka_ts"):
        if message.get(t) is not None:
            obj[t] = str(pd.Timestamp(message[t]).value // 1000)
    return rfc8785.dumps(obj)


change = st.fixed_dictionaries({
    "row_pos": st.integers(-1, 5), "row_id": TEXT, "op": st.sampled_from(["upsert", "delete"]),
    "name": st.none() | TEXT, "count": st.none() | LONG, "level": st.none() | DOUBLE,
    "on": st.none() | st.booleans(),
    "at": st.none() | st.integers(0, 4_000_000_000_000_000).map(lambda us: pd.Timestamp(us * 1000)),
})


@settings(max_examples=300, deadline=None)
@given(topic=TEXT, session=TEXT, seq=LONG, offset=st.integers(0, 2**63 - 1), changes=st.lists(change, max_size=4),
       event=st.none() | st.integers(0, 2**50).map(lambda us: pd.Timestamp(us * 1000)))
def test_the_canonical_form_of_a_message_is_rfc_8785(topic, session, seq, offset, changes, event):
    message = {"partition": 3, "offset": offset, "seq": seq, "type": "update", "event_ts": event, "kafka_ts": None}
    assert canonical_message(topic, session, message, changes, COLUMNS) == \
        reference(topic, session, message, changes, COLUMNS)


@settings(max_examples=2000, deadline=None)
@given(DOUBLE)
def test_a_double_is_written_as_rfc_8785_writes_a_number(x):
    if not math.isinf(x):
        assert jcs_number(x) == rfc8785.dumps(x).decode()


def test_a_known_message_has_this_canonical_text():
    """The form another engine must reproduce byte for byte."""
    message = {"partition": 0, "offset": 17, "seq": 9_223_372_036_854_775_807, "type": "update",
               "event_ts": pd.Timestamp("2026-11-21T10:00:00.000001"), "kafka_ts": None}
    changes = [{"row_pos": 1, "row_id": "r\u00e9\n2", "op": "delete", "name": None, "count": None},
               {"row_pos": 0, "row_id": "r1", "op": "upsert", "name": "a\"b", "count": -(2**63),
                "level": 1e21, "on": False, "at": pd.Timestamp("1970-01-01T00:00:01")}]
    text = canonical_message("sensor-1", "s-1", message, changes, COLUMNS)
    assert text.decode() == (
        '{"changes":[{"op":"upsert","row_id":"r1","row_pos":"0","values":{"at":"1000000",'
        '"count":"-9223372036854775808","level":1e+21,"name":"a\\"b","on":false}},'
        '{"op":"delete","row_id":"r\u00e9\\n2","row_pos":"1","values":{}}],'
        '"event_ts":"1795255200000001","offset":"17","partition":"0","seq":"9223372036854775807",'
        '"session":"s-1","topic":"sensor-1","type":"update"}')
    assert ChainKey(None).digest("", text) == "sha256:" + hashlib.sha256(b"\n" + text).hexdigest()


def test_a_column_added_later_leaves_earlier_digests_as_they_were():
    message = {"partition": 0, "offset": 1, "seq": 1, "type": "snapshot"}
    old = canonical_message("t", "s", message, [{"row_pos": 0, "row_id": "a", "op": "upsert", "name": "x"}],
                            [("name", "string")])
    new = canonical_message("t", "s", message, [{"row_pos": 0, "row_id": "a", "op": "upsert", "name": "x",
                                                 "extra": None}], [("name", "string"), ("extra", "long")])
    assert old == new


def batch(values=("a", "b", "c")) -> dict:
    """Three messages: a snapshot of two rows, an update of one row, an update of one row."""
    n = len(values)
    return {"partition": np.zeros(n + 1, dtype=np.int64), "offset": np.array([10, 10, 11, 12]),
            "seq": np.array([1, 1, 2, 3]), "type": np.array(["snapshot", "snapshot", "update", "update"], dtype=object),
            "row_pos": np.array([0, 1, 0, 0]), "row_id": np.array(["r1", "r2", "r1", "r2"], dtype=object),
            "op": np.array(["upsert"] * 4, dtype=object),
            "event_ts": np.array(["2026-11-21T10:00:00"] * 4, dtype="datetime64[ns]"),
            "kafka_ts": np.array([None] * 4, dtype="datetime64[ns]"),
            "name": np.array(["x", *values], dtype=object), "count": pd.array([1, None, 3, 4], dtype="Int64")}


ROW = [("name", "string"), ("count", "long")]


def test_each_message_links_to_the_one_before_and_a_batch_continues_the_chain():
    prevs, digests, head = chain_messages("t", "s", batch(), CHAIN_START, ROW)
    assert prevs[0] == prevs[1] == CHAIN_START and digests[0] == digests[1]
    assert prevs[2] == digests[1] and prevs[3] == digests[2] and head == digests[3]
    assert len(set(digests)) == 3 and head.startswith("sha256:")
    # The same messages in two batches give the same digests.
    first = {k: v[:3] for k, v in batch().items()}
    second = {k: v[3:] for k, v in batch().items()}
    _, d1, h1 = chain_messages("t", "s", first, CHAIN_START, ROW)
    _, d2, h2 = chain_messages("t", "s", second, h1, ROW)
    assert list(d1) + list(d2) == list(digests) and h2 == head


def test_an_altered_value_changes_its_message_and_every_later_digest():
    _, digests, head = chain_messages("t", "s", batch(), CHAIN_START, ROW)
    _, altered, altered_head = chain_messages("t", "s", batch(("a", "B", "c")), CHAIN_START, ROW)
    assert list(altered[:2]) == list(digests[:2]) and altered[2] != digests[2] and altered_head != head


def test_with_a_key_the_digests_are_hmacs_that_another_key_does_not_give():
    _, plain, _ = chain_messages("t", "s", batch(), CHAIN_START, ROW)
    _, keyed, _ = chain_messages("t", "s", batch(), CHAIN_START, ROW, ChainKey("k-1"))
    _, other, _ = chain_messages("t", "s", batch(), CHAIN_START, ROW, ChainKey("k-2"))
    assert keyed[0].startswith("hmac-sha256:") and keyed[0] != other[0] and plain[0] != keyed[0]
    assert "k-1" not in repr(ChainKey("k-1"))


# -- verify's side: the chain checked from the rows as row_changes holds them ----------------------

def logged(key=None, prev=CHAIN_START, values=("a", "b", "c")) -> pa.Table:
    """``batch()`` as row_changes holds it, with its digests."""
    cols = batch(values)
    prevs, digests, _ = chain_messages("t", "s", cols, prev, ROW, ChainKey(key))
    frame = pd.DataFrame({**{k: v for k, v in cols.items()}, "topic": "t", "session": "s",
                          "chain_prev": prevs, "chain_digest": digests})
    frame["event_ts"] = frame["event_ts"].dt.tz_localize("UTC")
    frame["kafka_ts"] = frame["kafka_ts"].dt.tz_localize("UTC")
    return pa.Table.from_pandas(frame, preserve_index=False)


def checked(table: pa.Table, key=None, head="last"):
    check = ChainCheck(row_kinds(table.schema, ["name", "count"]), ChainKey(key))
    found = check.add(table)
    if found is None:
        digests = table["chain_digest"].to_pylist()
        found = check.finish({("t", "s"): digests[-1] if head == "last" else head})
    return found


def test_the_rows_as_logged_give_back_their_digests_and_link():
    assert checked(logged()) is None
    assert checked(logged(key="k"), key="k") is None


def test_a_chain_of_plain_digests_is_a_discrepancy_when_a_key_is_given_and_hmacs_need_one():
    found = checked(logged(), key="k")
    assert found is not None and "it was not made with the chain's key" in found.detail
    with pytest.raises(UsageError):
        checked(logged(key="k"))


def test_a_chain_that_starts_at_an_update_or_ends_before_its_head_is_named():
    updates_only = logged().slice(2)  # the snapshot's rows gone: the first update links to nothing
    found = checked(updates_only)
    assert found is not None and "links to a digest that no message of the session holds" in found.detail
    assert "not the one its rows give" in checked(logged().slice(1)).detail  # one of a message's rows gone
    found = checked(logged().slice(0, 3), head=logged()["chain_digest"][3].as_py())  # the last message gone
    assert found is not None and found.table == "sessions" and "lost their rows" in found.detail


def test_a_sessions_seal_is_an_hmac_of_its_sealed_fields_as_rfc_8785_and_needs_a_key():
    from reconstructor.core.seal import SEAL_DOMAIN, canonical_session, session_seal

    row = {"topic": "t", "session": "s\u2713", "partition": 3, "status": "open", "first_seq": 0, "last_seq": 2**63 - 1,
           "last_offset": 12, "row_count": 4, "chain_head": "hmac-sha256:ab", "updated_at": "not sealed"}
    assert canonical_session(row) == (
        '{"chain_head":"hmac-sha256:ab","first_seq":"0","last_offset":"12","last_seq":"9223372036854775807",'
        '"partition":"3","row_count":"4","session":"s\u2713","status":"open","topic":"t"}').encode("utf-8")
    assert canonical_session(row) == rfc8785.dumps({k: (v if isinstance(v, str) else str(v)) for k, v in row.items()
                                                    if k != "updated_at"})
    assert canonical_session({**row, "chain_head": None, "first_seq": None}).startswith(b'{"last_offset"')
    import hmac as hmac_lib
    expected = hmac_lib.new(b"k", SEAL_DOMAIN + canonical_session(row), hashlib.sha256).hexdigest()
    assert session_seal(ChainKey("k"), row) == f"hmac-sha256:{expected}"
    assert session_seal(ChainKey(None), row) is None
    assert session_seal(ChainKey("k"), {**row, "last_seq": 2**63 - 2}) != session_seal(ChainKey("k"), row)
