"""The workbench's commands: ``produce`` (the demo sensor fleet) and ``demo`` (the whole pipeline on
the local stack).  The CLI imports this module only when one of them runs."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from reconstructor.cli import commands
from reconstructor.cli import validate
from workbench import localstack
from workbench.fleet import FleetSpec, inject, plan_fleet, publish
from workbench.producer import SensorProducer, librdkafka_logging
from reconstructor.errors import ReconstructorError, UsageError
from reconstructor.contract.tables import SESSIONS, TABLES, VIOLATIONS, table_path


def produce(args) -> int:
    bootstrap = args.bootstrap_servers or localstack.bootstrap_servers()
    sent, culprit = produce_fleet(bootstrap, args)
    print(f"produced {sent:,} messages to {args.sensors} topic(s) {args.topic_prefix}0..{args.sensors - 1}")
    if culprit is not None:
        print(f"injected {args.inject} into session {culprit.session} at seq {culprit.message['seq']}")
    return 0


def produce_fleet(bootstrap: str, args):
    for name in ("sensors", "sessions", "rows", "partitions"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    validate.broker_reachable(bootstrap, {})
    spec = FleetSpec(topic_prefix=args.topic_prefix, sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=args.rows, updates=args.updates,
                     rows_per_update=args.rows_per_update, resync_every=args.resync_every,
                     end_sessions=not args.no_end, seed=args.seed)
    admin = AdminClient({"bootstrap.servers": bootstrap, **librdkafka_logging()})
    existing = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(t, num_partitions=args.partitions, replication_factor=1)
           for t in spec.topics() if t not in existing]
    for fut in admin.create_topics(new).values() if new else []:
        fut.result(30)
    messages = list(plan_fleet(spec))
    culprit = None
    if args.inject:
        messages, culprit = inject(messages, args.inject)
    publish(SensorProducer(bootstrap), messages, {t: args.partitions for t in spec.topics()})
    return len(messages), culprit


def demo(args) -> int:
    """The local stack up, a fleet produced, then ``reconstructor run`` on a config file written for
    this run: the commands printed at the end name that file, so each works as printed."""
    started = time.monotonic()
    print("starting the local stack (Kafka 127.0.0.1, S3 endpoint) ...", flush=True)
    try:
        for line in localstack.up():
            print(" ", line)
        localstack.ensure_jars("spark")
    except localstack.StackError as exc:
        raise ReconstructorError(str(exc)) from None
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d%H%M%S")
    args.topic_prefix = f"demo-{run_id}-{args.topic_prefix}"
    bootstrap = localstack.bootstrap_servers()
    sent, culprit = produce_fleet(bootstrap, args)
    print(f"produced {sent:,} messages: {args.sensors} sensors x {args.sessions} sessions, "
          f"{args.rows} rows, {args.updates} updates each", flush=True)
    root = f"s3a://{localstack.S3_BUCKET}/demo/{run_id}"
    settings = write_demo_config(localstack.stack_dir() / "demo" / f"{run_id}.toml", {
        "bootstrap_servers": bootstrap, "topic_pattern": f"{args.topic_prefix}[0-9]+",
        "output": f"{root}/tables", "checkpoint": f"{root}/checkpoint", "compact_every": "off",
        "jars_dir": str(localstack.jars_dir().resolve()),
        **({"on_violation": args.on_violation} if getattr(args, "on_violation", None) else {}),
        "s3": {"endpoint": localstack.s3_endpoint(), "region": localstack.S3_REGION,
               "access_key": localstack.S3_ACCESS_KEY, "secret_key": localstack.S3_SECRET_KEY,
               "path_style": True},
    })
    output = f"{root}/tables"
    print(f"reconstructing into {output} (settings: {settings}) ...", flush=True)
    commands.run(argparse.Namespace(config=str(settings)))  # as `reconstructor run --config` does
    _summarise(output)
    reconstructor = command_prefix()
    config = shlex.quote(str(settings))
    topic = f"{args.topic_prefix}0"
    print(f"\ndone in {time.monotonic() - started:.0f}s; this run's settings are in {settings}. Next:")
    for why, command in (
        ("a session's table, read from the checkpoint",
         f"state --config {config} --topic {shlex.quote(topic)} --session {shlex.quote(topic + '-session-0')}"),
        ("carry on: read what has reached the topics since, into the same tables",
         f"run --config {config}"),
        ("the effective configuration (secrets redacted)", f"config show --config {config}"),
    ):
        print(f"  # {why}\n  {reconstructor} {command}")
    return 0


def write_demo_config(path: Path, settings: dict) -> Path:
    """A TOML config file of ``settings`` (scalars, and one level of tables), secrets included:
    the local stack's fixed test credentials, which the printed commands need."""
    def value(v) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)

    lines = ["# A demo run on the local stack, written by `python -m workbench demo`."]
    lines += [f"{k} = {value(v)}" for k, v in settings.items() if not isinstance(v, dict)]
    for table, entries in ((k, v) for k, v in settings.items() if isinstance(v, dict)):
        lines += ["", f"[{table}]"] + [f"{k} = {value(v)}" for k, v in entries.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def command_prefix() -> str:
    """How to start the reconstructor from a shell: the console script beside this interpreter
    (``.venv/bin/reconstructor``), else this Python with ``-m reconstructor``."""
    script = Path(sys.executable).parent / "reconstructor"
    if os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m reconstructor"


def _summarise(output: str) -> None:
    """Row counts of the tables and one line per session, read with the run's SparkSession."""
    from pyspark.sql import SparkSession

    spark = SparkSession.active()
    print("\ntables:")
    for name in TABLES:
        print(f"  {name:<13} {spark.read.format('delta').load(table_path(output, name)).count():>8,} rows"
              f"  {table_path(output, name)}")
    print("\nsessions:")
    sessions = spark.read.format("delta").load(table_path(output, SESSIONS))
    for r in sessions.orderBy("topic", "session").collect():
        print(f"  {r.topic:<28} {r.session:<40} {r.status:<11} seq {r.first_seq}..{r.last_seq}"
              f"  rows {r.row_count}")
    violations = spark.read.format("delta").load(table_path(output, VIOLATIONS))
    if violations.head(1):
        print("\nviolations (first 10):")
        for r in violations.orderBy("topic", "partition", "offset").limit(10).collect():
            print(f"  {r.kind:<14} {r.topic}[{r.partition}]@{r.offset} session={r.session} "
                  f"expected_seq={r.expected_seq} found_seq={r.found_seq}: {r.detail[:80]}")
