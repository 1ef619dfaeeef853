"""A session's row in ``sessions``, sealed with the chain's key.

The keyed chain in ``row_changes`` proves each message and its link to the one before, back to
where the chain starts.  It cannot prove where the chain ends: delete a session's last messages,
move ``chain_head`` back to the last digest left (one the run itself made), refold
``current_rows``, and every link still holds.  Nor can it stop anyone from nulling a session's
digests and ``chain_head`` so that its rows read as written before the chain existed.  The seal
is an HMAC over the session's row as the stateful step writes it (its position, status, row count
and chain head), so moving any of them, or nulling the head, needs the key; a sealed output has
every row sealed, so nulling the seal as well is a discrepancy too.

``SEAL_DOMAIN`` starts the HMAC's input: a message's digest starts with the digest before it
(``""`` or ``<scheme>:``) and a newline, so no message's input is a seal's.  The fields are RFC
8785 (JCS) JSON, integers as decimal strings, a null left out (as ``core.chain``'s values).
Without a key there is no seal: anyone could recompute a plain hash.

The domain names its version.  A row sealed under ``SEAL_DOMAIN`` was written by a release that
also seals the fleet (``core.fleet_seal``), so an output holding one must hold a fleet seal too, and no
one can pass such an output off as one written before fleet seals by removing them.  Rows an
earlier release sealed (``SEAL_DOMAIN_V1``) are sealed again under ``SEAL_DOMAIN`` at the first
keyed start of a release that seals the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconstructor.core.chain import ChainKey, jcs_record

__all__ = ["SEALED_FIELDS", "SEAL_DOMAIN", "SEAL_DOMAIN_V1", "seal_version", "session_seal"]

SEAL_DOMAIN = b"reconstructor.session-seal.v2\n"
#: The domain of the seals written before the fleet seal existed.
SEAL_DOMAIN_V1 = b"reconstructor.session-seal\n"

#: The ``sessions`` columns a seal covers, all of them the stateful step's: ``updated_at`` (the
#: write's time) and ``resync_requested_at`` (the resync requests') are written by the sinks.
SEALED_FIELDS = ("chain_head", "first_seq", "last_offset", "last_seq", "partition", "row_count", "session",
                 "status", "topic")
_TEXT = frozenset({"chain_head", "session", "status", "topic"})


def canonical_session(row: Mapping[str, Any]) -> bytes:
    """The sealed fields of a session's row as RFC 8785 JSON bytes."""
    return jcs_record(row, SEALED_FIELDS, _TEXT)


def session_seal(key: ChainKey, row: Mapping[str, Any], domain: bytes = SEAL_DOMAIN) -> str | None:
    """The seal of a session's row (``SEALED_FIELDS`` from ``row``), or None without a key."""
    return key.seal(domain + canonical_session(row))


def seal_version(key: ChainKey, row: Mapping[str, Any]) -> int | None:
    """2 when ``row``'s ``chain_seal`` is its seal under ``SEAL_DOMAIN``, 1 under ``SEAL_DOMAIN_V1``,
    None when it is neither (or absent)."""
    seal = row.get("chain_seal")
    if seal is None:
        return None
    canonical = canonical_session(row)
    if seal == key.seal(SEAL_DOMAIN + canonical):
        return 2
    return 1 if seal == key.seal(SEAL_DOMAIN_V1 + canonical) else None
