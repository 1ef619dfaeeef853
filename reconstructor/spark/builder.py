"""The SparkSession builder: one place that builds the SparkSession with the jars, the state store
and the storage settings.  (Which engine runs the stateful step is ``spark.engines``'.)

Every entry point (CLI, jobs, tests) builds its SparkSession here so that a local run, a test and an
EMR step get the same RocksDB state store, Delta extensions and S3A wiring.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from reconstructor.jars import ENGINE_JAR, maven, packaged_engine_jar
from reconstructor.settings import S3Settings
from reconstructor.settings.secrets import is_secret
from reconstructor.spark.class_archive import class_archive, with_class_archive
from reconstructor.spark.jvm_gateway import jvm_of


def s3a_conf(s3: S3Settings) -> dict[str, str]:
    """How S3A reaches the object store the settings' ``[s3]`` names: an endpoint for S3-compatible
    stores (the local stack), none for AWS; keys unset fall back to the default AWS credential
    chain (env, profile, instance role)."""
    conf = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        # Fail fast against a dead endpoint instead of retrying for minutes.
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
    }
    if s3.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint
        # S3-compatible servers often answer "Expect: 100-continue" badly (the SDK then fails
        # an upload with status 100); plain PUTs work everywhere.
        conf["spark.hadoop.fs.s3a.connection.expect.continue"] = "false"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(s3.endpoint.startswith("https://")).lower()
    if s3.region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = s3.region
    if s3.path_style:
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
    if s3.access_key and s3.secret_key:
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        conf["spark.hadoop.fs.s3a.access.key"] = s3.access_key
        conf["spark.hadoop.fs.s3a.secret.key"] = s3.secret_key
    return conf


def spark_jars(jars_dir: str | os.PathLike | None) -> Path | None:
    """The Spark jars ``make jars`` (or ``reconstructor jars``) put into ``<jars_dir>/spark``.

    ``None`` when there are none: then a driver this process starts resolves them from Maven
    (``_jar_settings``), and on Databricks and EMR the platform provides Delta and the Kafka source.
    """
    if jars_dir is None:
        return None
    folder = Path(jars_dir) / "spark"
    return folder if folder.is_dir() and any(folder.glob("*.jar")) else None


def build_spark(
    app_name: str = "reconstructor",
    *,
    master: str | None = None,
    s3: S3Settings | None = None,
    jars_dir: str | os.PathLike | None = None,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
    s3a: bool = False,
) -> SparkSession:
    """Get or create the SparkSession with Delta, the RocksDB state store and S3A configured.

    ``master`` defaults to ``local[*]`` when no cluster manager is set (``spark-submit``, Databricks
    and EMR set it themselves).  ``jars_dir`` is the folder ``make jars`` fills (the ``jars_dir``
    setting); its ``spark/`` jars go on the driver and executor classpath (see ``spark_jars``).
    Without one, a driver this process starts gets its jars from Maven (``_jar_settings``); ``s3a``
    (an ``s3a://`` location is involved: ``uses_s3a``) adds S3A to them.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and not _launched_by_spark_submit():
        master = "local[*]"
    if master:
        builder = builder.master(master)
    settings = spark_settings(master, s3=s3, jars_dir=jars_dir, shuffle_partitions=shuffle_partitions,
                              conf=conf, s3a=s3a)
    launched = _launches_jvm()
    secrets = {key: value for key, value in settings.items() if launched and is_secret(key)}
    with ivy_settings_file(settings if launched else {}) as ivy:
        for key, value in {**settings, **ivy}.items():
            if key not in secrets:
                builder = builder.config(key, value)
        with secrets_file(secrets):
            spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("RECON_SPARK_LOG_LEVEL", "WARN"))
    return spark


def _launches_jvm() -> bool:
    """Whether ``getOrCreate`` will start the driver's JVM (through ``spark-submit``), rather than
    hand its settings over Py4J to one that runs already."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


@contextlib.contextmanager
def secrets_file(secrets: Mapping[str, str]) -> Iterator[None]:
    """Spark settings that hold secrets (``is_secret``: the S3 keys, a ``[spark]`` secret) handed to
    the JVM that ``getOrCreate`` starts in a properties file only this user can read, removed once
    it has started.

    pyspark hands every other setting to ``spark-submit`` as ``--conf key=value`` arguments, which
    three processes (two launcher scripts and the JVM) keep in their command lines, where any
    local user reads them (``ps``).  The file takes them to the JVM's SparkConf as the arguments
    would, so a cluster's executors get them from the driver as they get every setting; its path
    alone is an argument.  (Spark trims the ends of a value read from such a file.)"""
    if not secrets:
        yield
        return
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
    fd, path = tempfile.mkstemp(prefix="reconstructor-", suffix=".properties")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(java_properties(secrets))
        # --load-spark-defaults: spark-defaults.conf is read as without a properties file.
        os.environ["PYSPARK_SUBMIT_ARGS"] = (f"--properties-file {shlex.quote(path)} --load-spark-defaults "
                                             f"{submit_args or 'pyspark-shell'}")
        yield
    finally:
        if submit_args is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
        os.unlink(path)


def java_properties(settings: Mapping[str, str]) -> str:
    """``settings`` in the text of a Java properties file (UTF-8, as Spark reads one)."""
    def escaped(text: str, key: bool) -> str:
        out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace(
            "\t", "\\t").replace("\f", "\\f")
        if key:
            for c in "=: #!":
                out = out.replace(c, "\\" + c)
        return "\\" + out if out.startswith(" ") else out
    return "".join(f"{escaped(k, True)}={escaped(v, False)}\n" for k, v in settings.items())


def delta_on_classpath(spark: SparkSession) -> bool:
    """Whether Delta's classes are in the driver's JVM (decided on the classes, not on a folder:
    Databricks and EMR provide them with no jars folder)."""
    from py4j.java_gateway import JavaClass

    return isinstance(jvm_of(spark).io.delta.tables.DeltaTable, JavaClass)


def spark_settings(master: str | None, *, s3: S3Settings | None = None,
                   jars_dir: str | os.PathLike | None = None, shuffle_partitions: int | None = None,
                   conf: Mapping[str, str] | None = None, s3a: bool = False) -> dict[str, str]:
    """Every setting ``build_spark`` makes for ``master``, ``conf`` over the builder's own."""
    jars = _jar_settings(jars_dir, s3a=s3a, launches=not _launched_by_spark_submit(),
                         engine_jar=packaged_engine_jar())
    settings = {**_engine_settings(), **_sized_settings(master, shuffle_partitions), **_batch_settings(),
                **_loopback_settings(master), **jars,
                **(s3a_conf(s3) if s3 is not None else {}), **(conf or {})}
    for key in JAVA_OPTIONS:
        settings[key] = with_thread_stack(settings.get(key, ""))
    if not _launched_by_spark_submit():  # this builder starts the driver JVM
        settings[DRIVER_JAVA_OPTIONS] = with_class_archive(settings[DRIVER_JAVA_OPTIONS], class_archive(jars_dir))
    return settings


def _engine_settings() -> dict[str, str]:
    """Delta, the RocksDB state store, UTC, and Arrow between the JVM and the state function."""
    return {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Hours, Kafka timestamps and event times are all UTC.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Rows per Arrow batch to and from the state function's Python workers (Spark's default is
        # 10,000): fewer, larger batches cost pyspark less per row, and a group split over fewer
        # frames costs the state function less to gather.  A session's rows still arrive in
        # several frames when there are more.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    }


def _sized_settings(master: str | None, shuffle_partitions: int | None) -> dict[str, str]:
    """The task counts sized for the machine (local) or the cluster, and a local driver's heap."""
    heap = _local_driver_heap(master)
    return {
        **({"spark.driver.memory": heap} if heap else {}),
        "spark.sql.shuffle.partitions": str(shuffle_partitions or _default_shuffle_partitions()),
        # Delta rebuilds a table's snapshot state with this many tasks, several times per batch
        # (see ``_snapshot_partitions``); Delta's 50 is sized for big clusters.
        "spark.databricks.delta.snapshotPartitions": _snapshot_partitions(master),
        # Delta's VACUUM lists a table's files in exactly this many tasks (Spark's default is
        # 10,000, sized for discovering a huge table's partitions): see ``_listing_parallelism``.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": _listing_parallelism(master),
    }


def _batch_settings() -> dict[str, str]:
    """How each micro-batch runs: its cache, its generated code, and no progress bars."""
    return {
        # Each micro-batch is cached once and read a few times within seconds: compressing the
        # cache cost a third of the JVM's time in the stateful stage and saves nothing that matters.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # HotSpot never compiles a method of more than 8000 bytes of bytecode; a whole-stage
        # codegen method past that runs interpreted, slower than no whole-stage codegen at all.
        # A wide row schema makes the parse's methods that big.  (Spark's own advice for HotSpot.)
        "spark.sql.codegen.hugeMethodLimit": "8000",
        # Spark keeps 100 compiled classes of generated code; a batch's plans (the step, its cache,
        # the stats pass, the append, two MERGEs) generate about 140, so each batch evicted what
        # the next one needed and compiled it all again: a third of a live-fleet batch's time.
        "spark.sql.codegen.cache.maxEntries": "1000",
        # A scheduled job logs; progress bars belong to the CLI's own progress display.
        "spark.ui.showConsoleProgress": "false",
    }


def _loopback_settings(master: str | None) -> dict[str, str]:
    """The driver on loopback, for local mode or a standalone master on loopback."""
    if not (master and (master.startswith("local") or _loopback_master(master))):
        return {}
    # Local mode, or a standalone master on loopback (``workbench.standalone``), binds the driver
    # to loopback: no stray interface, nothing reachable from outside, and executors on this
    # machine reach the driver where the master told them to.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def _jar_settings(jars_dir: str | os.PathLike | None, *, s3a: bool, launches: bool,
                  engine_jar: Path | None) -> dict[str, str]:
    """The driver's and executors' JVM jars, by the one rule of ``docs/contract.md``:

    - a ``jars_dir`` that holds Spark jars (``spark_jars``) wins: its jars on the classpath;
    - else, when this process starts the driver JVM (``launches``), Spark resolves Delta, the Kafka
      source and, with ``s3a``, S3A from Maven (``spark.jars.packages``, cached by Ivy: only a first
      run downloads), leaving out what pyspark ships (``maven.EXCLUDES``), and the installed
      package's ``engine_jar`` goes on with ``spark.jars``;
    - else (``spark-submit``, Databricks, EMR) the platform's jars, and nothing is added.

    Delta's log on ``s3a://`` is written put-if-absent whenever the project's jar is on the classpath.
    """
    jars = spark_jars(jars_dir)
    if jars is not None:
        classpath = f"{Path(jars).resolve()}/*"
        settings = {"spark.driver.extraClassPath": classpath, "spark.executor.extraClassPath": classpath}
        if (jars / ENGINE_JAR).is_file():
            settings[S3A_LOG_STORE_KEY] = PUT_IF_ABSENT_LOG_STORE
        return settings
    if not launches:
        return {}
    settings = {PACKAGES_KEY: ",".join(maven.packages(s3a)), EXCLUDES_KEY: ",".join(maven.EXCLUDES)}
    if engine_jar is not None:
        settings[JARS_KEY] = str(engine_jar)
        settings[S3A_LOG_STORE_KEY] = PUT_IF_ABSENT_LOG_STORE
    return settings


def uses_s3a(*locations: str | None) -> bool:
    """Whether any of ``locations`` (the output, the checkpoint) is on ``s3a://``: only then does a
    driver resolved from Maven need S3A (its AWS SDK bundle is about 700 MB)."""
    return any(str(where).startswith("s3a://") for where in locations if where)


#: Spark's settings of the Maven route (``_jar_settings``).
PACKAGES_KEY = "spark.jars.packages"
EXCLUDES_KEY = "spark.jars.excludes"
IVY_SETTINGS_KEY = "spark.jars.ivySettings"
JARS_KEY = "spark.jars"


@contextlib.contextmanager
def ivy_settings_file(settings: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """While the driver JVM starts with ``settings`` that resolve packages, Ivy settings whose one
    resolver is Maven Central (``DEFAULT_ARTIFACT_REPOSITORY`` when set): the setting that names
    them; ``{}`` when ``settings`` resolve nothing or name Ivy settings of their own.

    Spark's default Ivy settings look in ``~/.m2`` first and take a module whose pom is there
    without its jar (Maven keeps the poms of versions it did not pick) from there, which fails the
    start; these leave ``~/.m2`` out.  ``spark.jars.repositories`` still adds repositories.
    """
    if PACKAGES_KEY not in settings or IVY_SETTINGS_KEY in settings:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="reconstructor-ivy-") as folder:
        path = Path(folder) / "ivysettings.xml"
        path.write_text(maven.ivy_settings(os.environ.get("DEFAULT_ARTIFACT_REPOSITORY") or maven.MAVEN_CENTRAL),
                        encoding="utf-8")
        yield {IVY_SETTINGS_KEY: str(path)}


# Delta's log store for ``s3a://`` tables.  Delta's default writes a commit file after checking that
# it is absent, which keeps out committers in its own JVM only: of two drivers committing one
# version, the later PUT replaces the earlier's commit.  This one writes it with ``If-None-Match: *``,
# so the second committer fails and Delta retries it at the next version, conflicts checked.
S3A_LOG_STORE_KEY = "spark.delta.logStore.s3a.impl"
PUT_IF_ABSENT_LOG_STORE = "reconstructor.delta.PutIfAbsentLogStore"


# The driver's and the executors' Java options, where the thread stack is set.
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
JAVA_OPTIONS = (DRIVER_JAVA_OPTIONS, "spark.executor.extraJavaOptions")
# Spark's ``schema_of_variant`` recurses once per nesting level of a value: JSON nested about 900
# deep (Jackson allows 1000) overflowed the default 1 MB thread stack of the task running the parse
# and failed the query.  8 MB holds the deepest value Jackson accepts.  Platforms that start the
# JVMs before this builder runs (Databricks) take the same option in their cluster's Spark config.
THREAD_STACK = "-Xss8m"


def with_thread_stack(options: str) -> str:
    """Java ``options`` with ``THREAD_STACK`` unless they set a thread stack size already."""
    return options if "-Xss" in options else f"{options} {THREAD_STACK}".strip()


def _launched_by_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_SUBMIT_OPTS" in os.environ or (
        "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""))


def _loopback_master(master: str) -> bool:
    """``spark://127.0.0.1:7077`` or ``spark://localhost:7077`` (every host of an HA list)."""
    if not master.startswith("spark://"):
        return False
    hosts = [h.rsplit(":", 1)[0] for h in master[len("spark://"):].split(",")]
    return all(h in ("127.0.0.1", "localhost") for h in hosts)


def _snapshot_partitions(master: str | None) -> str:
    """Tasks per Delta snapshot state reconstruction.

    Delta 4.4 rebuilds the previous version's state of every table in every batch (the
    idempotent-write check reads the table's transaction ids from it, and a MERGE lists the
    table's files from it): about six small jobs per batch for the three tables.  In local mode
    the tasks share the driver's cores with the batch itself, so one task each is cheaper than
    several (docs/performance-log.md has the measurement); a cluster keeps one per driver core
    for the large ``row_changes`` log.
    """
    if master is not None and master.startswith("local"):
        return "1"
    return str(_driver_cores())


def _listing_parallelism(master: str | None) -> str:
    """Tasks per file listing of Delta's VACUUM.

    Delta 4.4 repartitions its listing to Spark's partition-discovery parallelism whatever the
    table's size: 10,000 tasks per listing, tens of thousands per VACUUM, which the in-stream
    compactor runs at a run's start, so a scheduled run's first batches waited minutes for the
    cores.  Locally two tasks per core list the tables' hour directories well; a cluster keeps
    more for a long-lived table's thousands of hours (set ``[spark]`` to change either).
    """
    if master is not None and (master.startswith("local") or _loopback_master(master)):
        return str(2 * _driver_cores())
    return "200"


#: The largest heap ``local_driver_memory`` gives a local driver, in GiB.
LOCAL_DRIVER_MEMORY_CAP_GIB = 16
#: Where a container's memory limit is read: cgroup v2, then v1.
CGROUP_MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def local_driver_memory(machine_bytes: int | None) -> str | None:
    """``spark.driver.memory`` for a local-mode driver on a machine of ``machine_bytes``: a quarter
    of it in whole GiB, at least Spark's own 1 GiB and at most ``LOCAL_DRIVER_MEMORY_CAP_GIB``;
    None (Spark's default) when the memory is unknown.

    In local mode the driver's heap holds the executors too: the batch cache, the MERGEs' joins
    and the state store's reads.  Spark's 1 GiB ran a fleet of 8,000 sessions out of memory on a
    machine of 24 GiB (docs/performance-log.md has the measurement); a quarter leaves the rest to
    the Python workers, RocksDB's memory outside the heap, and the machine's other work.
    """
    if not machine_bytes:
        return None
    gib = min(max(machine_bytes // 4 // 1024 ** 3, 1), LOCAL_DRIVER_MEMORY_CAP_GIB)
    return f"{gib}g"


def machine_memory(physical: int | None = None, limits=CGROUP_MEMORY_LIMITS) -> int | None:
    """This machine's memory in bytes, or its container's limit when lower; None if unknown."""
    if physical is None:
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, OSError, ValueError):
            physical = None
    total = physical
    for path in limits:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) is no limit; v1's "no limit" is a number past any machine
            total = min(total, int(text)) if total else int(text)
    return total


def _local_driver_heap(master: str | None) -> str | None:
    """``local_driver_memory`` for a local driver whose JVM this process will launch; None for a
    cluster, or a driver ``spark-submit`` launched (its heap is set already)."""
    if master is None or not master.startswith("local") or _launched_by_spark_submit():
        return None
    return local_driver_memory(machine_memory())


def _default_shuffle_partitions() -> int:
    # The stateful step's state is partitioned by shuffle partition: one per core keeps every core
    # busy, and each more is one more RocksDB instance and Python task per batch, a fixed cost
    # that buys nothing once the cores are busy.  A checkpoint keeps the number it was created
    # with; set ``shuffle_partitions`` to the cluster's cores.
    return _driver_cores()


def _driver_cores() -> int:
    """This machine's cores, at least 2: the default for settings sized one per core."""
    return max(2, os.cpu_count() or 2)
