"""Where a replay's chains link into the tables' own: the digests of each snapshot they hold.

A replay starts each session at a snapshot with no head of its chain (``core.chain``).  When the
tables already hold that snapshot, its digests there are the ones the replay's chain must take
and continue from, or its changes past the live writer's would link to nothing the tables hold.
"""

from __future__ import annotations

import re

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.tables import ROW_CHANGES, table_path
from reconstructor.core.chain import ChainSeed
from reconstructor.errors import ReconstructorError, error_line


def chain_seeds(spark: SparkSession, output: str, topic_pattern: str | None) -> dict[tuple[str, str, int], ChainSeed]:
    """``(topic, session, seq) -> ChainSeed`` of every snapshot message ``row_changes`` holds with a
    digest (of the topics ``topic_pattern`` matches); empty for an output with no tables yet."""
    path = table_path(output, ROW_CHANGES)
    try:
        if not DeltaTable.isDeltaTable(spark, path):
            return {}
        changes = spark.read.format("delta").load(path)
        if "chain_prev" not in changes.columns:  # written before the chain: nothing to link to
            return {}
        rows = (changes.where((F.col("type") == "snapshot") & F.col("chain_prev").isNotNull())
                .select("topic", "session", "seq", "chain_prev", "chain_digest").distinct().collect())
    except Exception as exc:  # noqa: BLE001 - any failure here is the output's
        raise ReconstructorError(f"cannot read the row_changes table under {output}: {error_line(exc)}") from None
    pattern = re.compile(f"(?:{topic_pattern})") if topic_pattern else None
    return {(r["topic"], r["session"], int(r["seq"])): ChainSeed(r["chain_prev"], r["chain_digest"]) for r in rows
            if pattern is None or pattern.fullmatch(r["topic"])}
