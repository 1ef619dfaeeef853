"""Whether a chain key is the output's: one stored message's digest recomputed with it.

An output's change log is chained under one key, or under none: a run or replay that went on with
another would chain plain digests onto HMACs (or HMACs of another key onto them), and the log
would verify under no key at all.  So ``run`` and ``replay`` check the key they are given before
they read a record: the newest ``hour`` partition of ``row_changes`` that holds a chained message
gives one message, whose digest's scheme must be the key's and, for an HMAC, whose digest the key
must give again (``chain_check.ChainCheck``, as ``verify`` recomputes it).  No fingerprint of the
key is stored beside the tables: the digests are the only check of it there is, and any other
would let a weak key be guessed offline just the same.

The read is small: the table's log, then the rows of one message, found through the ``hour``
partition and the coordinates' file statistics.  Only outputs whose writer lease is kept (local
paths, ``s3a://``, ``s3://``) are checked, with the ``[s3]`` settings as ``verify`` reads them.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from reconstructor.audit.chain_check import ChainCheck, row_kinds
from reconstructor.audit.delta_tables import OutputTables, plain_strings, sql_text
from reconstructor.audit.fold import row_columns
from reconstructor.contract.tables import ROW_CHANGES
from reconstructor.core.chain import HMAC_SHA256, SHA256, ChainKey, scheme_of
from reconstructor.errors import ReconstructorError, UsageError

__all__ = ["checked_outputs", "newest_chained_message", "require_output_key"]

_KEY_SETTINGS = "--chain-key, RECON_CHAIN_KEY or chain_key in the config file"


def checked_outputs(output: str) -> bool:
    """Whether ``output`` is on a file system the check reads (those that keep a writer lease)."""
    return urlparse(output).scheme in ("", "file", "s3", "s3a")


def newest_chained_message(tables: OutputTables) -> pa.Table | None:
    """The rows of one chained message of the newest ``hour`` partition that holds one, or None
    when ``row_changes`` does not exist or holds no digest."""
    try:
        table = tables.table(ROW_CHANGES)
    except ReconstructorError as exc:
        if isinstance(exc.__cause__, TableNotFoundError):
            return None
        raise
    if "chain_digest" not in {f.name for f in table.schema().fields}:
        return None  # written before the chain existed, and not run since
    for hour in sorted({p["hour"] for p in table.partitions()}, reverse=True):
        at = f"hour = {sql_text(hour)}"
        found = _query(table, f'SELECT topic, "partition", "offset", chain_digest FROM t WHERE {at} '
                              "AND chain_digest IS NOT NULL AND chain_digest <> '' LIMIT 1").to_pylist()
        if found:
            (m,) = found
            return _query(table, f"SELECT * FROM t WHERE {at} AND topic = {sql_text(m['topic'])} "
                                 f'AND "partition" = {int(m["partition"])} AND "offset" = {int(m["offset"])} '
                                 f"AND chain_digest = {sql_text(m['chain_digest'])}")
    return None


def _query(table: DeltaTable, sql: str) -> pa.Table:
    return plain_strings(pa.table(QueryBuilder().register("t", table).execute(sql)))


def require_output_key(tables: OutputTables, key: ChainKey) -> None:
    """Raise ``UsageError`` (one line naming the output's scheme, never a key) unless ``key`` is
    the one the output's change log was chained with; an output with no chained message takes any."""
    rows = newest_chained_message(tables)
    if rows is None or not rows.num_rows:
        return
    # A message's rows once each (a change logged twice is verify's to name, not a key's fault).
    rows = _once_each(rows)
    stored = scheme_of(rows["chain_digest"][0].as_py())
    where = f"the output {tables.output} is chained with"
    if stored == HMAC_SHA256 and key.scheme != HMAC_SHA256:
        raise UsageError(f"{where} {HMAC_SHA256}: give the output's chain key ({_KEY_SETTINGS}), or replay into "
                         "a new output to rotate it")
    if stored == SHA256 and key.scheme != SHA256:
        raise UsageError(f"{where} {SHA256}, without a key: run without a chain key, or replay into a new output "
                         "to chain under one")
    if stored not in (SHA256, HMAC_SHA256):
        raise UsageError(f"{where} {stored}, which this release does not make: replay into a new output")
    if stored == HMAC_SHA256:
        kinds = row_kinds(rows.schema, row_columns(rows.schema.names))
        if ChainCheck(kinds, key).add(rows) is not None:
            raise UsageError(f"{where} {HMAC_SHA256} under another key: give the output's chain key "
                             f"({_KEY_SETTINGS}), or replay into a new output to rotate it")


def _once_each(rows: pa.Table) -> pa.Table:
    seen, keep = set(), []
    for key in zip(rows["row_pos"].to_pylist(), rows["row_id"].to_pylist()):
        keep.append(key not in seen)
        seen.add(key)
    return rows.filter(pa.array(keep))
