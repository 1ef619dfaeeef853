"""``verify``'s check of the fleet seal (``core.fleet_seal``): no row of ``sessions`` or ``violations``
removed, added or replaced since the last batch sealed them.

The fleet seal in force in ``sessions``' log must hold with the key and match the table's rows
and their seals' sum.  ``violations`` must match the same seal, or, when a batch was cut between
its ``violations`` commit and its ``sessions`` commit, the seal in force in ``violations``' log,
which then names the ``sessions`` seal as the one it followed (``after``).

The seal in force is read from each table's log (``contract.fleet_history``): the commits after
it must change no data, since every commit a keyed batch makes records a seal and every other
commit the pipeline makes carries it forward; a commit after it that changes data is named.

An output must hold a fleet seal once a row is sealed under the current domain
(``SealCheck.fleet_required``): a release that seals rows so seals the fleet from the output's
first batch, or from the first keyed start over an earlier release's output.  An output with no
such row and no fleet seal is one written before fleet seals; the summary says so.
"""

from __future__ import annotations

from typing import Any

from reconstructor.audit.chain_check import ChainBreak
from reconstructor.contract.fleet_history import SealedState
from reconstructor.contract.tables import SESSIONS, VIOLATIONS
from reconstructor.contract.writer import FleetRecord
from reconstructor.core.chain import ChainKey
from reconstructor.core.fleet_seal import FleetSeal, TableSum, session_member, violation_member

__all__ = ["FleetCheck"]


def _seal_of(record: FleetRecord | None, key: ChainKey, table: str) -> FleetSeal | ChainBreak | None:
    """The fleet seal a table's history recorded last, held to the key (None: it records none)."""
    if record is None:
        return None
    try:
        seal = FleetSeal.from_json(record.fleet)
    except (ValueError, KeyError, TypeError):
        return ChainBreak(table, "the fleet seal in the table's history is not one the pipeline writes: it was "
                                 "altered", None, None)
    if not seal.holds(key):
        return ChainBreak(table, "the fleet seal in the table's history does not hold with the key: it was altered "
                                 "(or the key is not the chain's)", None, None)
    return seal


def _unsealed_write(version: int) -> str:
    return f"Delta commit {version} changed the table's data and carries no fleet seal"


def _differs(table: str, held: TableSum, sealed: TableSum, unsealed: int | None) -> ChainBreak:
    what = ("a session's row was removed, added or replaced" if table == SESSIONS
            else "a violation's row was removed, added or altered")
    counts = (f"{table} holds {held.rows:,} rows; the fleet seal counts {sealed.rows:,}" if held.rows != sealed.rows
              else f"{table} holds the {held.rows:,} rows the fleet seal counts, but not their sum")
    by = f" ({_unsealed_write(unsealed)})" if unsealed is not None else ""
    return ChainBreak(table, f"{counts}: {what}{by}", None, None)


def _written_without_seal(table: str, version: int) -> ChainBreak:
    return ChainBreak(table, f"{_unsealed_write(version)}: it was written by something other than a keyed run or "
                             "replay", None, None)


class FleetCheck:
    """The fleet seal of one output, over all its rows whatever topics the rest of ``verify``
    checks (``session_seals``: each ``sessions`` row's ``chain_seal``; ``violations``: each
    ``violations`` row as a dict of ``VIOLATION_FIELDS``), and the seal in force in each table's
    log."""

    def __init__(self, session_seals: list[str | None], violations: list[dict[str, Any]],
                 in_sessions: SealedState, in_violations: SealedState, key: ChainKey):
        self.session_seals, self.violations = session_seals, violations
        self.in_sessions, self.in_violations = in_sessions, in_violations
        self.key = key
        #: The seal the tables were checked against; None: the output has none (``check``).
        self.seal: FleetSeal | None = None

    def check(self, required: bool) -> ChainBreak | None:
        """The first thing wrong; ``required``: the output must be fleet-sealed."""
        state = self.in_sessions
        found = _seal_of(state.record, self.key, SESSIONS)
        if isinstance(found, ChainBreak):
            return found
        if found is None:
            if not required:
                return None  # written before fleet seals
            if state.unsealed is not None:
                return _written_without_seal(SESSIONS, state.unsealed)
            if state.oldest:
                return ChainBreak(SESSIONS, f"the table's log (from its commit {state.oldest}) holds no fleet seal: "
                                            "the commit that recorded the last one was cleaned from it "
                                            "(delta.logRetentionDuration) and no commit since carries it", None, None)
            found = FleetSeal()  # a keyed output before its first batch's sessions commit
        sessions = TableSum.of(session_member(seal) for seal in self.session_seals)
        if sessions != found.sessions:
            return _differs(SESSIONS, sessions, found.sessions, state.unsealed)
        if state.unsealed is not None:
            return _written_without_seal(SESSIONS, state.unsealed)
        # A violations log that never held a seal is an earlier release's, written before any.
        written = self.in_violations.unsealed if self.in_violations.record is not None else None
        violations = TableSum.of(violation_member(self.key, r) for r in self.violations)
        if violations != found.violations:
            cut = _seal_of(self.in_violations.record, self.key, VIOLATIONS)
            if isinstance(cut, ChainBreak):
                return cut
            # A batch cut after its violations commit: its seal follows the newest sessions seal.
            if cut is None or cut.after != found.mac or violations != cut.violations:
                return _differs(VIOLATIONS, violations, found.violations, written)
        if written is not None:
            return _written_without_seal(VIOLATIONS, written)
        self.seal = found
        return None
