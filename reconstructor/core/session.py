"""One session's reconstruction step: order a micro-batch's messages, check them, apply them.

``process_batch`` is what the Spark state function calls for a ``(topic, session)`` group.  It is
plain pandas/numpy: the group's frames are gathered and sorted by ``seq``; continuity is checked
against the state carried from earlier micro-batches; the valid messages are applied to the
session table with vectorised set operations (never a Python loop per row).  The first violation
is returned, not applied: the caller fails the query on it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from reconstructor.core.blob import arrow_rows, row_ids, to_frame
from reconstructor.core.frames import (CHANGE, INT_COLUMNS, change_rows, coerce_columns, coerce_times,
                                       take, take_values, values_of)
from reconstructor.core.violations import IntegrityViolation, ViolationKind
from reconstructor.schema import RowSchema

OPEN, ENDED, TIMED_OUT = "open", "ended", "timed_out"


@dataclass
class SessionState:
    """What is carried between micro-batches for one session (the blob holds its table)."""

    partition: int
    status: str
    first_seq: int
    last_seq: int
    last_offset: int
    snapshot_seq: int
    snapshot_offset: int
    started_ts: pd.Timestamp | None
    last_event_ts: pd.Timestamp | None
    #: The session table as held: pandas indexed by ``row_id``, or Arrow (``row_id`` first) as read
    #: from the state blob.  A plain update batch goes from blob to blob in Arrow (``_update_run``)
    #: and never pays for pandas; ``table`` converts on first use.
    stored: pd.DataFrame | pa.Table = field(repr=False)

    @property
    def table(self) -> pd.DataFrame:
        """The session table as pandas, indexed by ``row_id``."""
        if isinstance(self.stored, pa.Table):
            self.stored = to_frame(self.stored)
        return self.stored

    @table.setter
    def table(self, frame: pd.DataFrame) -> None:
        self.stored = frame

    @property
    def row_count(self) -> int:
        return len(self.stored)


@dataclass
class BatchResult:
    #: The applied row changes as columns (``CHANGE`` and the row columns, canonical dtypes, in
    #: apply order): the Spark shell builds its output from these, and a frame per touched
    #: session would be built only to be taken apart again.  ``changes`` is the same as a frame.
    columns: dict
    state: SessionState | None
    violation: IntegrityViolation | None = None
    skipped: int = 0  # messages skipped while awaiting a snapshot

    @functools.cached_property
    def changes(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns, copy=False)


def columns_of(frame: pd.DataFrame) -> dict:
    """A change frame as ``BatchResult.columns``."""
    return {name: values_of(frame[name]) for name in frame.columns}


def empty_changes(schema: RowSchema) -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in CHANGE})
    for col in schema.columns:
        frame[col.name] = pd.Series(dtype=object)
    frame = coerce_columns(frame, schema)
    return frame.astype({"partition": "int64", "offset": "int64", "seq": "int64", "row_pos": "int64"})


def process_batch(
    topic: str,
    session: str,
    frames,
    state: SessionState | None,
    schema: RowSchema,
    *,
    await_snapshot: bool = False,
) -> BatchResult:
    """Check and apply one micro-batch of one session. Never raises for bad input: returns it."""
    df = _gather(frames)
    if df.empty:
        return BatchResult(columns_of(empty_changes(schema)), state)
    fast = _update_run(df, state, schema)
    if fast is not None:
        return fast
    return _any_batch(topic, session, df, state, schema, await_snapshot)


def _any_batch(topic: str, session: str, df: pd.DataFrame, state: SessionState | None,
               schema: RowSchema, await_snapshot: bool) -> BatchResult:
    """The general path: snapshots, ends, skips and every violation.

    The messages are walked in Kafka order (the session's partition first, by offset; a session
    lives in one partition, so a record on another one can only be a violation): at every offset
    the seq must be the previous one + 1.  The first record that breaks a rule is the verdict,
    whatever its kind, so a verdict never depends on where a micro-batch ends.
    """
    msgs, bad_detail = _messages(df, state)
    n = len(msgs)
    seqs = msgs["seq"].fillna(0).to_numpy(dtype=np.int64)  # a malformed record's seq may be null
    types = msgs["type"].to_numpy()
    malformed = bad_detail.notna().to_numpy()
    ref_partition = state.partition if state is not None else int(msgs["partition"].iloc[0])
    moved = msgs["partition"].to_numpy() != ref_partition

    # 1. Where the checks start: a new session's first message must be a snapshot (or, awaiting
    #    one, the messages before it are skipped).
    skipped = 0
    if state is None:
        is_snap = (types == "snapshot") & ~malformed
        if not is_snap[0] and not malformed[0]:
            if not await_snapshot:
                return _fail(schema, state, _violation(
                    ViolationKind.NO_SNAPSHOT, topic, session, msgs.iloc[0], None,
                    f"a session's first message must be a snapshot, got {types[0]!r}"))
            skipped = int(np.argmax(is_snap | malformed)) if (is_snap | malformed).any() else n
            if skipped == n:
                return BatchResult(columns_of(empty_changes(schema)), None, skipped=skipped)

    # 2. The first record, from there, that breaks a rule; each rule as "first bad index".
    #    Differences of non-negative longs cannot overflow; the expected seq can (a seq at the
    #    largest long may be followed by nothing), so it is computed in Python ints.
    steps = np.diff(seqs[skipped:]) != 1
    seq_bad = np.flatnonzero(steps) + skipped + 1
    if state is not None and n and int(seqs[0]) - state.last_seq != 1:
        seq_bad = np.concatenate([[0], seq_bad])
    ends = np.flatnonzero(types[skipped:] == "end") + skipped
    after_end = ends[:1] + 1 if state is None or state.status != ENDED else np.array([0])
    candidates = [int(a[0]) for a in (np.flatnonzero(malformed), after_end[after_end < n],
                                      np.flatnonzero(moved), seq_bad) if len(a)]
    cut = min(candidates) if candidates else n

    # 3. Apply the valid prefix; a delete of an unknown row (or a flawed snapshot) inside it is
    #    the earlier record, so it comes first.
    valid = msgs.iloc[skipped:cut]
    if len(valid):
        if skipped == 0 and cut == n:
            rows = df  # the common case: every message of the batch applies
        else:
            keys = pd.MultiIndex.from_frame(df[["partition", "offset"]])
            rows = df[keys.isin(pd.MultiIndex.from_frame(valid[["partition", "offset"]]))]
        table = state.table if state is not None else _empty_table(schema).copy()
        applied = _apply(valid, rows, table, schema, state)
        if isinstance(applied, tuple) and isinstance(applied[0], IntegrityViolation):
            bad_row, detail = applied[0], applied[1]
            return _fail(schema, state, replace(bad_row, topic=topic, session=session, detail=detail))
        changes, table = applied
    if cut < n:
        row = msgs.iloc[cut]
        if cut > skipped:
            previous = int(seqs[cut - 1])
        else:
            previous = state.last_seq if state is not None else None
        expected = None if previous is None else previous + 1
        if malformed[cut]:
            kind, detail = ViolationKind.MALFORMED, bad_detail.iloc[cut]
        elif cut in after_end:
            kind, expected = ViolationKind.AFTER_END, None
            ended_at = state.last_seq if cut == 0 and state is not None else int(seqs[cut - 1])
            detail = f"session ended at seq {ended_at}; no message may follow its end"
        elif moved[cut]:
            kind = ViolationKind.PARTITION_MOVED
            detail = (f"session was on {topic}[{ref_partition}] and shows up on "
                      f"{topic}[{int(row['partition'])}]")
        elif int(seqs[cut]) < expected:
            kind = ViolationKind.DUPLICATE
            detail = f"seq {int(seqs[cut])} was already seen (last applied seq {previous})"
        else:
            kind = ViolationKind.GAP
            detail = f"missing seq {expected}..{int(seqs[cut]) - 1}"
        return _fail(schema, state, _violation(kind, topic, session, row, expected, detail))

    last = valid.iloc[-1]
    snaps = valid[valid["type"].eq("snapshot")]
    new_state = SessionState(
        partition=ref_partition,
        status=ENDED if last["type"] == "end" else OPEN,
        first_seq=state.first_seq if state is not None else int(valid["seq"].iloc[0]),
        last_seq=int(last["seq"]),
        last_offset=int(last["offset"]),
        snapshot_seq=int(snaps["seq"].iloc[-1]) if len(snaps) else state.snapshot_seq,
        snapshot_offset=int(snaps["offset"].iloc[-1]) if len(snaps) else state.snapshot_offset,
        started_ts=state.started_ts if state is not None else _ts(valid["event_ts"].iloc[0]),
        last_event_ts=_ts(last["event_ts"]),
        stored=table,
    )
    return BatchResult(columns_of(changes), new_state, skipped=skipped)


def _messages(df: pd.DataFrame, state: SessionState | None) -> tuple[pd.DataFrame, pd.Series]:
    """One row per message in Kafka order (the session's partition first, then by offset), and
    per message why it is malformed (null when it is not): its first bad row's parse error, or
    its Kafka key that is missing or not its session."""
    bad = _malformed(df)
    ref = state.partition if state is not None else int(df["partition"].min())
    msgs = (df.assign(_elsewhere=df["partition"].to_numpy() != ref)
              .sort_values(["_elsewhere", "partition", "offset", "row_pos"], kind="stable")
              .drop_duplicates(["partition", "offset"])
              .drop(columns="_elsewhere")
              .reset_index(drop=True))
    detail = pd.Series([None] * len(msgs), dtype=object)
    if bad.any():
        rows = df[bad].sort_values(["partition", "offset", "row_pos"], kind="stable")
        rows = rows.drop_duplicates(["partition", "offset"])
        reasons = {}
        for _, row in rows.iterrows():
            if pd.notna(row["error"]):
                reason = str(row["error"])
            elif pd.isna(row["key"]):
                reason = "the Kafka record has no key; the key must be its session"
            else:
                reason = f"Kafka key {row['key']!r} is not the session {row['session']!r}"
            reasons[(int(row["partition"]), int(row["offset"]))] = reason
        detail = pd.Series([reasons.get((int(p), int(o))) for p, o in
                            zip(msgs["partition"], msgs["offset"])], dtype=object)
    return msgs, detail


def _violation(kind: ViolationKind, topic: str, session: str, row, expected, detail: str):
    return IntegrityViolation(kind, topic, _int(row["partition"]), _int(row["offset"]), session,
                              expected, _int(row["seq"]), detail)


def _malformed(df) -> np.ndarray:
    """Records that did not parse, or whose Kafka key is missing or not their session (``df``: a
    frame, or its columns by name)."""
    key = df["key"].to_numpy()
    return pd.notna(df["error"].to_numpy()) | pd.isna(key) | (key != df["session"].to_numpy())


def _has_null(s: pd.Series) -> bool:
    """Whether ``s`` holds a null; a numpy int or bool column cannot, and is not scanned."""
    return s.dtype.kind not in "iub" and bool(s.isna().any())


def _int_columns(changes: pd.DataFrame) -> pd.DataFrame:
    """The change frame's integer columns as int64; astype copies every column of the frame, even
    for a no-op, so only what needs it is cast."""
    ints = {c: "int64" for c in INT_COLUMNS if changes[c].dtype != "int64"}
    return changes.astype(ints) if ints else changes


def _gather(frames) -> pd.DataFrame:
    if isinstance(frames, pd.DataFrame):
        return frames
    frames = list(frames)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def _update_run(df: pd.DataFrame, state: SessionState | None, schema: RowSchema) -> BatchResult | None:
    """The common batch, on a short path: update messages that all apply, to an open session or
    after the snapshot that starts a new one.

    Most batches of a live fleet are exactly this, and much of a batch's cost was the general
    path's bookkeeping (per-message frames, segments, re-casts).  Anything else (a resync
    snapshot, an end, a parse error, a key, seq or partition out of line, a rowless message, a
    flawed snapshot, a delete of an unknown row) returns None: the general path then applies it or
    names the violation, so both paths always agree (a property test holds them to it).
    """
    if state is not None and state.status != OPEN:
        return None
    # Each column read once: a frame's column access costs more than the check made with it, and
    # this runs for every touched session of every micro-batch.
    cols = dict(df.items())
    if _malformed(cols).any() or any(_has_null(cols[c]) for c in ("row_pos", "seq", "offset")):
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
    start = int(msg_seqs[0])
    if (np.diff(msg_seqs) != 1).any() or (state is not None and start - state.last_seq != 1):
        return None  # a gap, a duplicate or a swap (Python ints: a seq may be the largest long)
    types = cols["type"].to_numpy()
    is_update = types == "update"
    in_snapshot = (offsets == msg_offsets[0]) if state is None else np.zeros(len(df), dtype=bool)
    if not (is_update | in_snapshot).all() or not (types[in_snapshot] == "snapshot").all():
        return None
    rows = change_rows(cols, np.lexsort((cols["row_pos"].to_numpy(dtype=np.int64), seqs)), schema)
    names = schema.names
    snapshot_rows = int(in_snapshot.sum())  # the snapshot's rows sort first
    if state is None:
        snapshot = pd.DataFrame({k: v[:snapshot_rows] for k, v in rows.items()})
        if _snapshot_problem(snapshot) is not None:
            return None
        table = snapshot.set_index("row_id")[names]
    else:
        table = state.stored
    if snapshot_rows < len(df):
        table = _apply_updates({k: v[snapshot_rows:] for k, v in rows.items()}, table, names)
        if isinstance(table, tuple):
            return None  # a delete of an unknown row
    changes = rows
    last = int(first_row[-1])
    last_seq, last_offset, last_ts = int(msg_seqs[-1]), int(offsets[last]), _ts(cols["event_ts"].iloc[last])
    if state is not None:
        return BatchResult(changes, replace(state, last_seq=last_seq, last_offset=last_offset,
                                            last_event_ts=last_ts, stored=table))
    first = int(first_row[0])
    return BatchResult(changes, SessionState(
        partition=int(partition), status=OPEN, first_seq=start, last_seq=last_seq,
        last_offset=last_offset, snapshot_seq=start, snapshot_offset=int(offsets[first]),
        started_ts=_ts(cols["event_ts"].iloc[first]), last_event_ts=last_ts, stored=table))


def rows_back(columns: dict, state: SessionState, resumed_from: SessionState, schema: RowSchema) -> dict:
    """``columns`` (a batch's changes) and, after them, the session table's rows that the batch did
    not change, as upserts: a timed-out session that resumes gets every row back in
    ``current_rows``.  Those rows carry the session's last record before its timeout (its seq,
    offset and time); their values are the table's own."""
    table = state.table
    kept = table[~table.index.isin(pd.Index(columns["row_id"]))]
    back = pd.DataFrame({name: kept[name].to_numpy() for name in schema.names})
    back["row_id"] = np.asarray(kept.index, dtype=object)
    back = back.assign(partition=resumed_from.partition, offset=resumed_from.last_offset,
                       seq=resumed_from.last_seq, type="update", row_pos=-1, op="upsert",
                       event_ts=resumed_from.last_event_ts, kafka_ts=pd.NaT)
    frame = pd.concat([pd.DataFrame(columns, copy=False), back[list(CHANGE) + schema.names]],
                      ignore_index=True)
    return columns_of(_int_columns(coerce_times(coerce_columns(frame, schema))))


def last_change_per_row(row_ids) -> np.ndarray:
    """True on each row's last change, given the ``row_id`` of changes in apply order, ``(seq, row_pos)``.

    Those are what ``current_rows`` needs from a batch: the group knows them already, so the sink
    does not have to shuffle and aggregate the whole change log to find them.
    """
    return ~pd.Index(row_ids).duplicated(keep="last")


def _apply(msgs: pd.DataFrame, rows: pd.DataFrame, table: pd.DataFrame, schema: RowSchema,
           state: SessionState | None):
    """Apply ordered, continuous messages to ``table``; return (changes, table) or a violation."""
    names = schema.names
    rows = rows[rows["row_pos"].notna()]
    rows = coerce_times(coerce_columns(rows, schema))
    rows = rows.sort_values(["seq", "row_pos"], kind="stable")
    segment_of_seq = pd.Series(msgs["type"].eq("snapshot").cumsum().to_numpy(), index=msgs["seq"].to_numpy())
    row_segment = rows["seq"].map(segment_of_seq).to_numpy()
    pieces = []
    for seg in np.unique(segment_of_seq.to_numpy()):
        seg_msgs = msgs[segment_of_seq.to_numpy() == seg]
        seg_rows = rows[row_segment == seg]
        head = seg_msgs.iloc[0]
        if head["type"] == "snapshot":
            snap_rows = seg_rows[seg_rows["seq"] == head["seq"]]
            problem = _snapshot_problem(snap_rows)
            if problem is not None:
                return (_row_violation(ViolationKind.MALFORMED, head), problem)
            new_ids = pd.Index(snap_rows["row_id"])
            dropped = table.index.difference(new_ids).sort_values()
            if len(dropped):
                gone = pd.DataFrame({"row_id": np.asarray(dropped, dtype=object)})
                gone = _stamp(gone, head, "delete")
                gone["row_pos"] = -1
                for col in names:
                    gone[col] = pd.Series([None] * len(gone), dtype=table[col].dtype)
                pieces.append(gone)
            pieces.append(snap_rows)
            table = snap_rows.set_index("row_id")[names]
            seg_rows = seg_rows[seg_rows["seq"] != head["seq"]]
        if len(seg_rows):
            result = _apply_updates(seg_rows, table, names)
            if isinstance(result, tuple) and isinstance(result[0], IntegrityViolation):
                return result
            table = result
            pieces.append(seg_rows)
    if not pieces:
        return empty_changes(schema), table
    changes = pd.concat([p[list(CHANGE) + names] for p in pieces], ignore_index=True)
    return _int_columns(coerce_columns(changes, schema)), table


@functools.lru_cache(maxsize=8)
def _empty_table(schema: RowSchema) -> pd.DataFrame:
    """A new session's table, built once per schema (building it costs more than copying it)."""
    return schema.empty_frame()


def _apply_updates(ops, table: pd.DataFrame | pa.Table, names: list[str]):
    """Upserts and deletes of one run of update messages, in (seq, row_pos) order, vectorised.

    ``ops`` is a change frame or its columns (``BatchResult.columns``).  A delete is valid when
    the row exists just before it: the previous op on that row in the run is an upsert, or there
    is none and the row is in the table.  ``table`` is pandas or Arrow (a state read from its
    blob), and the new table is the same kind.
    """
    if isinstance(ops, pd.DataFrame):
        ops = columns_of(ops)
    id_values, op_values = ops["row_id"], ops["op"]
    ids, table_ids = pd.Index(id_values), row_ids(table)
    is_delete = op_values == "delete"
    if is_delete.any():
        prev_op = pd.Series(op_values).groupby(id_values, sort=False).shift()
        existed = prev_op.eq("upsert").to_numpy() | (prev_op.isna().to_numpy() & ids.isin(table_ids))
        unknown = np.flatnonzero(is_delete & ~existed)
        if unknown.size:
            bad = {name: values[int(unknown[0])] for name, values in ops.items()}
            return (_row_violation(ViolationKind.UNKNOWN_ROW, bad),
                    f"delete of row {bad['row_id']!r}, which is not in the session's table")
    # Positions, and the new table built once from its columns: a frame-level filter, column pick
    # and concat cost a copy each, and this runs for every touched session of every batch.
    final = np.flatnonzero(~ids.duplicated(keep="last"))
    up = final[~is_delete[final]]
    kept = np.flatnonzero(~pd.Index(table_ids).isin(id_values[final]))
    if len(kept) == len(table) and not len(up):
        return table
    if isinstance(table, pa.Table):
        added = arrow_rows(id_values[up], {name: take(ops[name], up) for name in names}, table.schema)
        return pa.concat_tables([table.take(kept), added]).combine_chunks()
    index = pd.Index(np.concatenate([table_ids[kept], id_values[up]]), dtype=object, name="row_id")
    return pd.DataFrame({name: _stack(take_values(table[name], kept), take(ops[name], up)) for name in names},
                        index=index, copy=False)


def _stack(a, b):
    """Two value arrays as one, in the dtype ``pd.concat`` would give."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.concatenate([a, b])
    if a.dtype == b.dtype:
        return type(a)._concat_same_type([a, b])
    return pd.concat([pd.Series(a), pd.Series(b)], ignore_index=True).array


def _snapshot_problem(snap_rows: pd.DataFrame) -> str | None:
    if snap_rows["op"].eq("delete").any():
        rid = snap_rows.loc[snap_rows["op"].eq("delete"), "row_id"].iloc[0]
        return f"a snapshot carries whole rows, not deletes (row {rid!r})"
    dup = snap_rows["row_id"].duplicated()
    if dup.any():
        return f"row {snap_rows.loc[dup, 'row_id'].iloc[0]!r} appears twice in one snapshot"
    return None


def _stamp(frame: pd.DataFrame, msg: pd.Series, op: str) -> pd.DataFrame:
    for col in ("partition", "offset", "seq", "type", "event_ts", "kafka_ts"):
        frame[col] = msg[col]
    frame["op"] = op
    return frame


def _row_violation(kind: ViolationKind, row) -> IntegrityViolation:
    return IntegrityViolation(kind, None, _int(row["partition"]), _int(row["offset"]), None,
                              _int(row["seq"]), _int(row["seq"]))


def _fail(schema: RowSchema, state, v: IntegrityViolation) -> BatchResult:
    return BatchResult(columns_of(empty_changes(schema)), state, violation=v)


def _int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _ts(value) -> pd.Timestamp | None:
    return None if value is None or pd.isna(value) else pd.Timestamp(value)
