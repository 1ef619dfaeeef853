"""Whether a chain key is the output's (``reconstructor.audit.key_check``), over Delta tables written
with delta-rs: the core's own change log, chained with a key or without, checked with the same key,
another one and none; no table, a log written before the chain and a change logged twice."""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import write_deltalake

from reconstructor.audit.delta_tables import OutputTables
from reconstructor.audit.key_check import checked_outputs, newest_chained_message, require_output_key
from reconstructor.core.batch import process_batch
from reconstructor.core.chain import CHAIN_START, NO_KEY, ChainKey, chain_messages
from reconstructor.errors import UsageError
from reconstructor.settings import S3Settings
from tests.support.model import SCHEMA, Msg, to_frame

TOPIC, SESSION = "sensor-1", "s1"
ROW_TYPES = [(c.name, c.type) for c in SCHEMA.columns]
KEY = "the-output-key"


def change_log(key: ChainKey) -> pd.DataFrame:
    """One session's row_changes as the pipeline writes them, chained with ``key``, over two hours."""
    rows = [{"id": f"r{i}", "values": {"temperature": float(i), "status": "ok"}} for i in range(4)]
    msgs = [Msg(seq=0, type="snapshot", rows=rows, offset=10),
            Msg(seq=1, type="update", rows=[{"id": "r1", "values": {"temperature": 11.0}}], offset=11),
            Msg(seq=2, type="snapshot", rows=rows[:2], offset=12),  # drops r2 and r3: row_pos -1 rows
            Msg(seq=3, type="update", rows=[{"id": "r0", "op": "delete"}], offset=13)]
    result = process_batch(TOPIC, SESSION, [to_frame(msgs)], None, SCHEMA)
    prevs, digests, _ = chain_messages(TOPIC, SESSION, result.columns, CHAIN_START, ROW_TYPES, key)
    changes = result.changes.assign(chain_prev=prevs, chain_digest=digests, topic=TOPIC, session=SESSION)
    changes["hour"] = changes["offset"].map(lambda o: "2026-01-01-00" if o < 12 else "2026-01-01-01")
    return changes


def output(tmp_path, changes: pd.DataFrame) -> OutputTables:
    write_deltalake(str(tmp_path / "row_changes"), changes, partition_by=["hour"])
    return OutputTables(str(tmp_path), S3Settings())


def refusal(tables: OutputTables, key: ChainKey) -> str:
    with pytest.raises(UsageError) as refused:
        require_output_key(tables, key)
    return str(refused.value)


def test_a_keyed_output_takes_its_key_only(tmp_path):
    tables = output(tmp_path, change_log(ChainKey(KEY)))
    require_output_key(tables, ChainKey(KEY))
    line = refusal(tables, NO_KEY)
    assert line.startswith(f"the output {tmp_path} is chained with hmac-sha256: give the output's chain key")
    line = refusal(tables, ChainKey("another-key"))
    assert line.startswith(f"the output {tmp_path} is chained with hmac-sha256 under another key")
    assert "another-key" not in line and KEY not in line and "\n" not in line


def test_an_output_chained_without_a_key_takes_none(tmp_path):
    tables = output(tmp_path, change_log(NO_KEY))
    require_output_key(tables, NO_KEY)
    line = refusal(tables, ChainKey(KEY))
    assert line.startswith(f"the output {tmp_path} is chained with sha256, without a key") and KEY not in line


def test_the_newest_hour_gives_one_whole_message(tmp_path):
    changes = change_log(ChainKey(KEY))
    message = newest_chained_message(output(tmp_path, changes))
    assert set(message["hour"].to_pylist()) == {"2026-01-01-01"}
    (offset,) = set(message["offset"].to_pylist())
    assert message.num_rows == int((changes["offset"] == offset).sum())


def test_no_table_or_no_digest_takes_any_key(tmp_path):
    require_output_key(OutputTables(str(tmp_path / "none"), S3Settings()), ChainKey(KEY))
    unchained = change_log(NO_KEY).drop(columns=["chain_prev", "chain_digest"])  # before the chain existed
    tables = output(tmp_path / "old", unchained)
    require_output_key(tables, ChainKey(KEY))
    require_output_key(tables, NO_KEY)


def test_a_change_logged_twice_is_not_taken_for_another_key(tmp_path):
    changes = change_log(ChainKey(KEY))
    tables = output(tmp_path, pd.concat([changes, changes], ignore_index=True))
    require_output_key(tables, ChainKey(KEY))


def test_the_outputs_checked_are_those_with_a_writer_lease():
    assert all(map(checked_outputs, ["/data/out", "file:///data/out", "s3a://b/out", "s3://b/out"]))
    assert not any(map(checked_outputs, ["dbfs:/out", "abfss://c@a.dfs.core.windows.net/out", "gs://b/out"]))
