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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from decimal import Decimal
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = ["CHAIN_START", "ChainKey", "canonical_message", "chain_messages", "digest", "scheme_of"]

#: The ``prev_digest`` of a chain's first message.
CHAIN_START = ""

SHA256, HMAC_SHA256 = "sha256", "hmac-sha256"

_encode_string = json.encoder.encode_basestring  # JCS's escaping: ", \\, and control characters


class ChainKey:
    """The secret that makes digests HMACs (None: plain SHA-256).  Never printed."""

    def __init__(self, secret: str | bytes | None):
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else secret

    @property
    def scheme(self) -> str:
        return SHA256 if not self._secret else HMAC_SHA256

    def __repr__(self) -> str:
        return f"ChainKey({self.scheme})"

    def digest(self, prev: str, canonical: bytes) -> str:
        data = prev.encode("ascii") + b"\n" + canonical
        if not self._secret:
            return f"{SHA256}:{hashlib.sha256(data).hexdigest()}"
        return f"{HMAC_SHA256}:{hmac.new(self._secret, data, hashlib.sha256).hexdigest()}"


NO_KEY = ChainKey(None)


def digest(prev: str, canonical: bytes, key: ChainKey = NO_KEY) -> str:
    return key.digest(prev, canonical)


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
    sign = "-" if x < 0 else ""
    d = Decimal(repr(abs(x))).normalize()  # repr: the shortest round-trip digits
    _, digit_tuple, exp = d.as_tuple()
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


def _json_value(value, kind: str) -> str | None:
    """A value as canonical JSON text, or None for a null (left out)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if kind == "string":
        return _encode_string(str(value))
    if kind == "long":
        return f'"{int(value)}"'
    if kind == "boolean":
        return "true" if bool(value) else "false"
    if kind == "timestamp":
        ts = pd.Timestamp(value)
        if pd.isna(ts):
            return None
        return f'"{_micros(ts)}"'
    if kind == "double":
        x = float(value)
        if math.isnan(x):
            return None  # a double's null, as the table holds it
        if math.isinf(x):
            return '"Infinity"' if x > 0 else '"-Infinity"'
        return jcs_number(x)
    raise ValueError(f"no canonical form for type {kind!r}")


def _micros(ts: pd.Timestamp) -> int:
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return ts.value // 1000


def _object(members: Iterable[tuple[str, str | None]]) -> str:
    """A JSON object from (name, canonical value text) pairs, nulls left out, names in JCS order
    (UTF-16 code units; column names are ASCII-like, where it is the code point order too)."""
    kept = sorted(((name, text) for name, text in members if text is not None),
                  key=lambda m: m[0].encode("utf-16-be"))
    return "{" + ",".join(f"{_encode_string(name)}:{text}" for name, text in kept) + "}"


def canonical_message(topic: str, session: str, message: Mapping, changes: Sequence[Mapping],
                      columns: Sequence[tuple[str, str]]) -> bytes:
    """One message and its changes as RFC 8785 JSON bytes.

    ``message`` holds the message's ``partition``, ``offset``, ``seq``, ``type``, ``event_ts`` and
    ``kafka_ts``; each change its ``row_pos``, ``row_id``, ``op`` and the row values;
    ``columns`` the row schema as (name, type) pairs."""
    ordered = sorted(changes, key=lambda c: (int(c["row_pos"]), str(c["row_id"]).encode("utf-8")))
    rows = []
    for c in ordered:
        values = _object((name, _json_value(c.get(name), kind)) for name, kind in columns)
        rows.append(_object((("op", _encode_string(str(c["op"]))), ("row_id", _encode_string(str(c["row_id"]))),
                             ("row_pos", f'"{int(c["row_pos"])}"'), ("values", values))))
    text = _object((
        ("changes", "[" + ",".join(rows) + "]"),
        ("event_ts", _json_value(message.get("event_ts"), "timestamp")),
        ("kafka_ts", _json_value(message.get("kafka_ts"), "timestamp")),
        ("offset", f'"{int(message["offset"])}"'),
        ("partition", f'"{int(message["partition"])}"'),
        ("seq", f'"{int(message["seq"])}"'),
        ("session", _encode_string(session)),
        ("topic", _encode_string(topic)),
        ("type", _encode_string(str(message["type"]))),
    ))
    return text.encode("utf-8")


def chain_messages(topic: str, session: str, columns: Mapping[str, Sequence], prev: str,
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


def _plain(values) -> list:
    """A column's values as Python objects, nulls as None (pandas' NA, NaT; a double's NaN stays
    a float and is left out as a null by ``_json_value``)."""
    if isinstance(values, pd.Series):
        values = values.array
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":
        return [None if pd.isna(v) else pd.Timestamp(v) for v in values]
    if isinstance(values, pd.api.extensions.ExtensionArray):
        return [None if v is pd.NA or v is pd.NaT else v for v in values.astype(object)]
    return list(values)
