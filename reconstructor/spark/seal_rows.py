"""Seal, once, what a keyed output holds from before its release sealed the fleet.

A keyed run of this release seals each ``sessions`` row it writes (``core.seal``) and records each
batch's fleet seal (``core.fleet_seal``).  An output an earlier release wrote has rows sealed under the
earlier domain (``SEAL_DOMAIN_V1``), or none, and no fleet seal.  So the first keyed ``run`` or
``replay`` of this release over it, seeing no fleet seal in the ``sessions`` history, seals every
such row under the current domain and records the fleet seal of the tables as they stand, in the
same commit (its ``userMetadata``), then sets ``SEALED_PROPERTY`` in a commit that records it too.
A row whose seal holds under neither domain is left as it is, for ``verify`` to name.  A crash
before the first commit leaves nothing done; the next start does it all again.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from reconstructor.contract.tables import SEALED_PROPERTY, SESSIONS, VIOLATIONS, table_path
from reconstructor.contract.writer import stamp_metadata
from reconstructor.core.chain import HMAC_SHA256, ChainKey
from reconstructor.core.fleet_seal import FleetSeal, TableSum, session_member
from reconstructor.core.seal import SEALED_FIELDS, seal_version, session_seal
from reconstructor.spark.catalog import path_ref
from reconstructor.spark.sinks.fleet_seal import newest_fleet, violations_sum
from reconstructor.spark.transactions import USER_METADATA, spark_like

__all__ = ["seal_sessions"]


def seal_sessions(spark: SparkSession, output: str, key: ChainKey) -> int | None:
    """Seal ``output``'s ``sessions`` rows and its fleet with ``key`` when no fleet seal is recorded
    yet (a table this run creates is sealed by its batches); the rows sealed, or None when there
    was nothing to do."""
    path = table_path(output, SESSIONS)
    if key.scheme != HMAC_SHA256 or not DeltaTable.isDeltaTable(spark, path):
        return None
    if newest_fleet(spark, path) is not None:
        return None
    members, resealed = [], []
    for row in spark.read.format("delta").load(path).select(*SEALED_FIELDS, "chain_seal").collect():
        r = row.asDict()
        seal = r["chain_seal"]
        if seal is None or seal_version(key, r) == 1:
            seal = session_seal(key, r)
            resealed.append((r["topic"], r["session"], r["chain_seal"], seal))
        members.append(session_member(seal))
    violations = table_path(output, VIOLATIONS)
    held = (violations_sum(spark.read.format("delta").load(violations), key)
            if DeltaTable.isDeltaTable(spark, violations) else TableSum())
    fleet = FleetSeal(TableSum.of(members), held).sealed(key)
    writer = spark_like(spark)
    writer.conf.set(USER_METADATA, stamp_metadata(fleet.to_json()))
    try:
        if resealed:
            seals = writer.createDataFrame(resealed, "topic STRING, session STRING, old STRING, chain_seal STRING")
            (DeltaTable.forPath(writer, path).alias("target")
             .merge(seals.alias("source"), "target.topic = source.topic AND target.session = source.session "
                                           "AND target.chain_seal <=> source.old")
             .whenMatchedUpdate(set={"chain_seal": "source.chain_seal"})
             .execute())
        writer.sql(f"ALTER TABLE {path_ref(path)} SET TBLPROPERTIES ('{SEALED_PROPERTY}' = '{HMAC_SHA256}')")
    finally:
        writer.conf.unset(USER_METADATA)
    return len(resealed)
