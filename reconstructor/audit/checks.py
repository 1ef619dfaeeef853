"""``reconstructor verify``'s checks: the output tables held to each other, pure.

The caller hands the small tables (``sessions``, ``violations``) first, then ``row_changes`` in
batches (an ``hour`` partition each, any order), then ``current_rows``; the first discrepancy
found is returned and ends the check.  Memory held: per session its fold (one entry per row it
ever had), its seqs as runs, and the small tables; never the change log.

What is checked, and what cannot be:

- a change is logged once: no two rows share ``(topic, partition, offset, row_pos, row_id)``.
  ``row_id`` belongs to the key: the rows a snapshot dropped all carry ``row_pos = -1`` at the
  snapshot's offset.  Within a batch by the key; across batches by the seq, as a record's rows
  all carry its Kafka timestamp's hour, so a seq found in two hour partitions is logged twice;
- the seqs: each session's changes lie at or before its ``last_seq`` in ``sessions`` (not after
  its ``first_seq``: a replay into the same output writes the session's row again from the
  snapshot it started at, and the older changes stay), and its first change in Kafka order is a
  snapshot's (or comes after ``first_seq``: a first snapshot with no rows leaves no change).  A seq
  in that range with no change is either a message that changed no row (an ``end``, an update
  without rows) or a record set aside in quarantine mode (a ``violations`` row of the session with
  that ``found_seq``), or a message lost before a resync snapshot: the first and the last leave no
  trace in any table, so such seqs are counted in the summary, not failed.  No seq is logged twice, a
  resync's included: a resync snapshot carries a seq past the last one applied;
- one row per session in ``sessions`` and per ``(topic, session, row_id)`` in ``current_rows``;
- the fold: ``row_changes`` of each session folded in Kafka order gives ``current_rows`` (the
  row ids and values, and each row's ``seq`` and ``offset`` those of its last change, or of a later
  record of the session for a row brought back when the session resumed after a timeout) for an open
  session, no row for any other, and ``sessions.row_count`` for every session;
- quarantine: a ``quarantined`` session has a violation row (not ``SKIPPED`` nor
  ``SNAPSHOT_DRIFT``) at or after its last applied offset (or on another partition); a ``SKIPPED``
  row's session is quarantined, or was: a violation row of it precedes the skipped record.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from reconstructor.audit.chain_check import ChainCheck, row_kinds
from reconstructor.audit.fleet_check import FleetCheck
from reconstructor.audit.fold import ChangeFold, as_arrow, same_value
from reconstructor.audit.seal_check import SealCheck
from reconstructor.audit.seq_runs import SeqRuns
from reconstructor.contract.tables import CURRENT_ROWS, ROW_CHANGES, SESSIONS, VIOLATIONS
from reconstructor.core.chain import HMAC_SHA256, NO_KEY, ChainKey
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.violations import printable, quoted

SKIPPED, DRIFT = "SKIPPED", "SNAPSHOT_DRIFT"
CHANGE_KEY = ["topic", "partition", "offset", "row_pos", "row_id"]


@dataclass(frozen=True)
class Discrepancy:
    """The first thing found wrong, named by table, session, seq and row where they apply."""

    table: str
    detail: str
    topic: str | None = None
    session: str | None = None
    seq: int | None = None
    row_id: str | None = None

    def line(self) -> str:
        """One line whatever the ids and values hold: a newline or an escape in a session id would
        split the line or drive the terminal."""
        named = [f"{k}={printable(str(v))}" for k, v in (("topic", self.topic), ("session", self.session),
                                                          ("seq", self.seq), ("row", self.row_id)) if v is not None]
        return " ".join(["VERIFY FAILED", self.table, *named]) + f": {printable(self.detail)}"


@dataclass
class Summary:
    """What was checked, for the one-screen report."""

    change_rows: int = 0
    batches: int = 0
    current_rows: int = 0
    sessions: dict[str, Any] = field(default_factory=dict)  # status -> count
    violations: int = 0
    set_aside_seqs: int = 0  # seqs with no change, recorded in violations
    #: Seqs with no change and no violation row: messages that changed no row (or, before a
    #: resync snapshot, messages that never reached the session).
    rowless_seqs: int = 0
    chained_messages: int = 0  # messages whose digest was recomputed and linked
    chains: int = 0
    chain_scheme: str = ""
    sealed_sessions: int | None = None  # sessions whose row's seal was checked; None: the output is not sealed
    fleet: str | None = None  # what the fleet seal held (``_check_fleet``); None: not checked (no key)

    def lines(self, output: str, seconds: float) -> list[str]:
        rate = self.change_rows / seconds if seconds > 0 else float(self.change_rows)
        statuses = ", ".join(f"{n:,} {s}" for s, n in sorted(self.sessions.items())) or "none"
        return [
            f"verify {output}: no discrepancy",
            f"  {ROW_CHANGES:<13}{_count(self.change_rows, 'row')} in {_count(self.batches, 'hour partition')}",
            f"  {CURRENT_ROWS:<13}{_count(self.current_rows, 'row')}",
            f"  {SESSIONS:<13}{sum(self.sessions.values()):,} ({statuses})",
            f"  {VIOLATIONS:<13}{_count(self.violations, 'row')}",
            f"  seqs without a change row: {self.set_aside_seqs:,} set aside (in {VIOLATIONS}), "
            f"{self.rowless_seqs:,} with no trace (a message that changed no row, or one lost before a resync)",
            f"  hash chain: {_count(self.chained_messages, 'message')} recomputed ({self.chain_scheme}) and linked "
            f"in {_count(self.chains, 'chain')}",
            f"  seals: {_count(self.sealed_sessions, 'session row')} sealed with the key" if self.sealed_sessions
            is not None else "  seals: none (the output is not sealed: no keyed run of a sealing release wrote it)",
            *([f"  fleet: {self.fleet}"] if self.fleet else []),
            f"  took {seconds:.1f}s, {rate:,.0f} change rows/s",
        ]


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


@dataclass
class _Session:
    partition: int | None
    status: str
    first_seq: int | None
    last_seq: int | None
    last_offset: int | None
    row_count: int
    seqs: SeqRuns = field(default_factory=SeqRuns)
    first_change: tuple[Any, ...] | None = None  # (offset, seq, type) of its first change in Kafka order


class _Found(Exception):
    """Private to this module: ends the walk at the first discrepancy, which ``Verification``
    returns as a record (``Discrepancy``); it never leaves the module."""

    def __init__(self, discrepancy: Discrepancy):
        super().__init__(discrepancy.line())
        self.discrepancy = discrepancy


class Verification:
    """The checks over one output's tables (``topics``: an anchored regex, or None for all)."""

    def __init__(self, sessions: Any, violations: Any, names: list[str], topics: str | None = None,
                 chain_key: ChainKey = NO_KEY, sessions_properties: dict[str, str] | None = None,
                 fleet: FleetCheck | None = None) -> None:
        self._topics = re.compile(topics) if topics else None
        self.names = list(names)
        self._chain_key = chain_key
        self._chain: ChainCheck | None = None  # built from the first batch's column types
        self._heads: dict[tuple[str, str], str | None] = {}
        self.fold = ChangeFold(self.names)
        self.summary = Summary()
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._twice: tuple[Any, ...] | None = None  # a session with two rows in sessions (``finish`` names it)
        rows = self._rows(sessions)
        for r in rows:
            if (r["topic"], r["session"]) in self._sessions and self._twice is None:
                self._twice = (r["topic"], r["session"], r["last_seq"])
            self._heads[(r["topic"], r["session"])] = r.get("chain_head")
            self._sessions[(r["topic"], r["session"])] = _Session(
                r["partition"], r["status"], r["first_seq"], r["last_seq"], r["last_offset"], r["row_count"] or 0)
            self.summary.sessions[r["status"]] = self.summary.sessions.get(r["status"], 0) + 1
        self._seals = SealCheck(rows, chain_key, sessions_properties)
        self._fleet = fleet
        self._violations = self._rows(violations)
        self.summary.violations = len(self._violations)
        # Sessions with a violation row that quarantined them (``_check_quarantine``).
        self._causes: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        self._recorded_seqs: dict[tuple[str, str], set[int]] = defaultdict(set)
        for v in self._violations:
            key = (v["topic"], v["session"])
            if v["kind"] not in (SKIPPED, DRIFT):
                self._causes[key].append(v)
            if v["found_seq"] is not None:
                self._recorded_seqs[key].add(v["found_seq"])

    def _rows(self, table: Any) -> list[dict[str, Any]]:
        rows = as_arrow(table).to_pylist()
        return [r for r in rows if self._topics is None or self._topics.fullmatch(r["topic"])]

    # -- row_changes, a batch at a time ---------------------------------------------------------

    def add_changes(self, batch: Any) -> Discrepancy | None:
        """Check and fold one batch of ``row_changes`` (an hour partition)."""
        batch = as_arrow(batch)
        if self._topics is not None and batch.num_rows:
            topics = batch["topic"].to_pandas()
            keep = topics.map(lambda t: bool(self._topics.fullmatch(t))).to_numpy()
            batch = batch.filter(keep)
        self.summary.batches += 1
        self.summary.change_rows += batch.num_rows
        if not batch.num_rows:
            return None
        try:
            self._check_batch(batch)
        except _Found as found:
            return found.discrepancy
        if self._chain is None:
            self._chain = ChainCheck(row_kinds(batch.schema, self.names), self._chain_key)
        broken = self._chain.add(batch)
        if broken is not None:
            return Discrepancy(broken.table, broken.detail, broken.topic, broken.session, broken.seq)
        self.fold.add(batch)
        return None

    def _check_batch(self, batch: Any) -> None:
        keys = batch.select(["topic", "session", "partition", "offset", "seq", "type", "row_pos", "row_id"]).to_pandas()
        keys["row_pos"] = keys["row_pos"].fillna(-1).astype("int64")
        dup = keys.duplicated(CHANGE_KEY)
        if dup.any():
            r = keys[dup].iloc[0]
            raise _Found(Discrepancy(ROW_CHANGES, f"the change at partition {r.partition} offset {r.offset} "
                                    f"row_pos {r.row_pos} is logged twice", r.topic, r.session, int(r.seq), r.row_id))
        msgs = keys.drop_duplicates(["topic", "session", "partition", "offset"]).sort_values(
            ["topic", "session", "offset"], kind="stable")
        for (topic, session), group in msgs.groupby(["topic", "session"], sort=True):
            self._check_messages(topic, session, group)

    def _check_messages(self, topic: str, session: str, msgs: pd.DataFrame) -> None:
        s = self._sessions.get((topic, session))
        seqs, offsets, types = msgs["seq"].to_numpy(), msgs["offset"].to_numpy(), msgs["type"].to_numpy()
        if s is None:
            raise _Found(Discrepancy(SESSIONS, "row_changes holds changes of this session; sessions has no row "
                                    "for it", topic, session, int(seqs[0])))
        seen: dict[int, int] = {}
        for seq, offset, kind in zip(seqs.tolist(), offsets.tolist(), types.tolist()):
            if seq in seen or seq in s.seqs:
                where = f"offsets {seen[seq]} and {offset}" if seq in seen else \
                    f"offset {offset} and in another hour partition"
                raise _Found(Discrepancy(ROW_CHANGES, f"seq {seq} is logged twice ({where})", topic, session, seq))
            if s.last_seq is None or seq > s.last_seq:
                raise _Found(Discrepancy(ROW_CHANGES, f"seq {seq} lies past the session's last_seq "
                                        f"{s.last_seq} in sessions", topic, session, seq))
            seen[seq] = offset
            if s.first_change is None or offset < s.first_change[0]:
                s.first_change = (offset, seq, kind)
        s.seqs.add([q for q in seen if q not in s.seqs])

    # -- the fold against current_rows and sessions, and the quarantine -------------------------

    def finish(self, current_rows: Any) -> Discrepancy | None:
        """The checks that need the whole change log folded."""
        try:
            if self._twice is not None:
                raise _Found(Discrepancy(SESSIONS, "the session has 2 rows; one per session", *self._twice))
            self._check_chains()  # first: it names what was removed or altered, the others what differs
            self._check_seals()
            self._check_fleet()
            self._check_sessions()
            self._check_current_rows(current_rows)
            self._check_quarantine()
        except _Found as found:
            return found.discrepancy
        return None

    def _check_sessions(self) -> None:
        for (topic, session), s in sorted(self._sessions.items()):
            if s.first_change is not None:
                offset, seq, kind = s.first_change
                if kind != "snapshot" and (s.first_seq is None or seq <= s.first_seq):
                    raise _Found(Discrepancy(ROW_CHANGES, f"the session's first change (offset {offset}) is of "
                                            f"a message of type {kind}, not a snapshot", topic, session, seq))
            if s.first_seq is not None and s.last_seq is not None:
                recorded = self._recorded_seqs.get((topic, session), set())
                for lo, hi in s.seqs.gaps(s.first_seq, s.last_seq):
                    aside = sum(1 for q in recorded if lo <= q <= hi)
                    self.summary.set_aside_seqs += aside
                    self.summary.rowless_seqs += hi - lo + 1 - aside
            folded = len(self.fold.table(topic, session))
            if folded != s.row_count:
                raise _Found(Discrepancy(SESSIONS, f"row_count is {s.row_count:,}; row_changes folds to "
                                        f"{folded:,} rows", topic, session, s.last_seq))
        for topic, session in self.fold.sessions():
            if (topic, session) not in self._sessions:  # a batch checks this too; the fold may be fed alone
                raise _Found(Discrepancy(SESSIONS, "row_changes holds changes of this session; sessions has "
                                        "no row for it", topic, session))

    def _check_chains(self) -> None:
        chain = self._chain or ChainCheck([], self._chain_key)
        broken = chain.finish(self._heads)
        if broken is not None:
            raise _Found(Discrepancy(broken.table, broken.detail, broken.topic, broken.session, broken.seq))
        self.summary.chained_messages, self.summary.chains = chain.messages, chain.chains()
        self.summary.chain_scheme = self._chain_key.scheme

    def _check_seals(self) -> None:
        broken = self._seals.check()
        if broken is not None:
            raise _Found(Discrepancy(broken.table, broken.detail, broken.topic, broken.session, broken.seq))
        self.summary.sealed_sessions = self._seals.checked if self._seals.sealed else None

    def _check_fleet(self) -> None:
        if self._fleet is None or self._chain_key.scheme != HMAC_SHA256:
            return
        broken = self._fleet.check(self._seals.fleet_required)
        if broken is not None:
            raise _Found(Discrepancy(broken.table, broken.detail, broken.topic, broken.session, broken.seq))
        seal = self._fleet.seal
        self.summary.fleet = ("none (no batch of a release that seals the fleet wrote the output)" if seal is None
                              else f"{_count(seal.sessions.rows, 'session row')} and "
                                   f"{_count(seal.violations.rows, 'violation row')} as the last batch sealed them")

    def _check_current_rows(self, current_rows: Any) -> None:
        live: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
        rows = self._rows(current_rows)
        self.summary.current_rows = len(rows)
        for r in rows:
            key = (r["topic"], r["session"])
            s = self._sessions.get(key)
            if s is None or s.status != SessionStatus.OPEN.value:
                status = "unknown" if s is None else s.status
                raise _Found(Discrepancy(CURRENT_ROWS, f"a row of a session that is {status} in sessions; only "
                                        "open sessions have rows here", *key, r["seq"], r["row_id"]))
            if r["row_id"] in live[key]:
                raise _Found(Discrepancy(CURRENT_ROWS, "the row is held twice; one per row", *key, r["seq"],
                                        r["row_id"]))
            live[key][r["row_id"]] = r
        for key, s in sorted(self._sessions.items()):
            if s.status != SessionStatus.OPEN.value:
                continue
            folded, held = self.fold.last_changes(*key), live.get(key, {})
            table = self.fold.table(*key)
            for rid in sorted(set(table) | set(held)):
                if rid not in held:
                    raise _Found(Discrepancy(CURRENT_ROWS, "row missing: row_changes folds to it", *key,
                                            folded[rid].seq, rid))
                if rid not in table:
                    change = folded.get(rid)
                    why = f"deleted at seq {change.seq} in row_changes" if change else "never in row_changes"
                    raise _Found(Discrepancy(CURRENT_ROWS, f"row present here but {why}", *key, held[rid]["seq"], rid))
                for name, value in zip(self.names, table[rid]):
                    if not same_value(held[rid].get(name), value):
                        raise _Found(Discrepancy(CURRENT_ROWS, f"{name} is {quoted(held[rid].get(name))} here, "
                                                f"{quoted(value)} in row_changes", *key, folded[rid].seq, rid))
                self._check_row_position(key, s, rid, held[rid], folded[rid])

    @staticmethod
    def _check_row_position(key: tuple[str, str], s: _Session, rid: str, held: dict[str, Any], last: Any) -> None:
        """A live row's ``seq`` and ``offset`` are its last change's; a row brought back when its
        timed-out session resumed carries the session's last record before the timeout instead,
        which lies after that change and at or before the session's last."""
        seq, offset = held.get("seq"), held.get("offset")
        if (seq, offset) == (last.seq, last.offset):
            return
        later = (seq is not None and offset is not None and last.seq < seq and last.offset < offset
                 and (s.last_seq is None or seq <= s.last_seq) and (s.last_offset is None or offset <= s.last_offset))
        if not later:
            name, value, logged = ("seq", seq, last.seq) if seq != last.seq else ("offset", offset, last.offset)
            raise _Found(Discrepancy(CURRENT_ROWS, f"{name} is {value!r} here, {logged!r} in row_changes", *key,
                                    last.seq, rid))

    def _check_quarantine(self) -> None:
        for key, s in sorted(self._sessions.items()):
            if s.status != SessionStatus.QUARANTINED.value:
                continue
            # A record on another partition (PARTITION_MOVED) has no order with the session's own.
            causes = [v for v in self._causes.get(key, ()) if v["partition"] != s.partition
                      or s.last_offset is None or v["offset"] >= s.last_offset]
            if not causes:
                raise _Found(Discrepancy(VIOLATIONS, "the session is quarantined, but no violation row of it lies "
                                        f"at or after its last applied offset {s.last_offset}", *key, s.last_seq))
        for v in self._violations:
            if v["kind"] != SKIPPED:
                continue
            key = (v["topic"], v["session"])
            held = self._sessions.get(key)
            if held is not None and held.status == SessionStatus.QUARANTINED.value:
                continue
            if not any(c["partition"] != v["partition"] or c["offset"] < v["offset"]
                       for c in self._causes.get(key, ())):
                raise _Found(Discrepancy(VIOLATIONS, f"a SKIPPED record (offset {v['offset']}) of a session that "
                                        "no violation row quarantined", *key, v["found_seq"]))
