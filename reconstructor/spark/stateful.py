"""The stateful step: ``applyInPandasWithState`` over ``(topic, session)`` groups.

Spark hands the state function a group's rows unordered and in several pandas frames; the pure
core (``reconstructor.core.batch.process_batch``) gathers, sorts and checks them.  This module
only converts between Spark's ``GroupState`` tuple and the core's ``SessionState`` and shapes the
output: one flat row per applied change (``record = 'change'``; ``is_latest`` marks each row's last
change of the batch, what ``current_rows`` MERGEs: the group already knows it, so the sink needs no
shuffle and aggregation to find it), one per touched session (``'session'``), and at most one
``'violation'`` which the sink turns into a failed query before anything of the micro-batch is
written.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    RECORD_FIELDS,
    SESSION_INFO_FIELDS,
    STATE_DDL,
    STATE_FIELDS,
    RecordKind,
    SessionField,
    column_names,
    records_ddl,
)
from reconstructor.core.batch import process_batch
from reconstructor.core.blob import chain_head, dump_table, read_table
from reconstructor.core.chain import CHAIN_START, ChainSeed, chain_session
from reconstructor.core.data_loss import DataLoss, loss_reaching
from reconstructor.core.frames import INPUT, INT_COLUMNS, VALUE, null_mask, nullable_longs
from reconstructor.core.lifecycle import Lifecycle
from reconstructor.core.quarantine import quarantine
from reconstructor.core.seal import session_seal
from reconstructor.core.seed import SessionSeed, records_after
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState
from reconstructor.core.step_spec import NO_START, StepSpec, StepStart
from reconstructor.core.table import columns_of, empty_changes, last_change_per_row, rows_back
from reconstructor.core.violations import ViolationRecord

# pyspark's serializer concatenates our output frames, some with all-null columns by design.
warnings.filterwarnings("ignore", category=FutureWarning, message=".*concatenation with empty or all-NA.*")

def _us(ts) -> int | None:
    if ts is None or pd.isna(ts):
        return None
    return int(pd.Timestamp(ts).value // 1000)


def _from_us(us) -> pd.Timestamp | None:
    return None if us is None else pd.Timestamp(int(us), unit="us")


def _state_value(state: SessionState, field: SessionField):
    """A scalar field of the state as the state tuple and a session record's info hold it."""
    value = getattr(state, field.attribute)
    if field.is_time:
        return _us(value)
    return value.value if isinstance(value, SessionStatus) else value


def state_to_tuple(state: SessionState, schema: RowSchema, head: str | None = None) -> tuple:
    """The state as Spark's ``GroupState`` holds it (``STATE_FIELDS``): its scalars, then its table's
    Arrow blob (which carries the session's chain head)."""
    return tuple(dump_table(state.stored, schema, head) if f.name == "table" else _state_value(state, f)
                 for f in STATE_FIELDS)


# Where each field sits in Spark's state tuple.
_AT = {f.name: i for i, f in enumerate(STATE_FIELDS)}


def state_from_tuple(row, schema: RowSchema, with_table: bool = True, read=read_table) -> SessionState:
    """The core's state from Spark's tuple (``STATE_FIELDS``); an ended session past its timeout
    has no table blob.  ``read`` decodes the blob (the JVM engine's is ``core.jvm_blob``'s)."""
    row = tuple(row)
    blob = row[_AT["table"]]
    values = {}
    for f in STATE_FIELDS:
        stored = row[_AT[f.name]]
        if f.name == "table":
            values[f.attribute] = (read(bytes(blob), schema) if with_table and blob is not None
                                   else schema.empty_frame())
        elif f.is_time:
            values[f.attribute] = _from_us(stored)
        elif f.attribute == "status":
            values[f.attribute] = SessionStatus(stored)
        elif f.name != "row_count":  # the table's own length
            values[f.attribute] = None if stored is None else int(stored)
    return SessionState(**values)


def _with(row: tuple, **fields) -> tuple:
    """Spark's state tuple with some fields replaced."""
    return tuple(fields.get(f.name, value) for f, value in zip(STATE_FIELDS, row))


class SessionReconstructor:
    """The state function, picklable, configured once per query by the step's spec and what the
    query's start adds (``core.step_spec``).

    A session silent for ``session_timeout_ms`` times out but forgets nothing: an open one keeps
    its table (status ``timed_out``; it resumes exactly with its next seq), an ended one keeps its
    scalars (a message after its end is still AFTER_END).  The state is removed once the session
    has been silent for ``state_retention_ms``, so the state store stays bounded.

    ``losses`` (quarantine mode): the ``DATA_LOSS`` of each partition, by (topic, partition),
    sorted by first offset lost.  A session the next time it runs (a record, or its timeout) is
    quarantined with its own ``DATA_LOSS`` row when a loss on its partition lies past its last
    applied record (``core.data_loss.loss_reaching``).
    """

    def __init__(self, spec: StepSpec, start: StepStart = NO_START):
        schema = spec.schema
        self.losses: dict[tuple[str, int], list[DataLoss]] = dict(start.losses)
        self.chain_key = spec.key
        self.chain_seeds: dict[tuple[str, str, int], ChainSeed] = dict(start.chain_seeds)
        self.session_seeds = start.session_seeds
        self.row_types = [(c.name, c.type) for c in schema.columns]
        self.schema = schema
        self.lifecycle = Lifecycle(spec.session_timeout_ms, spec.state_retention_ms)
        self.await_snapshot = spec.awaits_snapshot(start)
        self.policy = spec.policy
        self.columns = column_names(RECORD_FIELDS, schema)
        self._no_changes = {**columns_of(empty_changes(schema)), "chain_prev": np.empty(0, dtype=object),
                            "chain_digest": np.empty(0, dtype=object)}

    def __call__(self, key, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        topic, session = key
        if state.hasTimedOut:
            yield from self._on_timeout(topic, session, state)
            return
        previous = state_from_tuple(state.get, self.schema) if state.exists else None
        held = self.session_seeds.of(topic, session) if self.session_seeds else None
        seed = self._seed(topic, session, state)
        known = chain_head(state.get[_AT["table"]]) if state.exists else None
        if held is not None:  # a replay's session the tables hold: their records are not applied again
            frames = records_after(frames, held)
        if seed is not None:  # and with no state yet, it starts where they have it
            previous, known = seed.state(self.schema, self.session_seeds.columns), seed.chain_head
        lost = self._lost(topic, session, previous)
        if lost is not None:  # set aside before its records: they come after the records lost
            previous = quarantine(previous, lost, self.schema)
        result = process_batch(topic, session, frames, previous, self.schema,
                               await_snapshot=self.await_snapshot, policy=self.policy)
        if result.violation is not None:
            yield self._violations(topic, session, [result.violation], RecordKind.VIOLATION)
            return
        recorded = ([lost] if lost is not None else []) + result.recorded
        if recorded:
            yield self._violations(topic, session, recorded, RecordKind.RECORDED)
        if result.state is None:
            return  # nothing applied (all skipped while awaiting a snapshot, or no session named)
        if result.state is previous and lost is None:  # records set aside only: the session is as it was
            if seed is not None:
                self._keep_seed(state, seed, previous)
            elif held is not None and _as_seeded(previous, held):  # the kept seed: the same call again
                self._arm_seed_timeout(state, held, previous.status)
            else:
                self._arm_timeout(state, previous.status, has_table=state.get[_AT["table"]] is not None)
            return
        new = result.state
        link = (self.chain_seeds.get((topic, session, new.first_seq))
                if known is None and self.chain_seeds and new.first_seq is not None else None)
        prevs, digests, head = chain_session(topic, session, result.columns, known, link, new.first_seq,
                                             self.row_types, self.chain_key)
        stored_head = None if head == CHAIN_START else head
        state.update(state_to_tuple(new, self.schema, stored_head))
        self._arm_timeout(state, new.status, has_table=True)
        changes, current = result.columns, 0
        if (previous is not None and previous.status == SessionStatus.TIMED_OUT
                and new.status == SessionStatus.OPEN):
            n = len(changes["row_id"])
            changes = rows_back(changes, new, previous, self.schema)
            current = len(changes["row_id"]) - n
            prevs, digests = (np.concatenate([a, np.full(current, None, dtype=object)]) for a in (prevs, digests))
        changes = {**changes, "chain_prev": prevs, "chain_digest": digests}
        yield self._group_frame(topic, session, changes, new, new.status, row_count=new.row_count,
                                current=current, head=stored_head)

    def _seed(self, topic: str, session: str | None, state: GroupState) -> SessionSeed | None:
        """The seed a session with no state starts from (``core.seed``), while it applies."""
        if state.exists or not self.session_seeds:
            return None
        return self.session_seeds.get(topic, session, state.getCurrentProcessingTimeMs())

    def _keep_seed(self, state: GroupState, seed: SessionSeed, seeded: SessionState) -> None:
        """A seeded session none of whose records applied (the tables hold them, or they were set
        aside) keeps its seed as its state."""
        ended = seeded.status == SessionStatus.ENDED
        row = state_to_tuple(seeded, self.schema, seed.chain_head)
        state.update(_with(row, table=None) if ended else row)
        self._arm_seed_timeout(state, seed, seeded.status)

    def _arm_seed_timeout(self, state: GroupState, seed: SessionSeed, status: SessionStatus) -> None:
        """The timeout of a session kept as its seed: a timed-out or ended one until the seed
        expires, as the live writer would have removed it; an open or quarantined one as any call
        arms it."""
        if status in (SessionStatus.TIMED_OUT, SessionStatus.ENDED):
            state.setTimeoutDuration(max(1, seed.expires_ms - state.getCurrentProcessingTimeMs()))
        else:
            self._arm_timeout(state, status, has_table=True)

    def _lost(self, topic: str, session: str, previous: SessionState | None) -> ViolationRecord | None:
        """The session's own ``DATA_LOSS`` row when a loss on its partition reaches it, else None."""
        if previous is None or not self.losses:
            return None
        loss = loss_reaching(previous, topic, self.losses)
        return None if loss is None else loss.violation_for(session, previous)

    def _arm_timeout(self, state: GroupState, status: SessionStatus, has_table: bool) -> None:
        """Spark clears a group's timeout whenever the function runs for it, so every call sets it
        (``Lifecycle.armed_ms``: the rule ``check`` applies by the records' times too)."""
        state.setTimeoutDuration(self.lifecycle.armed_ms(status, has_table))

    def _on_timeout(self, topic: str, session: str, state: GroupState) -> Iterator[pd.DataFrame]:
        """Silent for the timeout: an open session becomes ``timed_out`` (its rows leave
        current_rows, its table stays); an ended one drops its table; either is removed once
        silent for the retention as well, as is a quarantined one (its timeout is the retention)."""
        row = tuple(state.get)
        previous = state_from_tuple(row, self.schema, with_table=False)
        lost = self._lost(topic, session, previous)
        if lost is not None:  # silent since records on its partition were lost: set aside
            state.update(_with(row, status=SessionStatus.QUARANTINED.value))
            state.setTimeoutDuration(self.lifecycle.armed_ms(SessionStatus.QUARANTINED, has_table=True))
            yield self._violations(topic, session, [lost], RecordKind.RECORDED)
            yield self._group_frame(topic, session, self._no_changes, previous, SessionStatus.QUARANTINED,
                                    row_count=int(row[_AT["row_count"]]), head=chain_head(row[_AT["table"]]))
            return
        if previous.status == SessionStatus.OPEN:
            state.update(_with(row, status=SessionStatus.TIMED_OUT.value))
        elif previous.status == SessionStatus.ENDED and row[_AT["table"]] is not None:
            state.update(_with(row, table=None))
        else:
            state.remove()
            return
        state.setTimeoutDuration(self.lifecycle.after_timeout_ms)
        if previous.status == SessionStatus.OPEN:
            yield self._group_frame(topic, session, self._no_changes, previous, SessionStatus.TIMED_OUT,
                                    row_count=int(row[_AT["row_count"]]), head=chain_head(row[_AT["table"]]))

    def _group_frame(self, topic, session, changes: dict, s: SessionState, status: SessionStatus,
                     row_count: int, current: int = 0, head: str | None = None) -> pd.DataFrame:
        """The group's output as one frame: its change rows (the last ``current`` of them rows for
        current_rows only), then its session row.

        Built once from its columns, each in the change rows' dtype: pyspark concatenates all
        groups' frames, where a second, differently typed frame per group would cost a copy and
        turn the batch's columns to objects.
        """
        given = {"status": status.value, "row_count": row_count}
        info = {f.name: given[f.name] if f.name in given else _state_value(s, f) for f in SESSION_INFO_FIELDS}
        info["chain_head"] = head
        info["chain_seal"] = session_seal(self.chain_key, {**info, "topic": topic, "session": session,
                                                           "partition": s.partition})
        n = len(changes["row_id"])
        own = {"record": ([RecordKind.CHANGE.value] * (n - current) + [RecordKind.CURRENT.value] * current
                          + [RecordKind.SESSION.value]),
               "topic": [topic] * (n + 1),
               "session": [session] * (n + 1), "info": [None] * n + [json.dumps(info)]}
        session_row = {"partition": s.partition, "offset": s.last_offset, "seq": s.last_seq}
        data = {}
        for name in self.columns:
            if name in own:
                data[name] = np.array(own[name], dtype=object)
            elif name == "is_latest":
                data[name] = _plus_one(last_change_per_row(changes["row_id"]), None)
            else:
                data[name] = _plus_one(changes[name], session_row.get(name))
        return pd.DataFrame(data, copy=False)  # the arrays are this frame's own: no copy needed

    def _violations(self, topic: str, session: str | None, violations, kind: RecordKind) -> pd.DataFrame:
        """One row per violation (``VIOLATION``: the one that stops the query; ``RECORDED``: rows
        for the ``violations`` table), the record's coordinates as columns and the whole record as
        JSON in ``info``."""
        n = len(violations)
        return self._frame({"record": [kind.value] * n, "topic": [topic] * n, "session": [session] * n,
                            "partition": [v.partition for v in violations],
                            "offset": [v.offset for v in violations],
                            "seq": [v.found_seq for v in violations],
                            "info": [v.to_json() for v in violations]})

    def _frame(self, data: dict) -> pd.DataFrame:
        """A frame of the output's columns from some of them (the others null); its int
        coordinates are nullable ``Int64``, exact beside a null (a list of ints and None would
        make float64)."""
        typed = {k: pd.array(v, dtype="Int64") if k in INT_COLUMNS else v for k, v in data.items()}
        return pd.DataFrame(typed).reindex(columns=self.columns)


def _as_seeded(state: SessionState, seed: SessionSeed) -> bool:
    """Whether a session's state is still its seed's: nothing applied since, status unchanged."""
    return (state.status == seed.status and state.partition == seed.partition
            and state.last_offset == seed.last_offset)


def _plus_one(values, value):
    """``values`` (a numpy or extension array) and one more element, null when ``value`` is None;
    the dtype is kept where it holds a null (an int column without one becomes nullable ``Int64``,
    exact where float64 would round a long past 2**53; a bool one object, as ``pd.concat`` would
    make it)."""
    if not isinstance(values, np.ndarray):
        return type(values)._concat_same_type([values, type(values)._from_sequence([value], dtype=values.dtype)])
    if value is None and values.dtype.kind in "iu":
        mask = np.zeros(len(values) + 1, dtype=bool)
        mask[-1] = True
        return pd.arrays.IntegerArray(np.append(values.astype(np.int64, copy=False), 0), mask)
    if value is None and values.dtype.kind == "b":
        values = values.astype(object)
    extra = np.empty(1, dtype=values.dtype)
    extra[0] = _NULL[values.dtype.kind] if value is None else value
    return np.concatenate([values, extra])


_NULL = {"O": None, "f": np.nan, "M": np.datetime64("NaT")}  # by numpy dtype kind


def reconstruct(records: DataFrame, spec: StepSpec, start: StepStart = NO_START) -> DataFrame:
    """Group parsed records by ``(topic, session)`` and run the state function over them.

    In quarantine mode the records carry their raw value (``parse_records(keep_values=True)``) for
    the ``violations`` table, and ``start.losses`` (the checkpoint's recorded ``DATA_LOSS``) reach
    the sessions of their partitions.  Each change carries its message's digest (``core.chain``,
    HMACs with the spec's chain key); a replay's ``start.chain_seeds`` give the snapshots it starts
    sessions at the digests the tables hold for them (``core.chain.ChainSeed``), and its
    ``start.session_seeds`` start the sessions it does not rebuild from Kafka where the tables hold
    them (``core.seed``)."""
    schema = spec.schema
    fn = SessionReconstructor(spec, start)
    inputs = reconstruct_inputs(records, schema, with_values=spec.policy.quarantine)
    return inputs.groupBy("topic", "group_session").applyInPandasWithState(
        fn,
        outputStructType=records_ddl(schema),
        stateStructType=STATE_DDL,
        outputMode="append",
        timeoutConf=GroupStateTimeout.ProcessingTimeTimeout,
    )


def reconstruct_inputs(records: DataFrame, schema: RowSchema, *, with_values: bool) -> DataFrame:
    """The columns the state function is handed: the grouping key, ``INPUT``, the row columns,
    with ``with_values`` the raw value, and a null mask beside each nullable long.

    pyspark's worker hands an int column that holds a null over as float64, which rounds a long
    past 2**53 (and one near 2**63 then fails the cast back); its ``preferIntExtensionDtype``
    setting casts Arrow to pandas' Int64 by way of float64 too, and rounds negative ones.  So each
    nullable long (``nullable_longs``) goes over as its value with nulls as 0, never null and so
    an exact int64, and a boolean column that marks its nulls; the core rebuilds the nullable
    column from the two (``frames.exact_longs``)."""
    longs = set(nullable_longs(schema))
    columns = [F.coalesce(F.col(n), F.lit(0).cast("bigint")).alias(n) if n in longs else F.col(n)
               for n in (*INPUT, *schema.names)]
    masks = [F.col(n).isNull().alias(null_mask(n)) for n in nullable_longs(schema)]
    values = [F.col(VALUE)] if with_values else []
    return records.select(F.col("topic"), F.col("group_session"), *columns, *values, *masks)

