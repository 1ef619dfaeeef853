"""``verify``'s check of the fleet seal (``core.fleet_seal``): no row of ``sessions`` or ``violations``
removed, added or replaced since the last batch sealed them.

The newest fleet seal in ``sessions``' history must hold with the key and match the table's rows
and their seals' sum.  ``violations`` must match the same seal, or, when a batch was cut between
its ``violations`` commit and its ``sessions`` commit, the newest seal in ``violations``' history,
which then names the ``sessions`` seal as the one it followed (``after``).

An output must hold a fleet seal once a row is sealed under the current domain
(``SealCheck.fleet_required``): a release that seals rows so seals the fleet from the output's
first batch, or from the first keyed start over an earlier release's output.  An output with no
such row and no fleet seal is one written before fleet seals; the summary says so.
"""

from __future__ import annotations

from typing import Any

from reconstructor.audit.chain_check import ChainBreak
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


def _differs(table: str, held: TableSum, sealed: TableSum) -> ChainBreak:
    what = ("a session's row was removed, added or replaced" if table == SESSIONS
            else "a violation's row was removed, added or altered")
    counts = (f"{table} holds {held.rows:,} rows; the fleet seal counts {sealed.rows:,}" if held.rows != sealed.rows
              else f"{table} holds the {held.rows:,} rows the fleet seal counts, but not their sum")
    return ChainBreak(table, f"{counts}: {what}", None, None)


class FleetCheck:
    """The fleet seal of one output, over all its rows whatever topics the rest of ``verify``
    checks (``session_seals``: each ``sessions`` row's ``chain_seal``; ``violations``: each
    ``violations`` row as a dict of ``VIOLATION_FIELDS``), and the newest seal each table's history
    holds."""

    def __init__(self, session_seals: list[str | None], violations: list[dict[str, Any]],
                 in_sessions: FleetRecord | None, in_violations: FleetRecord | None, key: ChainKey):
        self.session_seals, self.violations = session_seals, violations
        self.in_sessions, self.in_violations = in_sessions, in_violations
        self.key = key
        #: The seal the tables were checked against; None: the output has none (``check``).
        self.seal: FleetSeal | None = None

    def check(self, required: bool) -> ChainBreak | None:
        """The first thing wrong; ``required``: the output must be fleet-sealed."""
        found = _seal_of(self.in_sessions, self.key, SESSIONS)
        if isinstance(found, ChainBreak):
            return found
        if found is None:
            if not required:
                return None  # written before fleet seals
            found = FleetSeal()  # a keyed output before its first batch's sessions commit
        sessions = TableSum.of(session_member(seal) for seal in self.session_seals)
        if sessions != found.sessions:
            return _differs(SESSIONS, sessions, found.sessions)
        violations = TableSum.of(violation_member(self.key, r) for r in self.violations)
        if violations != found.violations:
            cut = _seal_of(self.in_violations, self.key, VIOLATIONS)
            if isinstance(cut, ChainBreak):
                return cut
            # A batch cut after its violations commit: its seal follows the newest sessions seal.
            if cut is None or cut.after != found.mac or violations != cut.violations:
                return _differs(VIOLATIONS, violations, found.violations)
        self.seal = found
        return None
