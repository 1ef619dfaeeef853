"""The driver JVM's class-data-sharing archive: a local driver that starts with it maps the classes
an earlier run loaded (Spark's, Delta's, the Kafka source's, S3A's) instead of loading and
verifying each again, which is most of a scheduled run's start and of its first batch.

The archive is HotSpot's dynamic AppCDS archive (``-XX:ArchiveClassesAtExit``, JDK 13 and later),
made once by a run that loads what a real run loads (``make cds``: ``workbench.class_archive``) and
kept at ``<jars_dir>/cds/driver.jsa``.  It belongs to the JDK and the classpath it was made with;
the JVM checks both when it starts and, on any difference, runs without it, silently.  A driver
started by ``spark-submit`` (Databricks, EMR) is not this builder's to start: the archive is not
used there.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Where ``make cds`` keeps the archive, under ``jars_dir``.
ARCHIVE = Path("cds") / "driver.jsa"
#: Without these, a JVM that cannot use the archive says so on every start.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: Java options that already decide about class data sharing: the archive is then not added.
_DECIDED = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")


def class_archive(jars_dir: str | os.PathLike | None) -> Path | None:
    """The archive ``make cds`` made under ``jars_dir``, or None."""
    if jars_dir is None:
        return None
    archive = Path(jars_dir) / ARCHIVE
    return archive.resolve() if archive.is_file() else None


def with_class_archive(options: str, archive: Path | None) -> str:
    """Java ``options`` that start the JVM with ``archive``, unless they decide otherwise."""
    if archive is None or any(d in options for d in _DECIDED):
        return options
    return f"{options} -XX:SharedArchiveFile={archive} {QUIET}".strip()


def archiving(options: str, into: Path) -> str:
    """Java ``options`` that write the classes the JVM loaded to ``into`` when it exits."""
    return f"{options} -XX:ArchiveClassesAtExit={into} {QUIET}".strip()
