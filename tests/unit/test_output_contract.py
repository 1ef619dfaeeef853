"""The output contract: what existing checkpoints and tables hold must not move.

The state's fields and the sessions table are derived from the core's ``SessionState``; a change
there that would reorder, rename or retype them would make every checkpoint and table written
before unreadable, so their exact text is pinned here.
"""

from __future__ import annotations

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    RECORD_FIELDS,
    SESSION_INFO_DDL,
    SESSIONS_DDL,
    STATE_DDL,
    TABLES,
    VIOLATIONS_DDL,
    RecordKind,
    column_names,
    current_rows_ddl,
    records_ddl,
    row_changes_ddl,
    table_path,
)

SCHEMA = RowSchema.from_dict({"name": "t", "columns": [{"name": "temperature", "type": "double"},
                                                       {"name": "seen_at", "type": "timestamp"}]})


def test_the_state_is_the_tuple_existing_checkpoints_hold():
    assert STATE_DDL == (
        "partition INT, status STRING, first_seq BIGINT, last_seq BIGINT, last_offset BIGINT, "
        "snapshot_seq BIGINT, snapshot_offset BIGINT, started_us BIGINT, last_event_us BIGINT, "
        "row_count BIGINT, table BINARY")


def test_the_tables_keep_their_columns_types_and_order():
    assert TABLES == ("row_changes", "current_rows", "sessions", "violations")
    assert row_changes_ddl(SCHEMA) == (
        "topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, "
        "session STRING NOT NULL, seq BIGINT NOT NULL, type STRING NOT NULL, row_pos INT, "
        "row_id STRING NOT NULL, op STRING NOT NULL, `temperature` DOUBLE, `seen_at` TIMESTAMP, "
        "event_ts TIMESTAMP, kafka_ts TIMESTAMP, chain_prev STRING, chain_digest STRING, hour STRING NOT NULL")
    assert current_rows_ddl(SCHEMA) == (
        "topic STRING NOT NULL, session STRING NOT NULL, row_id STRING NOT NULL, "
        "`temperature` DOUBLE, `seen_at` TIMESTAMP, "
        "partition INT, seq BIGINT NOT NULL, offset BIGINT NOT NULL, updated_at TIMESTAMP")
    assert SESSIONS_DDL == (
        "topic STRING NOT NULL, session STRING NOT NULL, partition INT, status STRING NOT NULL, "
        "first_seq BIGINT, last_seq BIGINT, last_offset BIGINT, snapshot_seq BIGINT, "
        "snapshot_offset BIGINT, row_count BIGINT, started_ts TIMESTAMP, last_event_ts TIMESTAMP, "
        "updated_at TIMESTAMP, chain_head STRING, chain_seal STRING, resync_requested_at TIMESTAMP")
    assert VIOLATIONS_DDL == (
        "topic STRING NOT NULL, partition INT, offset BIGINT, session STRING, kind STRING NOT NULL, "
        "expected_seq BIGINT, found_seq BIGINT, detail STRING, value STRING, detected_at TIMESTAMP")
    assert table_path("s3a://bucket/out/", "sessions") == "s3a://bucket/out/sessions"


def test_a_session_record_carries_the_sessions_fields_and_every_record_the_same_columns():
    assert SESSION_INFO_DDL == (
        "status STRING, first_seq BIGINT, last_seq BIGINT, last_offset BIGINT, snapshot_seq BIGINT, "
        "snapshot_offset BIGINT, row_count BIGINT, started_us BIGINT, last_event_us BIGINT, chain_head STRING, chain_seal STRING")
    assert column_names(RECORD_FIELDS, SCHEMA) == [
        "record", "topic", "session", "partition", "offset", "seq", "type", "row_pos", "row_id", "op",
        "is_latest", "temperature", "seen_at", "event_ts", "kafka_ts", "chain_prev", "chain_digest", "info"]
    assert records_ddl(SCHEMA).endswith("`temperature` DOUBLE, `seen_at` TIMESTAMP, event_ts TIMESTAMP, "
                                        "kafka_ts TIMESTAMP, chain_prev STRING, chain_digest STRING, info STRING")
    assert [k.value for k in RecordKind] == ["change", "current", "session", "violation", "recorded"]
