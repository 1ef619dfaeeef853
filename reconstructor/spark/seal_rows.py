"""Seal, once, the ``sessions`` rows a keyed output holds from before its rows were sealed.

From a release that seals, every session row a keyed run writes carries its seal (``core.seal``),
and ``verify`` holds every row of a sealed output to one.  The rows an earlier release wrote, of
sessions no batch has touched since, have none; so the first keyed ``run`` or ``replay`` seals them
as they stand, in one MERGE, and records that in the table's ``SEALED_PROPERTY``.  A crash between
the two only means the next start seals again (the rows already sealed are left alone).
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.tables import SEALED_PROPERTY, SESSIONS, table_path
from reconstructor.core.chain import HMAC_SHA256, ChainKey
from reconstructor.core.seal import SEALED_FIELDS, session_seal
from reconstructor.spark.catalog import path_ref

__all__ = ["seal_sessions"]


def seal_sessions(spark: SparkSession, output: str, key: ChainKey) -> int | None:
    """Seal the unsealed rows of ``output``'s ``sessions`` with ``key`` when the table is not sealed
    yet (a table this run creates is sealed at its next start); the rows sealed, or None when
    there was nothing to do."""
    path = table_path(output, SESSIONS)
    if key.scheme != HMAC_SHA256 or not DeltaTable.isDeltaTable(spark, path):
        return None
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {path_ref(path)}").collect()}
    if SEALED_PROPERTY in properties:
        return None
    unsealed = (spark.read.format("delta").load(path).where(F.col("chain_seal").isNull())
                .select(*SEALED_FIELDS))
    seals = unsealed.mapInPandas(_sealer(key), schema="topic STRING, session STRING, chain_seal STRING")
    metrics = (DeltaTable.forPath(spark, path).alias("target")
               .merge(seals.alias("source"), "target.topic = source.topic AND target.session = source.session "
                                             "AND target.chain_seal IS NULL")
               .whenMatchedUpdate(set={"chain_seal": "source.chain_seal"})
               .execute())
    spark.sql(f"ALTER TABLE {path_ref(path)} SET TBLPROPERTIES ('{SEALED_PROPERTY}' = '{HMAC_SHA256}')")
    if metrics is None:
        return 0
    row = metrics.collect()
    return int(row[0]["num_updated_rows"]) if row and "num_updated_rows" in row[0].asDict() else 0


def _sealer(key: ChainKey):
    def seal(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
            yield pd.DataFrame({"topic": frame["topic"], "session": frame["session"],
                                "chain_seal": [session_seal(key, r) for r in rows]})
    return seal
