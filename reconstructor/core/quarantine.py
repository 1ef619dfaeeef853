"""Quarantine: a violating session set aside until its next snapshot resyncs it.

In quarantine mode (``--on-violation quarantine``) a violation does not stop the query: the
record is kept in the ``violations`` table, the session's status becomes ``quarantined`` (its rows
leave ``current_rows``; its table stays in the state), and every later record of it is set aside,
each recorded as ``SKIPPED``, until a well-formed snapshot on its partition with a seq past the
last one applied (the violating record itself when it is a snapshot that came after a gap).  That
snapshot resyncs it: the table becomes the snapshot (rows it dropped are deletes in
``row_changes``, so the change log still folds to the table) and the seq checks go on from the
snapshot's seq.

Everything here is decided record by record in Kafka order from the carried state, so the tables
and the recorded rows are the same whatever the micro-batch split.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.continuity import kafka_order
from reconstructor.core.frames import VALUE, int_or_none
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState
from reconstructor.core.table import empty_table, snapshot_problem
from reconstructor.core.violations import ViolationKind, ViolationRecord

SET_ASIDE = "set aside: the session is quarantined until its next snapshot"


def quarantine(state: SessionState | None, v: ViolationRecord, schema: RowSchema) -> SessionState:
    """The session after violation ``v``: quarantined, its table and seqs as last applied (none
    when nothing of it ever applied)."""
    if state is not None:
        return replace(state, status=SessionStatus.QUARANTINED)
    if v.partition is None:  # a record's violation names its partition; a data loss sets no state aside
        raise ValueError(f"a {v.kind.value} with no partition sets no session aside")
    return SessionState(partition=int(v.partition), status=SessionStatus.QUARANTINED, first_seq=None,
                        last_seq=None, last_offset=None, snapshot_seq=None, snapshot_offset=None,
                        started_ts=None, last_event_ts=None, stored=empty_table(schema).copy())


def await_resync(topic: str, session: str | None, df: pd.DataFrame, state: SessionState, schema: RowSchema,
                 ) -> tuple[pd.DataFrame | None, SessionState, list[ViolationRecord]]:
    """Set aside a quarantined session's records up to its next well-formed snapshot on its
    partition: (the rows from that snapshot on, or None; the state to check them against; the
    records set aside).  The state to check against is open with the snapshot's seq next, so the
    snapshot applies over the kept table."""
    msgs, bad = kafka_order(df, state)
    resync = _first_resync(df, msgs, bad, state)
    aside = _records(topic, session, msgs.iloc[:resync], bad.iloc[:resync], ViolationKind.SKIPPED, SET_ASIDE)
    if resync == len(msgs):
        return None, state, aside
    return (rows_of(df, msgs.iloc[resync:]),
            replace(state, status=SessionStatus.OPEN, last_seq=int(msgs["seq"].iloc[resync]) - 1), aside)


def resyncs_at_once(df: pd.DataFrame, v: ViolationRecord, state: SessionState) -> bool:
    """Whether the record of violation ``v`` (the first of ``df`` in Kafka order) resyncs the
    session it just quarantined: a GAP on a well-formed snapshot.  The snapshot is the whole table,
    newer than anything lost, so nothing is gained by waiting for the next one; a DUPLICATE
    snapshot is old data and never resyncs."""
    if v.kind != ViolationKind.GAP:
        return False
    msgs, bad = kafka_order(df, state)
    return _first_resync(df, msgs.iloc[:1], bad.iloc[:1], state) == 0


def _first_resync(df: pd.DataFrame, msgs: pd.DataFrame, bad: pd.Series, state: SessionState) -> int:
    """The position in ``msgs`` of the first well-formed snapshot on the session's partition with a
    seq past the last one applied, else ``len(msgs)``.  An older snapshot delivered again is old
    data: resyncing to it would move the session back and let stale rows read as live."""
    newer = (np.ones(len(msgs), dtype=bool) if state.last_seq is None
             else pd.to_numeric(msgs["seq"], errors="coerce").gt(state.last_seq).to_numpy(dtype=bool, na_value=False))
    candidates = np.flatnonzero(msgs["type"].eq("snapshot").to_numpy() & bad.isna().to_numpy()
                                & (msgs["partition"] == state.partition).to_numpy() & newer)
    for at in candidates:
        snapshot = rows_of(df, msgs.iloc[at:at + 1])
        if snapshot_problem(snapshot[snapshot["row_pos"].notna()]) is None:
            return int(at)
    return len(msgs)


def set_aside(topic: str, session: str | None, df: pd.DataFrame | None, state: SessionState,
              kind: ViolationKind, detail: str) -> list[ViolationRecord]:
    """Every record of ``df`` recorded as ``kind`` with ``detail``, in Kafka order."""
    if df is None or df.empty:
        return []
    msgs, bad = kafka_order(df, state)
    return _records(topic, session, msgs, bad, kind, detail)


def unnamed_records(topic: str, df: pd.DataFrame) -> list[ViolationRecord]:
    """Records that name no session (no key and no session in the value): each is ``MALFORMED``
    with a null session; there is no session to quarantine."""
    msgs, bad = kafka_order(df, None)
    return _records(topic, None, msgs, bad, ViolationKind.MALFORMED, "the record names no session")


def rows_of(df: pd.DataFrame, msgs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that belong to the messages ``msgs`` (by partition and offset)."""
    keys = pd.MultiIndex.from_frame(df[["partition", "offset"]])
    return df[keys.isin(pd.MultiIndex.from_frame(msgs[["partition", "offset"]]))]


def _records(topic: str, session: str | None, msgs: pd.DataFrame, bad: pd.Series, kind: ViolationKind,
             detail: str) -> list[ViolationRecord]:
    """One recorded row per message; a malformed one says why it is malformed, too."""
    values = msgs[VALUE].to_numpy() if VALUE in msgs else [None] * len(msgs)
    out = []
    for partition, offset, seq, why, value in zip(msgs["partition"], msgs["offset"], msgs["seq"],
                                                  bad.to_numpy(), values):
        text = detail if why is None else (why if kind == ViolationKind.MALFORMED else f"{detail} (malformed: {why})")
        out.append(ViolationRecord(kind, topic, int_or_none(partition), int_or_none(offset), session, None,
                                      int_or_none(seq), text, None if value is None or pd.isna(value) else str(value)))
    return out
