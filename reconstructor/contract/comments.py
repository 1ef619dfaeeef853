"""What each output table and column is, as the contract says it: the COMMENTs a catalog browser
shows (``--catalog``), set when a table is created and by the writer on older tables.

Pure: the texts, and which of them a table's current comments lack.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import CURRENT_ROWS, ROW_CHANGES, SESSIONS, VIOLATIONS

_COMMON = {
    "topic": "Kafka topic of the sensor that sent the message",
    "session": "capture session id (the message's session, else its Kafka key)",
    "partition": "Kafka partition of the session's messages",
    "offset": "Kafka offset of the message",
    "seq": "the message's seq in its session",
    "row_id": "id of the row in the session's table",
    "event_ts": "the message's ts (UTC)",
    "updated_at": "when the row was last written",
}

TABLE_COMMENTS = {
    ROW_CHANGES: "Every applied row change, append-only, partitioned by hour. Replaying a session's "
                 "changes in (seq, row_pos) order yields its table.",
    CURRENT_ROWS: "The live table of every open session: one row per (topic, session, row_id); deleted "
                  "rows and the rows of ended, timed-out and quarantined sessions are absent.",
    SESSIONS: "One row per (topic, session): its status, seqs, offsets, row count and hash-chain head.",
    VIOLATIONS: "One row per violation, record set aside (quarantine mode) or snapshot drift, with the "
                "record's raw Kafka value.",
}

COLUMN_COMMENTS: dict[str, dict[str, str]] = {
    ROW_CHANGES: {
        **_COMMON,
        "type": "message type: snapshot or update",
        "row_pos": "the row's place in its message (-1: a row a snapshot dropped)",
        "op": "upsert or delete",
        "kafka_ts": "the Kafka record's timestamp (UTC)",
        "chain_prev": "hash-chain digest of the session's message before this one",
        "chain_digest": "hash-chain digest of this message",
        "hour": "yyyy-MM-dd-HH of the Kafka timestamp (UTC): the partition column",
    },
    CURRENT_ROWS: {
        **_COMMON,
        "seq": "seq of the message that last changed the row",
        "offset": "Kafka offset of the message that last changed the row",
        "updated_at": "the ts of the message that last changed the row (UTC)",
    },
    SESSIONS: {
        **_COMMON,
        "status": "open, ended, timed_out or quarantined",
        "first_seq": "seq of the first message applied",
        "last_seq": "seq of the last message applied",
        "last_offset": "Kafka offset of the last message applied",
        "snapshot_seq": "seq of the last snapshot applied",
        "snapshot_offset": "Kafka offset of the last snapshot applied: where a replay rebuilds the session",
        "row_count": "rows in the session's table",
        "started_ts": "ts of the session's first message (UTC)",
        "last_event_ts": "ts of the last message applied (UTC)",
        "updated_at": "when the row was last written",
        "chain_head": "hash-chain digest of the session's last message with rows",
        "chain_seal": "HMAC of the session's row with the chain key (null without a key)",
        "resync_requested_at": "when the session's sensor was last asked for a snapshot (--resync-topic)",
    },
    VIOLATIONS: {
        "topic": _COMMON["topic"],
        "partition": "Kafka partition of the record",
        "offset": "Kafka offset of the record (the first offset lost, for DATA_LOSS)",
        "session": "the record's session (null: it names none)",
        "kind": "GAP, DUPLICATE, NO_SNAPSHOT, PARTITION_MOVED, AFTER_END, UNKNOWN_ROW, MALFORMED, "
                "DATA_LOSS, SNAPSHOT_DRIFT or SKIPPED",
        "expected_seq": "the seq the session expected",
        "found_seq": "the seq the record holds",
        "detail": "what was wrong, in words",
        "value": "the record's raw Kafka value",
        "detected_at": "when the reconstructor recorded it",
    },
}


def column_comment(table: str, column: str, schema: RowSchema) -> str | None:
    """A column's comment: the contract's, or for a row column its row schema's name and type."""
    found = COLUMN_COMMENTS.get(table, {}).get(column)
    if found is not None:
        return found
    for c in schema.columns:
        if c.name == column:
            return f"row column {c.name} ({c.type}) of the row schema {schema.name}"
    return None


def missing_comments(table: str, current: Mapping[str, str | None], schema: RowSchema) -> dict[str, str]:
    """The columns of ``current`` (column -> its comment now) whose comment is not the contract's,
    with the contract's."""
    out = {}
    for column, now in current.items():
        wanted = column_comment(table, column, schema)
        if wanted is not None and now != wanted:
            out[column] = wanted
    return out
