"""The change log's hash chain: each applied message digested with the digest before it.

A session's ``row_changes`` rows could be deleted or altered at rest without any other table
telling: a later change hides an altered value, and a message whose rows are all gone reads as
one that changed no row.  So every change row carries the digest of its message, and the digest
before it (``prev_digest``); ``verify`` recomputes each message's digest from its rows and links
each message to the one before it.

- A message's digest is ``SHA-256(prev || "\\n" || canonical)``, or with a key
  ``HMAC-SHA256(key, ...)``, written ``sha256:<hex>`` or ``hmac-sha256:<hex>``.  Without a key
  anyone can recompute the chain: it catches accidents and naive edits, not a forger.
- ``canonical`` is the message as RFC 8785 (JCS) JSON: its coordinates, and its changes sorted by
  ``(row_pos, row_id)``, each with its values by column name.  Integers and times (epoch
  microseconds) are decimal strings, so a 64-bit value survives any JSON reader; a double is
  JCS's number form (``Infinity`` and ``-Infinity`` as strings); a null is left out, so a column
  added later leaves every earlier digest as it was.  Another engine reproduces it bit for bit.
- A message that changed no row (an end, an update without rows) is not in the chain: it leaves
  nothing to alter, and the next message with rows names the digest before it.
- A chain starts (``prev_digest = ""``) at a session's first message, at the first message a driver
  applies without knowing the digest before it (a replay from a snapshot the tables do not hold, a
  checkpoint written before the chain existed), and nowhere else: a resync snapshot continues it.
- A replay that starts a session at a snapshot the tables hold takes that message's digests from
  the tables (``ChainSeed``) and continues from them: the live run may have digested more changes
  in it (the ``row_pos = -1`` deletes of the rows it dropped, which a replay into an empty table
  does not make), and the replay's own rows of it are the tables' already.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = ["CHAIN_START", "ChainKey", "ChainSeed", "canonical_message", "chain_messages", "chain_session",
           "scheme_of"]

#: The ``prev_digest`` of a chain's first message.
CHAIN_START = ""

SHA256, HMAC_SHA256 = "sha256", "hmac-sha256"

#: A string as RFC 8785 (JCS) writes it: quoted, ", \\ and control characters escaped.
jcs_string = json.encoder.encode_basestring


def jcs_record(row: Mapping[str, Any], names: Sequence[str], texts: frozenset[str]) -> bytes:
    """``row``'s fields ``names`` (ASCII, in sorted order) as RFC 8785 JSON bytes: those in
    ``texts`` as strings, the others integers written as decimal strings, a null left out (a
    seal's and a fleet member's encoding)."""
    members = []
    for name in names:
        value = row.get(name)
        if value is None:
            continue
        text = jcs_string(str(value)) if name in texts else f'"{int(value)}"'
        members.append(f'"{name}":{text}')
    return ("{" + ",".join(members) + "}").encode("utf-8")


class ChainKey:
    """The secret that makes digests HMACs (None: plain SHA-256).  Never printed."""

    def __init__(self, secret: str | bytes | None):
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else secret

    @property
    def scheme(self) -> str:
        return SHA256 if not self._secret else HMAC_SHA256

    def __repr__(self) -> str:
        return f"ChainKey({self.scheme})"

    def seal(self, data: bytes) -> str | None:
        """An HMAC of ``data`` (None without a key: anyone could make a plain hash of it)."""
        if not self._secret:
            return None
        return f"{HMAC_SHA256}:{hmac.new(self._secret, data, hashlib.sha256).hexdigest()}"

    def digest(self, prev: str, canonical: bytes) -> str:
        data = prev.encode("ascii") + b"\n" + canonical
        return self.seal(data) or f"{SHA256}:{hashlib.sha256(data).hexdigest()}"


NO_KEY = ChainKey(None)


def scheme_of(value: str | None) -> str | None:
    """``sha256`` or ``hmac-sha256`` for a stored digest (None for none)."""
    return None if not value else value.partition(":")[0]


# ------------------------------------------------------------------------------------------------
# Canonical values


def jcs_number(x: float) -> str:
    """A finite double as RFC 8785 writes it (ECMAScript's Number.prototype.toString): the
    shortest decimal that reads back as ``x``, in plain or exponent form by its magnitude."""
    if x == 0:
        return "0"
    text = repr(x)  # the shortest round-trip digits; plain from 1e-4 to 1e16, as ECMAScript's
    if "e" not in text:
        return text[:-2] if text.endswith(".0") else text
    sign = "-" if x < 0 else ""
    d = Decimal(repr(abs(x))).normalize()
    _, digit_tuple, exp = d.as_tuple()
    if not isinstance(exp, int):  # 'n', 'N', 'F': NaN and infinities, refused before this
        raise ValueError(f"not a finite number: {x!r}")
    digits = "".join(map(str, digit_tuple))
    k, n = len(digits), len(digits) + exp  # x = 0.d1d2...dk * 10**n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + text


def _null(value: Any) -> bool:
    return value is None or value is pd.NA or value is pd.NaT


def _string(value: Any) -> str | None:
    return None if _null(value) else jcs_string(str(value))


def _long(value: Any) -> str | None:
    return None if _null(value) else f'"{int(value)}"'


def _boolean(value: Any) -> str | None:
    return None if _null(value) else ("true" if value else "false")


def _timestamp(value: Any) -> str | None:
    """A time as epoch microseconds (an int is one already: ``_plain`` gives them so)."""
    if _null(value):
        return None
    if isinstance(value, int):
        return f'"{value}"'
    ts = pd.Timestamp(value)
    return None if pd.isna(ts) else f'"{_micros(ts)}"'


def _double(value: Any) -> str | None:
    if _null(value):
        return None
    x = float(value)
    if x != x:
        return None  # a double's null, as the table holds it
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    return jcs_number(x)


_ENCODE = {"string": _string, "long": _long, "boolean": _boolean, "timestamp": _timestamp, "double": _double}


def _micros(ts: pd.Timestamp) -> int:
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return ts.value // 1000


@functools.lru_cache(maxsize=64)
def _value_encoders(columns: tuple[tuple[str, str], ...]) -> tuple[Any, ...]:
    """Per row column, in JCS member order (UTF-16 code units): its name, ``"name":`` and encoder."""
    ordered = sorted(columns, key=lambda c: c[0].encode("utf-16-be"))
    return tuple((name, jcs_string(name) + ":", _ENCODE[kind]) for name, kind in ordered)


def canonical_message(topic: str, session: str, message: Mapping[str, Any], changes: Sequence[Mapping[str, Any]],
                      columns: Sequence[tuple[str, str]]) -> bytes:
    """One message and its changes as RFC 8785 JSON bytes.

    ``message`` holds the message's ``partition``, ``offset``, ``seq``, ``type``, ``event_ts`` and
    ``kafka_ts``; each change its ``row_pos``, ``row_id``, ``op`` and the row values;
    ``columns`` the row schema as (name, type) pairs."""
    encoders = _value_encoders(tuple(columns))
    ordered = sorted(changes, key=lambda c: (int(c["row_pos"]), str(c["row_id"]).encode("utf-8")))
    rows = []
    for c in ordered:
        values = ",".join(prefix + text for name, prefix, encode in encoders
                          if (text := encode(c.get(name))) is not None)
        rows.append(f'{{"op":{jcs_string(str(c["op"]))},"row_id":{jcs_string(str(c["row_id"]))},'
                    f'"row_pos":"{int(c["row_pos"])}","values":{{{values}}}}}')
    members = [f'"changes":[{",".join(rows)}]']
    for name in ("event_ts", "kafka_ts"):
        text = _timestamp(message.get(name))
        if text is not None:
            members.append(f'"{name}":{text}')
    members += [f'"offset":"{int(message["offset"])}"', f'"partition":"{int(message["partition"])}"',
                f'"seq":"{int(message["seq"])}"', f'"session":{jcs_string(session)}',
                f'"topic":{jcs_string(topic)}', f'"type":{jcs_string(str(message["type"]))}']
    return ("{" + ",".join(members) + "}").encode("utf-8")


def chain_messages(topic: str, session: str, columns: Mapping[str, Sequence[Any]], prev: str,
                   row_columns: Sequence[tuple[str, str]], key: ChainKey = NO_KEY,
                   ) -> tuple[np.ndarray, np.ndarray, str]:
    """Digest a batch's changes of one session (``BatchResult.columns``, in apply order).

    Returns each change row's ``prev_digest`` and ``digest`` (object arrays, row for row) and the
    chain's head after them.  ``prev`` is the digest before the batch (``CHAIN_START`` for a chain
    that starts here)."""
    offsets = np.asarray(columns["offset"], dtype=np.int64)
    n = len(offsets)
    prevs, digests = np.empty(n, dtype=object), np.empty(n, dtype=object)
    if not n:
        return prevs, digests, prev
    # A message's rows are contiguous in apply order: split where the offset changes.
    bounds = np.flatnonzero(np.diff(offsets)) + 1
    starts, ends = np.concatenate([[0], bounds]), np.concatenate([bounds, [n]])
    names = ["row_pos", "row_id", "op", *[name for name, _ in row_columns]]
    values = {name: _plain(columns[name]) for name in names}
    coords = {name: _plain(columns[name]) for name in ("partition", "offset", "seq", "type", "event_ts", "kafka_ts")}
    for a, b in zip(starts.tolist(), ends.tolist()):
        message = {name: coords[name][a] for name in coords}
        changes = [{name: values[name][i] for name in names} for i in range(a, b)]
        head = key.digest(prev, canonical_message(topic, session, message, changes, row_columns))
        prevs[a:b], digests[a:b] = prev, head
        prev = head
    return prevs, digests, prev


class ChainSeed(NamedTuple):
    """The digests ``row_changes`` holds for a snapshot message: where a replay that starts a
    session at it links into the tables' chain."""

    prev: str
    digest: str


def chain_session(topic: str, session: str, columns: Mapping[str, Sequence[Any]], known: str | None,
                  seed: ChainSeed | None, seed_seq: int | None, row_columns: Sequence[tuple[str, str]],
                  key: ChainKey = NO_KEY) -> tuple[np.ndarray, np.ndarray, str]:
    """``chain_messages`` from the session's head ``known``; a session with no head that a replay
    started at a snapshot the tables hold (``seed``, of the message at ``seed_seq``) gives that
    message's rows the tables' digests and continues from its digest."""
    if known is not None or seed is None:
        return chain_messages(topic, session, columns, known or CHAIN_START, row_columns, key)
    seqs = np.asarray(columns["seq"], dtype=np.int64)
    others = np.flatnonzero(seqs != seed_seq)
    k = int(others[0]) if len(others) else len(seqs)  # the snapshot's rows lead the batch's, if here
    rest = {name: values[k:] for name, values in columns.items()}
    prevs, digests, head = chain_messages(topic, session, rest, seed.digest, row_columns, key)
    lead = np.full(k, seed.prev, dtype=object), np.full(k, seed.digest, dtype=object)
    return np.concatenate([lead[0], prevs]), np.concatenate([lead[1], digests]), head


def _plain(values: Any) -> list[Any]:
    """A column's values as Python objects, nulls as None (pandas' NA, NaT; a double's NaN stays
    a float and is left out as a null by ``_double``)."""
    if isinstance(values, pd.Series):
        values = values.array
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":  # naive UTC: epoch microseconds
        micros = values.astype("datetime64[us]").astype(np.int64).tolist()
        return [None if null else us for us, null in zip(micros, np.isnat(values).tolist())]
    if isinstance(values, pd.api.extensions.ExtensionArray):
        return [None if v is pd.NA or v is pd.NaT else v for v in values.astype(object)]
    return list(values)
