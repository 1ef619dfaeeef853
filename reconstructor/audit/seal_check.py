"""``verify``'s check of the sessions' seals (``core.seal``): each row as the stateful step sealed it.

With the chain's key, a sealed row whose sealed fields were moved (its last seq, offset, status,
row count or chain head: what a truncation of its messages has to move) no longer gives its seal.
An output is sealed once any row carries a seal, or its ``sessions`` table has the
``SEALED_PROPERTY`` (set when a keyed run sealed the rows an earlier release wrote): then every
row must carry one, so nulling a seal is a discrepancy too.  An output with neither is one no
keyed run of a sealing release has written; the summary says it is not sealed.

A row sealed under ``core.seal.SEAL_DOMAIN`` was written by a release that also seals the fleet:
the output then must hold a fleet seal (``fleet_required``, ``audit.fleet_check``), and a row
sealed as an earlier release sealed it (``SEAL_DOMAIN_V1``) is one put back from before the output
was sealed so, since the first keyed start of such a release seals every row again.
"""

from __future__ import annotations

from typing import Any

from reconstructor.audit.chain_check import ChainBreak
from reconstructor.contract.tables import SEALED_PROPERTY, SESSIONS
from reconstructor.core.chain import HMAC_SHA256, ChainKey
from reconstructor.core.seal import seal_version
from reconstructor.errors import UsageError

__all__ = ["SealCheck"]


class SealCheck:
    """The seals of the ``sessions`` rows checked (``rows``: dicts, the topics checked)."""

    def __init__(self, rows: list[dict[str, Any]], key: ChainKey, properties: dict[str, str] | None = None):
        self.rows = rows
        self.key = key
        seals = [r.get("chain_seal") for r in rows]
        self.sealed = SEALED_PROPERTY in (properties or {}) or any(s is not None for s in seals)
        self.checked = 0
        #: Some row is sealed under the current domain: the output must hold a fleet seal.
        self.fleet_required = False

    def check(self) -> ChainBreak | None:
        if not self.sealed:
            return None
        if self.key.scheme != HMAC_SHA256:
            raise UsageError("the sessions' rows are sealed with the chain's key: verify needs it (--chain-key, "
                             "RECON_CHAIN_KEY or chain_key in the config file)")
        earlier = None  # a row sealed as an earlier release sealed it
        for r in sorted(self.rows, key=lambda r: (r["topic"], r["session"])):
            if r.get("chain_seal") is None:
                return ChainBreak(SESSIONS, "the session's row has no seal, but the output is sealed: its seal "
                                            "was removed", r["topic"], r["session"], r.get("last_seq"))
            version = seal_version(self.key, r)
            if version is None:
                return ChainBreak(SESSIONS, "the session's row does not give its seal: its status, seqs, offsets, "
                                            "row count or chain_head were altered (or the key is not the chain's)",
                                  r["topic"], r["session"], r.get("last_seq"))
            self.fleet_required |= version == 2
            earlier = earlier or (r if version == 1 else None)
            self.checked += 1
        if self.fleet_required and earlier is not None:
            return ChainBreak(SESSIONS, "the session's row is sealed as a release before fleet seals sealed it, in "
                                        "an output sealed since: a row put back from an earlier version of the table",
                              earlier["topic"], earlier["session"], earlier.get("last_seq"))
        return None
