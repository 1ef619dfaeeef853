"""The fleet seal: what a keyed output holds as a whole, sealed with the chain's key per batch.

A session's seal (``core.seal``) proves its row; nothing in a row can prove that another row, a
whole session or a ``violations`` row is still there.  So each batch of a keyed output records,
in its commits' ``userMetadata``, one ``FleetSeal`` over the two tables a removal would go
unseen in: ``sessions`` (its rows and the sum of their seals) and ``violations`` (its rows and
the sum of a keyed digest of each, ``violation_member``).  A sum changes with any row removed,
added or replaced, and moves by a value only the key can compute; the seal's MAC binds the counts
and sums, so matching an edit needs the key.

The sums are over the whole table, not the batch: the newest seal in a table's history proves it
as it stands, whatever Delta has since cleaned from its log.  ``after`` is the MAC of the
``sessions`` seal a batch started from, so a batch cut between its ``violations`` commit and its
``sessions`` commit (a crash) is told from an edit: that one ``violations`` seal is the one right
after the newest ``sessions`` seal.

Encoding (``docs/contract.md``): a member is the 256-bit integer of an HMAC's hex; a sum is modulo
2**256, written as 64 hex digits; the MAC is ``ChainKey.seal`` over ``FLEET_DOMAIN`` and the seal's
fields as RFC 8785 JSON (integers as decimal strings).

``spark.sinks.fleet_seal`` keeps it on the driver from batch to batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reconstructor.core.chain import ChainKey, jcs_record, jcs_string

__all__ = ["FLEET_DOMAIN", "MEMBER_DOMAIN", "VIOLATION_FIELDS", "FleetSeal", "TableSum", "session_member",
           "violation_member"]

FLEET_DOMAIN = b"reconstructor.fleet-seal\n"
MEMBER_DOMAIN = b"reconstructor.fleet-member\n"

_MODULUS = 1 << 256

#: The ``violations`` columns a row's member covers: all but ``detected_at`` (the write's time).
VIOLATION_FIELDS = ("detail", "expected_seq", "found_seq", "kind", "offset", "partition", "session", "topic",
                    "value")
_TEXT = frozenset({"detail", "kind", "session", "topic", "value"})


def _hex_value(seal: str | None) -> int:
    """The 256-bit integer of ``hmac-sha256:<hex>`` (0 for none)."""
    return int(seal.rpartition(":")[2], 16) if seal else 0


def session_member(seal: str | None) -> int:
    """A ``sessions`` row's member of the sum: its seal, which only the key makes."""
    return _hex_value(seal)


def canonical_violation(row: Mapping[str, Any]) -> bytes:
    """A ``violations`` row as RFC 8785 JSON bytes (``VIOLATION_FIELDS``, a null left out)."""
    return jcs_record(row, VIOLATION_FIELDS, _TEXT)


def violation_member(key: ChainKey, row: Mapping[str, Any]) -> int:
    """A ``violations`` row's member of the sum: an HMAC of the row, so no one without the key can
    make rows whose members add up to a removed one's."""
    return _hex_value(key.seal(MEMBER_DOMAIN + canonical_violation(row)))


@dataclass(frozen=True)
class TableSum:
    """A table's rows counted and their members summed modulo 2**256."""

    rows: int = 0
    total: int = 0

    def add(self, member: int, rows: int = 1) -> TableSum:
        return TableSum(self.rows + rows, (self.total + member) % _MODULUS)

    def remove(self, member: int) -> TableSum:
        return TableSum(self.rows - 1, (self.total - member) % _MODULUS)

    def plus(self, other: TableSum) -> TableSum:
        return TableSum(self.rows + other.rows, (self.total + other.total) % _MODULUS)

    @property
    def hex(self) -> str:
        return f"{self.total:064x}"

    @classmethod
    def of(cls, members: Iterable[int]) -> TableSum:
        out = cls()
        for m in members:
            out = out.add(m)
        return out


@dataclass(frozen=True)
class FleetSeal:
    """The output's ``sessions`` and ``violations`` as one batch left them, and the MAC of the
    ``sessions`` seal it followed (``""``: none, the output's first)."""

    sessions: TableSum = TableSum()
    violations: TableSum = TableSum()
    after: str = ""
    mac: str = ""

    def canonical(self) -> bytes:
        members = {"after": jcs_string(self.after),
                   "sessions_rows": f'"{self.sessions.rows}"', "sessions_sum": f'"{self.sessions.hex}"',
                   "violations_rows": f'"{self.violations.rows}"', "violations_sum": f'"{self.violations.hex}"'}
        return ("{" + ",".join(f'"{k}":{v}' for k, v in sorted(members.items())) + "}").encode("utf-8")

    def sealed(self, key: ChainKey) -> FleetSeal:
        """This seal with its MAC (a key is required: without one there is no fleet seal)."""
        mac = key.seal(FLEET_DOMAIN + self.canonical())
        if mac is None:
            raise ValueError("a fleet seal needs the chain's key")
        return replace(self, mac=mac)

    def holds(self, key: ChainKey) -> bool:
        """Its MAC is the key's over its fields."""
        return bool(self.mac) and key.seal(FLEET_DOMAIN + self.canonical()) == self.mac

    def next(self, sessions: TableSum, violations: TableSum) -> FleetSeal:
        """The seal of a batch that starts from this one (unsealed: ``sealed`` adds the MAC)."""
        return FleetSeal(sessions, violations, after=self.mac)

    def to_json(self) -> dict[str, Any]:
        return {"after": self.after, "sessions_rows": self.sessions.rows, "sessions_sum": self.sessions.hex,
                "violations_rows": self.violations.rows, "violations_sum": self.violations.hex, "mac": self.mac}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FleetSeal:
        """A seal as ``to_json`` wrote it; ``ValueError`` (or ``KeyError``/``TypeError``) on anything else."""
        return cls(TableSum(int(data["sessions_rows"]), int(str(data["sessions_sum"]), 16)),
                   TableSum(int(data["violations_rows"]), int(str(data["violations_sum"]), 16)),
                   str(data["after"]), str(data["mac"]))

    def line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))
