"""The output's last compaction, kept beside its tables (``_reconstructor/compaction.json``).

Kept as an object of its own, not a table property, so that recording it is no Delta commit that
could conflict with the stream's.  Written and read through Hadoop's file system, so it lives on
whatever file system the output does (S3A, local, ABFS, GCS).
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from pyspark.sql import SparkSession

from reconstructor.contract.tables import COMPACTION_MARK
from reconstructor.spark.jvm_gateway import jvm_of

log = logging.getLogger(__name__)


class CompactionMark:
    def __init__(self, spark: SparkSession, output: str):
        self.spark = spark
        self.location = f"{output.rstrip('/')}/{COMPACTION_MARK}"

    def _path(self):
        jvm = jvm_of(self.spark)
        path = jvm.org.apache.hadoop.fs.Path(self.location)
        return path, path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())

    def last(self) -> dt.datetime | None:
        """When the last compaction ended, or None (none recorded, or a record that cannot be read:
        a compaction then runs, which is always safe)."""
        try:
            path, fs = self._path()
            if not fs.exists(path):
                return None
            stream = fs.open(path)
            try:
                text = jvm_of(self.spark).org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
            finally:
                stream.close()
            return dt.datetime.fromisoformat(json.loads(text)["at"].replace("Z", "+00:00"))
        except Exception as exc:  # noqa: BLE001 - unreadable: compact now
            log.warning("could not read the last compaction's time at %s: %s", self.location, exc)
            return None

    def record(self, at: dt.datetime) -> None:
        """Record a compaction that ended ``at`` (a failure to record only makes the next run
        compact sooner)."""
        text = json.dumps({"at": at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")})
        try:
            path, fs = self._path()
            out = fs.create(path, True)
            try:
                out.write(bytearray(text.encode()))
            finally:
                out.close()
        except Exception as exc:  # noqa: BLE001 - the next run compacts sooner, no more
            log.warning("could not record the compaction's time at %s: %s", self.location, exc)
