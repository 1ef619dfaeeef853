"""The continuity checks of one session's micro-batch: its messages in Kafka order, and the first
record that breaks a rule.

A session lives in one partition, so its messages are walked in Kafka order (the session's
partition first, by offset; a record on another partition can only be a violation), and at every
offset the seq must be the previous one + 1, continuing the state carried from earlier
micro-batches.  The first record that breaks a rule is the verdict, whatever its kind, so a
verdict never depends on where a micro-batch ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from reconstructor.core.frames import int_or_none
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState
from reconstructor.core.violations import ViolationKind, ViolationRecord, quoted


@dataclass
class Continuity:
    """Where a micro-batch's messages hold together: ``messages[skipped:cut]`` continue the session."""

    #: One row per message, in Kafka order.
    messages: pd.DataFrame
    #: The session's partition: the carried one, or that of its first message.
    partition: int
    #: Messages skipped at the start while awaiting a snapshot.
    skipped: int
    #: Where the valid prefix ends: the first record that breaks a rule, or ``len(messages)``.
    cut: int
    #: The violation at ``cut``, None when every message from ``skipped`` on is valid.
    violation: ViolationRecord | None


def check_continuity(topic: str, session: str | None, df: pd.DataFrame, state: SessionState | None,
                     await_snapshot: bool) -> Continuity:
    """The messages of ``df`` (one row per message row, not empty) in Kafka order, where the checks
    start, where the valid prefix ends and the violation there."""
    m = _Messages.of(*kafka_order(df, state), state)
    skipped = _start(m, state, await_snapshot)
    if skipped is None:
        return Continuity(m.msgs, m.partition, 0, 0, _violation(
            ViolationKind.NO_SNAPSHOT, topic, session, m.msgs.iloc[0], None,
            f"a session's first message must be a snapshot, got {quoted(m.types[0])}"))
    if skipped == m.n:
        return Continuity(m.msgs, m.partition, m.n, m.n, None)
    cut, after_end = _first_break(m, state, skipped)
    if cut == m.n:
        return Continuity(m.msgs, m.partition, skipped, cut, None)
    kind, expected, detail = _broken_rule(m, state, topic, skipped, cut, after_end)
    return Continuity(m.msgs, m.partition, skipped, cut,
                      _violation(kind, topic, session, m.msgs.iloc[cut], expected, detail))


@dataclass(frozen=True)
class _Messages:
    """A micro-batch's messages in Kafka order and, read once, what the rules look at."""

    msgs: pd.DataFrame
    #: Why each message is malformed (null when it is not), and which ones are.
    bad_detail: pd.Series
    bad: np.ndarray
    #: The seqs as int64 (a malformed record's null seq as 0) and the message types.
    seqs: np.ndarray
    types: np.ndarray
    #: The session's partition (see ``Continuity``), and the messages on another one.
    partition: int
    moved: np.ndarray

    @classmethod
    def of(cls, msgs: pd.DataFrame, bad_detail: pd.Series, state: SessionState | None) -> _Messages:
        partition = state.partition if state is not None else int(msgs["partition"].iloc[0])
        return cls(msgs, bad_detail, bad_detail.notna().to_numpy(),
                   msgs["seq"].fillna(0).to_numpy(dtype=np.int64),  # a malformed record's seq may be null
                   msgs["type"].to_numpy(), partition, msgs["partition"].to_numpy() != partition)

    @property
    def n(self) -> int:
        return len(self.msgs)


def _start(m: _Messages, state: SessionState | None, await_snapshot: bool) -> int | None:
    """Where the checks start: a new session's first message must be a snapshot, or, awaiting one,
    the messages before it are skipped (all of them when none comes).  None when a new session
    starts with another message and no snapshot is awaited: that is its violation."""
    if state is not None:
        return 0
    is_snap = (m.types == "snapshot") & ~m.bad
    if is_snap[0] or m.bad[0]:
        return 0  # a malformed first record is checked as such, by the rules that follow
    if not await_snapshot:
        return None
    return int(np.argmax(is_snap | m.bad)) if (is_snap | m.bad).any() else m.n


def _first_break(m: _Messages, state: SessionState | None, skipped: int) -> tuple[int, np.ndarray]:
    """The first record from ``skipped`` on that breaks a rule (``m.n`` when none does), each rule
    found as its first bad index, so the verdict is the earliest record whatever its kind; and
    where the records after an end start, for ``_broken_rule`` to name that rule.

    Differences of non-negative longs cannot overflow; the expected seq can (a seq at the largest
    long may be followed by nothing), so it is left to ``_broken_rule``, in Python ints.
    """
    steps = np.diff(m.seqs[skipped:]) != 1
    seq_bad = np.flatnonzero(steps) + skipped + 1
    if state is not None and state.last_seq is not None and m.n and int(m.seqs[0]) - state.last_seq != 1:
        seq_bad = np.concatenate([[0], seq_bad])
    ends = np.flatnonzero(m.types[skipped:] == "end") + skipped
    after_end = ends[:1] + 1 if state is None or state.status != SessionStatus.ENDED else np.array([0])
    candidates = [int(a[0]) for a in (np.flatnonzero(m.bad), after_end[after_end < m.n],
                                      np.flatnonzero(m.moved), seq_bad) if len(a)]
    return (min(candidates) if candidates else m.n), after_end


def _broken_rule(m: _Messages, state: SessionState | None, topic: str, skipped: int, cut: int,
                 after_end: np.ndarray) -> tuple[ViolationKind, int | None, str]:
    """The violation at ``cut``, named by the first rule it breaks, in the order the rules are
    checked (a malformed record, a record after the end, a moved partition, then the seq): its
    kind, the seq expected there and what was wrong."""
    previous: int | None
    if cut > skipped:
        previous = int(m.seqs[cut - 1])
    else:
        previous = state.last_seq if state is not None else None
    expected = None if previous is None else previous + 1
    found = int(m.seqs[cut])
    if m.bad[cut]:
        return ViolationKind.MALFORMED, expected, m.bad_detail.iloc[cut]
    if cut in after_end:
        ended_at = state.last_seq if cut == 0 and state is not None else int(m.seqs[cut - 1])
        return ViolationKind.AFTER_END, None, f"session ended at seq {ended_at}; no message may follow its end"
    if m.moved[cut]:
        moved_to = int(m.msgs["partition"].iloc[cut])
        return ViolationKind.PARTITION_MOVED, expected, (
            f"session was on {topic}[{m.partition}] and shows up on {topic}[{moved_to}]")
    if expected is None:  # a seq rule is broken only after a seq: one of the rules above was
        raise ValueError(f"no rule broken at {topic}[{m.partition}] record {cut}")
    if found < expected:
        return ViolationKind.DUPLICATE, expected, f"seq {found} was already seen (last applied seq {previous})"
    return ViolationKind.GAP, expected, f"missing seq {expected}..{found - 1}"


def malformed(df: Any) -> np.ndarray:
    """Records that did not parse, or whose Kafka key is missing or not their session (``df``: a
    frame, or its columns by name)."""
    key = df["key"].to_numpy()
    unnamed = pd.notna(df["error"].to_numpy()) | pd.isna(key) | (key != df["session"].to_numpy())
    return cast("np.ndarray[Any, Any]", unnamed)


def home_partition(df: pd.DataFrame) -> int:
    """A new session's partition: the one holding its lowest seq (the lower number on a tie, or
    when no record has a seq).  A session whose records sit on two partitions of one micro-batch
    is then ``PARTITION_MOVED`` at the first record on the other one, whichever number is lower."""
    seqs = df["seq"]
    known = seqs.notna().to_numpy()
    if not known.any():
        return int(df["partition"].min())
    pairs = zip(seqs[known].tolist(), df["partition"][known].tolist())  # Python ints: exact seqs
    return int(min(pairs)[1])


def kafka_order(df: pd.DataFrame, state: SessionState | None) -> tuple[pd.DataFrame, pd.Series]:
    """One row per message in Kafka order (the session's partition first, then by offset), and
    per message why it is malformed (null when it is not): its first bad row's parse error, or
    its Kafka key that is missing or not its session."""
    bad = malformed(df)
    ref = state.partition if state is not None else home_partition(df)
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
                reason = f"Kafka key {quoted(row['key'])} is not the session {quoted(row['session'])}"
            reasons[(int(row["partition"]), int(row["offset"]))] = reason
        detail = pd.Series([reasons.get((int(p), int(o))) for p, o in
                            zip(msgs["partition"], msgs["offset"])], dtype=object)
    return msgs, detail


def _violation(kind: ViolationKind, topic: str, session: str | None, row: Any, expected: int | None,
               detail: str) -> ViolationRecord:
    return ViolationRecord(kind, topic, int_or_none(row["partition"]), int_or_none(row["offset"]),
                              session, expected, int_or_none(row["seq"]), detail)
