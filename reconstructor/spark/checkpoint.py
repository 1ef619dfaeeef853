"""What a streaming checkpoint holds, read through Hadoop's file system (local paths and s3a://)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from reconstructor.contract.writer import OUTPUT_FILE, CheckpointState, last_batch, query_id_of
from reconstructor.spark.jvm_gateway import jvm_of


def checkpoint_state(spark: SparkSession, location: str) -> CheckpointState:
    """The query id Spark keeps in ``metadata`` and the last batch in ``commits/`` and in
    ``offsets/``, without starting a query (a new or absent checkpoint has none)."""
    jvm = jvm_of(spark)
    Path = jvm.org.apache.hadoop.fs.Path
    root = Path(location)
    fs = root.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    query_id = None
    metadata = Path(root, "metadata")
    if fs.exists(metadata):
        stream = fs.open(metadata)
        try:
            query_id = query_id_of(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()
    output = read_checkpoint_file(spark, location, OUTPUT_FILE) if fs.exists(root) else None
    return CheckpointState(location, query_id, last_batch_in(spark, location, "commits"),
                           output.strip() if output else None, last_batch_in(spark, location, "offsets"))


def last_batch_in(spark: SparkSession, location: str, log: str) -> int | None:
    """The newest batch id in one of the checkpoint's logs (``commits``, ``offsets``), else None."""
    jvm = jvm_of(spark)
    folder = jvm.org.apache.hadoop.fs.Path(jvm.org.apache.hadoop.fs.Path(location), log)
    fs = folder.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    if not fs.exists(folder):
        return None
    return last_batch([s.getPath().getName() for s in fs.listStatus(folder)])


def record_output(spark: SparkSession, checkpoint: CheckpointState, output: str) -> None:
    """Record ``output`` in a checkpoint that records none yet (a new one, or one an earlier release
    wrote, which the writer claim has just let write it)."""
    if checkpoint.output is None:
        write_checkpoint_file(spark, checkpoint.location, OUTPUT_FILE, output.rstrip("/") + "\n")


def read_checkpoint_file(spark: SparkSession, location: str, relative: str) -> str | None:
    """The text of ``location/relative`` in a checkpoint (``offsets/7``, ``sources/0/0``) or a
    table (``_delta_log/<version>.json``), None when it is absent."""
    jvm = jvm_of(spark)
    path = jvm.org.apache.hadoop.fs.Path(jvm.org.apache.hadoop.fs.Path(location), relative)
    fs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def checkpoint_file_modified(spark: SparkSession, location: str, relative: str) -> int | None:
    """When ``location/relative`` was last written, in epoch milliseconds by the storage's clock;
    None when it is absent."""
    jvm = jvm_of(spark)
    path = jvm.org.apache.hadoop.fs.Path(jvm.org.apache.hadoop.fs.Path(location), relative)
    fs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    if not fs.exists(path):
        return None
    return int(fs.getFileStatus(path).getModificationTime())


def write_checkpoint_file(spark: SparkSession, location: str, relative: str, text: str) -> None:
    """Write ``text`` to ``location/relative``, replacing it atomically, the way Spark writes its
    own checkpoint files (``CheckpointFileManager.createAtomic``): a crash leaves the old file or
    the new one, never half of one.  (The reconstructor's own files, beside Spark's, which Spark
    ignores.)"""
    jvm = jvm_of(spark)
    path = jvm.org.apache.hadoop.fs.Path(jvm.org.apache.hadoop.fs.Path(location), relative)
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        path.getParent(), spark._jsparkSession.sessionState().newHadoopConf())
    if not manager.exists(path.getParent()):
        manager.mkdirs(path.getParent())
    stream = manager.createAtomic(path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    except BaseException:
        stream.cancel()
        raise
    stream.close()
