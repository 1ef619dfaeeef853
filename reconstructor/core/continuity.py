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

import numpy as np
import pandas as pd

from reconstructor.core.frames import int_or_none
from reconstructor.core.state import SessionState, SessionStatus
from reconstructor.core.violations import IntegrityViolation, ViolationKind


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
    violation: IntegrityViolation | None


def check_continuity(topic: str, session: str, df: pd.DataFrame, state: SessionState | None,
                     await_snapshot: bool) -> Continuity:
    """The messages of ``df`` (one row per message row, not empty) in Kafka order, where the checks
    start, where the valid prefix ends and the violation there."""
    msgs, bad_detail = kafka_order(df, state)
    n = len(msgs)
    seqs = msgs["seq"].fillna(0).to_numpy(dtype=np.int64)  # a malformed record's seq may be null
    types = msgs["type"].to_numpy()
    bad = bad_detail.notna().to_numpy()
    partition = state.partition if state is not None else int(msgs["partition"].iloc[0])
    moved = msgs["partition"].to_numpy() != partition

    # 1. Where the checks start: a new session's first message must be a snapshot (or, awaiting
    #    one, the messages before it are skipped).
    skipped = 0
    if state is None:
        is_snap = (types == "snapshot") & ~bad
        if not is_snap[0] and not bad[0]:
            if not await_snapshot:
                return Continuity(msgs, partition, 0, 0, _violation(
                    ViolationKind.NO_SNAPSHOT, topic, session, msgs.iloc[0], None,
                    f"a session's first message must be a snapshot, got {types[0]!r}"))
            skipped = int(np.argmax(is_snap | bad)) if (is_snap | bad).any() else n
            if skipped == n:
                return Continuity(msgs, partition, n, n, None)

    # 2. The first record, from there, that breaks a rule; each rule as "first bad index".
    #    Differences of non-negative longs cannot overflow; the expected seq can (a seq at the
    #    largest long may be followed by nothing), so it is computed in Python ints.
    steps = np.diff(seqs[skipped:]) != 1
    seq_bad = np.flatnonzero(steps) + skipped + 1
    if state is not None and n and int(seqs[0]) - state.last_seq != 1:
        seq_bad = np.concatenate([[0], seq_bad])
    ends = np.flatnonzero(types[skipped:] == "end") + skipped
    after_end = ends[:1] + 1 if state is None or state.status != SessionStatus.ENDED else np.array([0])
    candidates = [int(a[0]) for a in (np.flatnonzero(bad), after_end[after_end < n],
                                      np.flatnonzero(moved), seq_bad) if len(a)]
    cut = min(candidates) if candidates else n
    if cut == n:
        return Continuity(msgs, partition, skipped, cut, None)

    # 3. The violation at the cut, named by the first rule it breaks.
    row = msgs.iloc[cut]
    if cut > skipped:
        previous = int(seqs[cut - 1])
    else:
        previous = state.last_seq if state is not None else None
    expected = None if previous is None else previous + 1
    if bad[cut]:
        kind, detail = ViolationKind.MALFORMED, bad_detail.iloc[cut]
    elif cut in after_end:
        kind, expected = ViolationKind.AFTER_END, None
        ended_at = state.last_seq if cut == 0 and state is not None else int(seqs[cut - 1])
        detail = f"session ended at seq {ended_at}; no message may follow its end"
    elif moved[cut]:
        kind = ViolationKind.PARTITION_MOVED
        detail = (f"session was on {topic}[{partition}] and shows up on "
                  f"{topic}[{int(row['partition'])}]")
    elif int(seqs[cut]) < expected:
        kind = ViolationKind.DUPLICATE
        detail = f"seq {int(seqs[cut])} was already seen (last applied seq {previous})"
    else:
        kind = ViolationKind.GAP
        detail = f"missing seq {expected}..{int(seqs[cut]) - 1}"
    return Continuity(msgs, partition, skipped, cut, _violation(kind, topic, session, row, expected, detail))


def malformed(df) -> np.ndarray:
    """Records that did not parse, or whose Kafka key is missing or not their session (``df``: a
    frame, or its columns by name)."""
    key = df["key"].to_numpy()
    return pd.notna(df["error"].to_numpy()) | pd.isna(key) | (key != df["session"].to_numpy())


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
                reason = f"Kafka key {row['key']!r} is not the session {row['session']!r}"
            reasons[(int(row["partition"]), int(row["offset"]))] = reason
        detail = pd.Series([reasons.get((int(p), int(o))) for p, o in
                            zip(msgs["partition"], msgs["offset"])], dtype=object)
    return msgs, detail


def _violation(kind: ViolationKind, topic: str, session: str, row, expected, detail: str):
    return IntegrityViolation(kind, topic, int_or_none(row["partition"]), int_or_none(row["offset"]),
                              session, expected, int_or_none(row["seq"]), detail)
