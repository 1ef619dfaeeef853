"""One session's micro-batch step: gather its messages, check them, apply them.

``process_batch`` is what the Spark state function calls for a ``(topic, session)`` group.  It is
plain pandas/numpy: the group's frames are gathered; a plain run of updates takes the short path
(``apply_update_run``), anything else the general one (``apply_in_kafka_order``), which checks
continuity against the state carried from earlier micro-batches and applies the valid messages to
the session table.  The first violation is returned, not applied: the caller fails the query on it
(or, in quarantine mode, it is recorded and the session set aside until its next snapshot).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.continuity import check_continuity, malformed
from reconstructor.core.frames import VALUE, change_rows, concat_rows, exact_longs
from reconstructor.core.policy import STRICT, IntegrityPolicy
from reconstructor.core.quarantine import await_resync, quarantine, resyncs_at_once, rows_of, set_aside, unnamed_records
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState
from reconstructor.core.table import (
    Drift,
    apply_messages,
    apply_updates,
    columns_of,
    empty_changes,
    empty_table,
    snapshot_problem,
)
from reconstructor.core.violations import ViolationKind, ViolationRecord
from reconstructor.errors import Rejected


@dataclass
class BatchResult:
    #: The applied row changes as columns (``CHANGE`` and the row columns, canonical dtypes, in
    #: apply order): the Spark shell builds its output from these, and a frame per touched
    #: session would be built only to be taken apart again.  ``changes`` is the same as a frame.
    columns: dict[str, Any]
    state: SessionState | None
    violation: ViolationRecord | None = None
    skipped: int = 0  # messages skipped while awaiting a snapshot
    #: What goes to the ``violations`` table, in Kafka order: snapshot drifts, and in quarantine
    #: mode the violations and the records set aside.
    recorded: list[ViolationRecord] = field(default_factory=list)

    @functools.cached_property
    def changes(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns, copy=False)


def process_batch(
    topic: str,
    session: str | None,
    frames: pd.DataFrame | Iterable[pd.DataFrame],
    state: SessionState | None,
    schema: RowSchema,
    *,
    await_snapshot: bool = False,
    policy: IntegrityPolicy = STRICT,
) -> BatchResult:
    """Check and apply one micro-batch of one session (``session`` None: records that name none).
    Never raises for bad input: returns it."""
    df = exact_longs(_gather(frames), schema)
    if df.empty:
        return BatchResult(columns_of(empty_changes(schema)), state)
    fast = apply_update_run(df, state, schema)
    if fast is not None:
        return fast
    return apply_in_kafka_order(topic, session, df, state, schema, await_snapshot, policy)


def apply_in_kafka_order(topic: str, session: str | None, df: pd.DataFrame, state: SessionState | None,
                         schema: RowSchema, await_snapshot: bool, policy: IntegrityPolicy = STRICT) -> BatchResult:
    """The general path: snapshots, ends, skips, quarantine and every violation.

    The messages are walked in Kafka order (``continuity``); the valid prefix is applied, and a
    record the table refuses inside it (a delete of an unknown row, a flawed snapshot) is the
    earlier record, so it is the verdict before the violation that ends the prefix.  In quarantine
    mode the walk goes on past a violation: the session is set aside (``quarantine``) until its
    next snapshot, from which it is checked and applied again.  A quarantined session is resynced
    that way whatever the mode, so a run in fail mode after a quarantine run finishes the job.
    """
    if session is None and policy.quarantine:
        return BatchResult(columns_of(empty_changes(schema)), state, recorded=unnamed_records(topic, df))
    recorded: list[ViolationRecord] = []
    pieces: list[pd.DataFrame] = []
    current, skipped = state, 0
    rest: pd.DataFrame | None = df
    while rest is not None:
        if current is not None and current.status == SessionStatus.QUARANTINED:
            rest, current, aside = await_resync(topic, session, rest, current, schema)
            recorded += aside
            if rest is None:  # the rest awaits the session's snapshot
                break
        step = _valid_prefix(topic, session, rest, current, schema, await_snapshot, policy)
        if step.changes is not None:
            pieces.append(step.changes)
        recorded += [d.violation(topic, session) for d in step.drifts]
        current, skipped = step.state, skipped + step.skipped
        v = step.violation
        if v is None:
            break
        if not policy.quarantine or v.kind == ViolationKind.SNAPSHOT_DRIFT:
            return _fail(schema, state, v)
        if current is not None and current.status == SessionStatus.ENDED:
            # An ended session stays ended (no snapshot reopens it): every later record is AFTER_END.
            recorded += set_aside(topic, session, step.rest, current, ViolationKind.AFTER_END,
                                  f"session ended at seq {current.last_seq}; no message may follow its end")
            break
        recorded.append(v)
        current = quarantine(current, v, schema)
        rest = step.rest
        if rest is None:
            break
        if not resyncs_at_once(rest, v, current):
            rest = rest[(rest["partition"] != v.partition) | (rest["offset"] != v.offset)]
        if rest.empty:
            break
    changes = pieces[0] if len(pieces) == 1 else (concat_rows(pieces) if pieces else empty_changes(schema))
    return BatchResult(columns_of(changes), current, skipped=skipped, recorded=recorded)


@dataclass
class _Step:
    """One valid prefix of the general path, applied: its changes (None when none applied), the
    state after it, the first violation after it and the rows from that violation's record on."""

    changes: pd.DataFrame | None
    state: SessionState | None
    skipped: int = 0
    violation: ViolationRecord | None = None
    drifts: list[Drift] = field(default_factory=list)
    rest: pd.DataFrame | None = None


def _valid_prefix(topic: str, session: str | None, df: pd.DataFrame, state: SessionState | None,
                  schema: RowSchema, await_snapshot: bool, policy: IntegrityPolicy) -> _Step:
    checked = check_continuity(topic, session, df, state, await_snapshot)
    msgs, skipped, cut, violation = checked.messages, checked.skipped, checked.cut, checked.violation
    valid = msgs.iloc[skipped:cut]
    if not len(valid):
        return _Step(None, state, skipped, _with_value(violation, msgs, cut), rest=_from(df, msgs, cut))
    known = state is not None and state.snapshot_seq is not None
    table = state.table if state is not None else empty_table(schema).copy()
    rows = df if skipped == 0 and cut == len(msgs) else rows_of(df, valid)  # the common case: all apply
    try:
        changes, table, drifts = apply_messages(valid, rows, table, schema, known=known, on_drift=policy.on_drift)
    except Rejected as rejected:
        # The refused record is the verdict; in quarantine mode the messages before it apply.
        refused = rejected.finding
        at = int(np.flatnonzero((msgs["partition"] == refused.partition).to_numpy()
                                & (msgs["offset"] == refused.offset).to_numpy())[0])
        violation = _with_value(refused.violation(topic, session), msgs, at)
        if not policy.quarantine or refused.kind == ViolationKind.SNAPSHOT_DRIFT or at == skipped:
            return _Step(None, state, skipped, violation, rest=_from(df, msgs, at))
        cut, valid = at, msgs.iloc[skipped:at]
        table = state.table if state is not None else empty_table(schema).copy()
        changes, table, drifts = apply_messages(valid, rows_of(df, valid), table, schema, known=known,
                                                on_drift=policy.on_drift)
    else:
        violation = _with_value(violation, msgs, cut)
    last = valid.iloc[-1]
    snaps = valid[valid["type"].eq("snapshot")]
    new_state = SessionState(
        partition=checked.partition,
        status=SessionStatus.ENDED if last["type"] == "end" else SessionStatus.OPEN,
        first_seq=_first(state and state.first_seq, int(valid["seq"].iloc[0])),
        last_seq=int(last["seq"]),
        last_offset=int(last["offset"]),
        snapshot_seq=int(snaps["seq"].iloc[-1]) if len(snaps) else state.snapshot_seq if state else None,
        snapshot_offset=int(snaps["offset"].iloc[-1]) if len(snaps) else state.snapshot_offset if state else None,
        started_ts=_first(state and state.started_ts, _ts(valid["event_ts"].iloc[0])),
        last_event_ts=_ts(last["event_ts"]),
        stored=table,
    )
    return _Step(changes, new_state, skipped, violation, drifts, rest=_from(df, msgs, cut))


def _from(df: pd.DataFrame, msgs: pd.DataFrame, cut: int) -> pd.DataFrame | None:
    """The rows of the records from the one at ``cut`` on (None when there is none)."""
    return None if cut >= len(msgs) else rows_of(df, msgs.iloc[cut:])



def _with_value(v: ViolationRecord | None, msgs: pd.DataFrame, at: int) -> ViolationRecord | None:
    """``v`` with the raw value of its record (``msgs``' row ``at``), where the stream carries
    values (quarantine mode).  A drift keeps none: its snapshot is the whole table."""
    if v is None or VALUE not in msgs:
        return v
    return replace(v, value=msgs[VALUE].iloc[at])


def _first(value: Any, otherwise: Any) -> Any:
    """A carried first seq or time, else this batch's (a session quarantined before any message
    applied has none)."""
    return otherwise if value is None else value


def apply_update_run(df: pd.DataFrame, state: SessionState | None, schema: RowSchema) -> BatchResult | None:
    """The short path: a run of update messages that all apply, to an open session or after the
    snapshot that starts a new one; None when it cannot vouch for the batch.

    Most batches of a live fleet are exactly this, and much of a batch's cost is the general
    path's bookkeeping (per-message frames, segments, re-casts).  Anything else (a resync
    snapshot, an end, a parse error, a key, seq or partition out of line, a rowless message, a
    flawed snapshot, a delete of an unknown row) returns None: the general path then applies it or
    names the violation, so both paths always agree (a property test holds them to it).
    """
    if state is not None and state.status != SessionStatus.OPEN:
        return None
    # Each column read once: a frame's column access costs more than the check made with it.
    cols: dict[str, Any] = {str(name): column for name, column in df.items()}
    run = _update_run(cols, state)
    if run is None:
        return None
    rows = change_rows(cols, np.lexsort((cols["row_pos"].to_numpy(dtype=np.int64), run.seqs)), schema)
    table = _run_table(rows, run.snapshot_rows, len(df), state, schema.names)
    if table is None:
        return None
    last = int(run.first_row[-1])
    last_seq, last_offset = int(run.msg_seqs[-1]), int(run.offsets[last])
    last_ts = _ts(cols["event_ts"].iloc[last])
    if state is not None:
        return BatchResult(rows, replace(state, last_seq=last_seq, last_offset=last_offset,
                                         last_event_ts=last_ts, stored=table))
    first, start = int(run.first_row[0]), int(run.msg_seqs[0])
    return BatchResult(rows, SessionState(
        partition=int(run.partition), status=SessionStatus.OPEN, first_seq=start, last_seq=last_seq,
        last_offset=last_offset, snapshot_seq=start, snapshot_offset=int(run.offsets[first]),
        started_ts=_ts(cols["event_ts"].iloc[first]), last_event_ts=last_ts, stored=table))


@dataclass(frozen=True)
class _UpdateRun:
    """A batch the short path vouches for, as the arrays it read while checking it."""

    partition: int
    #: Per row: its record's offset and seq.
    offsets: np.ndarray
    seqs: np.ndarray
    #: Per message, in Kafka order: its seq and its first row.
    msg_seqs: np.ndarray
    first_row: np.ndarray
    #: The rows of the snapshot that starts a new session (0 for an open one).
    snapshot_rows: int


def _update_run(cols: dict[str, Any], state: SessionState | None) -> _UpdateRun | None:
    """The batch's columns as a run of updates in line with ``state`` (for a new session, after
    the snapshot that starts it), as the arrays read to check it; None when they are not (a parse
    error or a wrong key, a null coordinate, a record on another partition, rows of one message
    that disagree on its seq, a seq out of line, a message other than an update)."""
    if malformed(cols).any() or any(_has_null(cols[c]) for c in ("row_pos", "seq", "offset")):
        return None
    partitions = cols["partition"].to_numpy()
    partition = state.partition if state is not None else partitions[0]
    if not (partitions == partition).all():
        return None
    offsets = cols["offset"].to_numpy(dtype=np.int64)
    seqs = cols["seq"].to_numpy(dtype=np.int64)
    msg_offsets, first_row = np.unique(offsets, return_index=True)  # the messages in Kafka order
    msg_seqs = seqs[first_row]
    if not np.array_equal(seqs, msg_seqs[np.searchsorted(msg_offsets, offsets)]):
        return None  # rows of one message disagree on its seq
    last_seq = state.last_seq if state is not None else None
    if state is not None and last_seq is None:
        return None  # a session set aside before any message applied: the general path resyncs it
    if (np.diff(msg_seqs) != 1).any() or (last_seq is not None and int(msg_seqs[0]) - last_seq != 1):
        return None  # a gap, a duplicate or a swap (Python ints: a seq may be the largest long)
    types = cols["type"].to_numpy()
    is_update = types == "update"
    in_snapshot = (offsets == msg_offsets[0]) if state is None else np.zeros(len(offsets), dtype=bool)
    if not (is_update | in_snapshot).all() or not (types[in_snapshot] == "snapshot").all():
        return None
    return _UpdateRun(partition, offsets, seqs, msg_seqs, first_row, int(in_snapshot.sum()))


def _run_table(rows: dict[str, Any], snapshot_rows: int, n: int, state: SessionState | None, names: list[str]) -> Any:
    """The session table after the run's ``n`` change ``rows`` (the snapshot's first: they sort
    first), or None when the snapshot is flawed or an update deletes an unknown row."""
    if state is None:
        snapshot = pd.DataFrame({k: v[:snapshot_rows] for k, v in rows.items()})
        if snapshot_problem(snapshot) is not None:
            return None
        table = snapshot.set_index("row_id")[names]
    else:
        table = state.stored
    if snapshot_rows < n:
        try:
            table = apply_updates({k: v[snapshot_rows:] for k, v in rows.items()}, table, names)
        except Rejected:
            return None  # a delete of an unknown row
    return table


def _gather(frames: pd.DataFrame | Iterable[pd.DataFrame]) -> pd.DataFrame:
    if isinstance(frames, pd.DataFrame):
        return frames
    parts = list(frames)
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _has_null(s: pd.Series) -> bool:
    """Whether ``s`` holds a null; a numpy int or bool column cannot, and is not scanned, and a
    nullable one (``Int64``) says so by its mask."""
    if isinstance(s.dtype, pd.api.extensions.ExtensionDtype):
        return bool(s.array.isna().any())
    return s.dtype.kind not in "iub" and bool(s.isna().any())


def _fail(schema: RowSchema, state: SessionState | None, v: ViolationRecord) -> BatchResult:
    return BatchResult(columns_of(empty_changes(schema)), state, violation=v)


def _ts(value: Any) -> pd.Timestamp | None:
    return None if value is None or pd.isna(value) else pd.Timestamp(value)
