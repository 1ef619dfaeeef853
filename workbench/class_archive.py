"""Make the driver JVM's class-data-sharing archive (``make cds``; the stack must be up).

One process loads what real runs load: a small fleet through the whole pipeline under each engine,
into an ``s3a://`` output on the local endpoint, keyed, then a compaction of it.  Its JVM writes the
classes it loaded when it exits (``-XX:ArchiveClassesAtExit``), under a name of its own, renamed to
``<jars_dir>/cds/driver.jsa`` once the JVM has exited cleanly: a JVM that dies while writing leaves
no archive a run would take up.  Beside it, ``driver.key`` names the JDK and the jars it was made
with; the archive is made again when they change (``make jars`` rebuilt the engine's jar).

Usage: ``python -m workbench.class_archive [--force]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from reconstructor.spark.class_archive import ARCHIVE, archiving
from workbench import localstack


def archive_key(jars_dir: Path) -> str:
    """The JDK and the jars an archive is made with (names, sizes, times; the JVM checks the same
    and runs without an archive whose jars changed): a change means a new one."""
    import pyspark

    java = shutil.which("java")
    parts = [f"java {os.path.realpath(java) if java else '-'} {os.environ.get('JAVA_HOME', '')}"]
    for folder in (Path(pyspark.__file__).parent / "jars", jars_dir / "spark"):
        parts += sorted(f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in folder.glob("*.jar"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _train(jars_dir: Path, into: Path) -> None:
    """One run of the pipeline under each engine and a compaction, in a JVM that writes its
    loaded classes to ``into`` at its exit; returns once that JVM has exited."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark import SparkContext

    from reconstructor.settings import Settings, StatefulEngine
    from reconstructor.spark.builder import DRIVER_JAVA_OPTIONS, build_spark
    from reconstructor.spark.compaction import Compactor
    from reconstructor.spark.pipeline import start
    from workbench.fleet import FleetSpec, plan_fleet, publish
    from workbench.producer import SensorProducer
    from workbench.smoke import local_s3

    spec = FleetSpec(topic_prefix=f"cds{uuid.uuid4().hex[:8]}-sensor-", sensors=2, sessions_per_sensor=1,
                     rows=10, updates=10, rows_per_update=2, end_sessions=False, seed=5,
                     start=dt.datetime.now(dt.UTC) - dt.timedelta(hours=3))
    bootstrap = localstack.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                       for t in spec.topics()]).values():
        future.result(30)
    publish(SensorProducer(bootstrap), list(plan_fleet(spec)), {t: 2 for t in spec.topics()})
    spark = build_spark("class-archive", s3=local_s3(), jars_dir=jars_dir,
                        conf={DRIVER_JAVA_OPTIONS: archiving("", into), "spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    gateway = SparkContext._gateway
    root = f"s3a://{localstack.S3_BUCKET}/class-archive/{uuid.uuid4().hex[:8]}"
    for engine in StatefulEngine:
        out = f"{root}/{engine.value}"
        cfg = Settings(bootstrap_servers=bootstrap, topic_pattern=f"{spec.topic_prefix}[0-9]+", output=f"{out}/out",
                       checkpoint=f"{out}/chk", engine=engine, s3=local_s3(), chain_key="class-archive")
        running = start(spark, cfg)
        running.await_termination()
        running.stop()
    Compactor(spark, f"{root}/{StatefulEngine.PYTHON.value}/out", grace_s=0, min_files=1).run(vacuum=True)
    spark.stop()
    # The JVM exits at the end of its standard input, and writes the archive as it exits.
    gateway.proc.stdin.close()
    if gateway.proc.wait(timeout=600) != 0:
        raise RuntimeError(f"the archiving JVM exited with {gateway.proc.returncode}")


def make(jars_dir: Path, force: bool = False) -> Path:
    target = jars_dir / ARCHIVE
    key_file = target.with_suffix(".key")
    key = archive_key(jars_dir)
    if not force and target.is_file() and key_file.is_file() and key_file.read_text() == key:
        print(f"class archive up to date: {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        made = Path(work) / "driver.jsa"
        _train(jars_dir, made)
        if not made.is_file() or made.stat().st_size == 0:
            raise RuntimeError(f"the archiving JVM wrote no archive at {made}")
        key_file.unlink(missing_ok=True)
        os.replace(made, target)
        key_file.write_text(key)
    print(f"class archive made in {time.monotonic() - started:.0f}s: {target} "
          f"({target.stat().st_size / 2**20:.0f} MiB)")
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--force", action="store_true", help="make it again even if it is up to date")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    localstack.up()
    make(localstack.jars_dir(), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
