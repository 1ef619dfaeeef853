"""``verify``'s proof of the change log: each message's digest recomputed, each linked to the one before.

Fed ``row_changes`` an hour partition at a time (``core.chain`` says what a digest covers):

- every message's rows agree on its ``chain_prev`` and ``chain_digest``, and the digest is the one
  its rows give: an altered, added or removed change of it shows here;
- every message links to one that the log holds (its ``chain_prev`` is another message's digest,
  of a lower seq), or starts a chain: a message whose rows were all removed leaves the next one
  linked to nothing;
- no double is NaN: the pipeline never writes one, and a digest reads it as a null;
- a chain starts only at a snapshot, at the session's first message with rows (its snapshot held
  none), or at the first message after rows written before the chain existed; the session's last
  chain ends at the head ``sessions`` holds, so the last messages cannot go either.

Memory held: per session, the messages whose neighbour in the chain was not read yet (hours are
read in order, so mostly those at an hour's edge), never the log.  A digest's scheme says whether
a key made it: HMACs need the key to be checked, and with a key every digest must be an HMAC.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from reconstructor.contract.tables import ROW_CHANGES, SESSIONS
from reconstructor.core.chain import CHAIN_START, HMAC_SHA256, ChainKey, canonical_message, scheme_of
from reconstructor.errors import UsageError

__all__ = ["ChainBreak", "ChainCheck", "row_kinds"]

_KINDS = ((pa.types.is_string, "string"), (pa.types.is_large_string, "string"), (pa.types.is_int64, "long"),
          (pa.types.is_integer, "long"), (pa.types.is_floating, "double"), (pa.types.is_boolean, "boolean"),
          (pa.types.is_timestamp, "timestamp"))


def row_kinds(schema: pa.Schema, names: list[str]) -> list[tuple[str, str]]:
    """The row columns as (name, row schema type), from the types the table holds."""
    out = []
    for name in names:
        arrow = schema.field(name).type
        out.append((name, next((kind for test, kind in _KINDS if test(arrow)), "string")))
    return out


@dataclass(frozen=True)
class ChainBreak:
    """What is wrong with a session's chain, and where."""

    table: str
    detail: str
    topic: str | None  # None: a table as a whole (``fleet_check``)
    session: str | None
    seq: int | None = None


@dataclass
class _Chain:
    heads: dict[str, Any] = field(default_factory=dict)  # digest -> seq: messages whose successor is unread
    tails: dict[str, Any] = field(default_factory=dict)  # chain_prev -> (seq, offset): whose predecessor is unread
    starts: list[Any] = field(default_factory=list)  # (seq, offset, type) of each chain's first message
    messages: int = 0
    unchained_max_seq: int | None = None  # the last seq logged before the chain existed
    first_seq: int | None = None  # the session's first message with rows, chained or not


class ChainCheck:
    """The chain checks over one output's ``row_changes``."""

    def __init__(self, kinds: list[tuple[str, str]], key: ChainKey):
        self.kinds = kinds
        self.key = key
        self._chains: dict[tuple[str, str], _Chain] = defaultdict(_Chain)
        self.messages = 0  # messages whose digest was recomputed

    def add(self, batch: pa.Table) -> ChainBreak | None:
        """Check one batch (an hour partition, already filtered to the topics checked)."""
        if not batch.num_rows:
            return None
        nan = self._nan(batch)
        if nan is not None:
            return nan
        has_chain = "chain_digest" in batch.column_names
        names = [n for n, _ in self.kinds]
        cols = ["topic", "session", "partition", "offset", "seq", "type", "row_pos", "row_id", "op",
                "event_ts", "kafka_ts", *names] + (["chain_prev", "chain_digest"] if has_chain else [])
        rows = batch.select(cols).to_pylist()
        rows.sort(key=lambda r: (r["topic"], r["session"], r["offset"]))
        start = 0
        for i in range(1, len(rows) + 1):
            if i < len(rows) and (rows[i]["topic"], rows[i]["session"], rows[i]["offset"]) == \
                    (rows[start]["topic"], rows[start]["session"], rows[start]["offset"]):
                continue
            found = self._message(rows[start:i], has_chain)
            if found is not None:
                return found
            start = i
        return None

    def _nan(self, batch: pa.Table) -> ChainBreak | None:
        """A NaN in a double column: the pipeline never writes one (a NaN in a message is
        MALFORMED), and a digest reads it as a null, so it would pass for the null it replaced."""
        for name, kind in self.kinds:
            if kind != "double":
                continue
            nan = pc.fill_null(pc.is_nan(batch[name]), False)
            if pc.any(nan).as_py():
                r = batch.filter(nan).slice(0, 1).to_pylist()[0]
                return ChainBreak(ROW_CHANGES, f"{name} is NaN in the change at offset {r['offset']}, a value the "
                                               "pipeline never writes", r["topic"], r["session"], r["seq"])
        return None

    def _message(self, rows: list[dict[str, Any]], has_chain: bool) -> ChainBreak | None:
        first = rows[0]
        topic, session, seq, offset = first["topic"], first["session"], first["seq"], first["offset"]
        chain = self._chains[(topic, session)]
        chain.first_seq = seq if chain.first_seq is None else min(chain.first_seq, seq)
        digests = {(r.get("chain_prev"), r.get("chain_digest")) for r in rows} if has_chain else {(None, None)}
        if len(digests) != 1:
            return ChainBreak(ROW_CHANGES, f"the rows of the message at offset {offset} disagree on its digest",
                              topic, session, seq)
        ((prev, digest),) = digests
        if digest is None:
            if prev is not None:
                return ChainBreak(ROW_CHANGES, f"the message at offset {offset} has a chain_prev but no digest",
                                  topic, session, seq)
            chain.unchained_max_seq = max(seq, chain.unchained_max_seq if chain.unchained_max_seq is not None else seq)
            return None
        scheme = scheme_of(digest)
        if scheme == HMAC_SHA256 and self.key.scheme != HMAC_SHA256:
            raise UsageError("row_changes' digests are HMACs: verify needs the chain's key (--chain-key, "
                             "RECON_CHAIN_KEY or chain_key in the config file)")
        if scheme != self.key.scheme:
            return ChainBreak(ROW_CHANGES, f"the digest of the message at offset {offset} is {scheme}, not "
                                           f"{self.key.scheme}: it was not made with the chain's key",
                                           topic, session, seq)
        message = {k: first[k] for k in ("partition", "offset", "seq", "type", "event_ts", "kafka_ts")}
        changes = [{**r, "row_pos": -1 if r["row_pos"] is None else r["row_pos"]} for r in rows]
        canonical = canonical_message(topic, session, message, changes, self.kinds)
        if self.key.digest(prev or CHAIN_START, canonical) != digest:
            keyed = " (or the key is not the chain's)" if scheme == HMAC_SHA256 else ""
            return ChainBreak(ROW_CHANGES, f"the digest of the message at offset {offset} is not the one its "
                                           f"rows give: a change of it was altered, added or removed{keyed}",
                              topic, session, seq)
        self.messages += 1
        chain.messages += 1
        if not prev:
            chain.starts.append((seq, offset, first["type"]))
        elif prev in chain.heads:
            before = chain.heads.pop(prev)
            if before >= seq:
                return ChainBreak(ROW_CHANGES, f"the message at offset {offset} links to the one at seq {before}, "
                                               "which is not before it", topic, session, seq)
        else:
            chain.tails[prev] = (seq, offset)
        if digest in chain.tails:
            after, after_offset = chain.tails.pop(digest)
            if after <= seq:
                return ChainBreak(ROW_CHANGES, f"the message at offset {after_offset} links to the one at seq "
                                               f"{seq}, which is not before it", topic, session, after)
        else:
            chain.heads[digest] = seq
        return None

    def finish(self, heads: dict[tuple[str, str], str | None]) -> ChainBreak | None:
        """The checks that need the whole log read: ``heads`` is each session's ``chain_head`` in
        ``sessions`` (the sessions checked)."""
        for key in sorted(set(self._chains) | {k for k, h in heads.items() if h}):
            chain = self._chains.get(key, _Chain())
            topic, session = key
            if chain.tails:
                seq, offset = min(chain.tails.values())
                return ChainBreak(ROW_CHANGES, f"the message at offset {offset} links to a digest that no message "
                                               "of the session holds: a message before it lost its rows",
                                  topic, session, seq)
            for seq, offset, kind in chain.starts:
                after_unchained = chain.unchained_max_seq is not None and chain.unchained_max_seq < seq
                # A session whose snapshot held no rows has its first row in an update: the
                # snapshot left nothing in the chain, so its first message with rows starts it.
                first_rows = seq == chain.first_seq
                if kind != "snapshot" and not after_unchained and not first_rows:
                    return ChainBreak(ROW_CHANGES, f"a chain starts at the message at offset {offset}, of type "
                                                   f"{kind}: a chain starts at a snapshot", topic, session, seq)
            head = heads.get(key)
            if not chain.heads and head:
                return ChainBreak(SESSIONS, f"chain_head is {head}, but no message of the session holds it",
                                  topic, session)
            if chain.heads:
                last_digest, last_seq = max(chain.heads.items(), key=lambda item: item[1])
                if head != last_digest:
                    return ChainBreak(SESSIONS, f"chain_head is {head}; the session's chain in row_changes ends "
                                                f"at seq {last_seq} with {last_digest}: messages after it lost "
                                                f"their rows"
                                      if head else f"chain_head is empty; row_changes' chain ends at seq {last_seq}",
                                      topic, session, last_seq)
        return None

    def chains(self) -> int:
        return sum(len(c.starts) for c in self._chains.values())
