"""The workbench's commands: ``produce`` (the demo sensor fleet) and ``demo`` (the whole pipeline on
the local stack).  The CLI imports this module only when one of them runs."""

from __future__ import annotations

import datetime as dt
import time

from confluent_kafka.admin import AdminClient, NewTopic

from reconstructor import validate
from reconstructor.commands import _log_progress, _settings, _spark
from reconstructor.config import Config
from reconstructor.devstack import localstack
from reconstructor.devstack.fleet import FleetSpec, inject, plan_fleet, publish
from reconstructor.devstack.producer import SensorProducer, librdkafka_logging
from reconstructor.errors import ReconstructorError, UsageError
from reconstructor.pipeline import await_query, start


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
    cfg = Config(bootstrap_servers=bootstrap, topic_pattern=f"{args.topic_prefix}[0-9]+",
                 output=f"{root}/tables", checkpoint=f"{root}/checkpoint", compact_every=None)
    cfg.s3.endpoint, cfg.s3.region = localstack.s3_endpoint(), localstack.S3_REGION
    cfg.s3.access_key, cfg.s3.secret_key = localstack.S3_ACCESS_KEY, localstack.S3_SECRET_KEY
    cfg.s3.path_style = True
    spark = _spark(cfg, "reconstructor-demo")
    print(f"reconstructing into {cfg.output} ...", flush=True)
    await_query(start(spark, _settings(cfg)), on_progress=_log_progress)
    from reconstructor.spark.sinks import TABLES, table_path

    print("\ntables:")
    for name in TABLES:
        print(f"  {name:<13} {spark.read.format('delta').load(table_path(cfg.output, name)).count():>8,} rows"
              f"  {table_path(cfg.output, name)}")
    print("\nsessions:")
    sessions = spark.read.format("delta").load(table_path(cfg.output, "sessions"))
    for r in sessions.orderBy("topic", "session").collect():
        print(f"  {r.topic:<28} {r.session:<40} {r.status:<9} seq {r.first_seq}..{r.last_seq}"
              f"  rows {r.row_count}")
    print(f"\ndone in {time.monotonic() - started:.0f}s; inspect with:\n"
          f"  .venv/bin/reconstructor state --checkpoint {cfg.checkpoint} --topic {args.topic_prefix}0 "
          f"--session {args.topic_prefix}0-session-0")
    return 0
