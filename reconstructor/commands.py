"""What each CLI command does, over the library modules (jobs call these too)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import time
import uuid

from reconstructor import validate
from reconstructor.config import Config
from reconstructor.errors import ReconstructorError, UsageError, error_line
from reconstructor.pipeline import PipelineSettings, await_query, duration_ms

log = logging.getLogger("reconstructor")


def _cfg(args) -> Config:
    from reconstructor.cli import effective_config

    return effective_config(args)


def _spark(cfg: Config, app: str):
    from reconstructor.spark import logs
    from reconstructor.spark.session import S3Settings, build_spark

    verbose = logging.getLogger().isEnabledFor(logging.INFO)  # -v
    validate.s3_endpoint_reachable(cfg.s3.endpoint, cfg.output, cfg.checkpoint)
    s3 = S3Settings(cfg.s3.endpoint, cfg.s3.region, cfg.s3.access_key, cfg.s3.secret_key,
                    bool(cfg.s3.path_style))
    logs.quiet_python(verbose)
    with logs.jvm_output(verbose):
        spark = build_spark(app, master=cfg.master, s3=s3, shuffle_partitions=cfg.shuffle_partitions,
                            conf=logs.driver_conf(cfg.spark, verbose))
    logs.set_engine_level(spark, verbose)
    return spark


def _validated_stream(cfg: Config) -> None:
    validate.require(cfg, "bootstrap_servers", "topic_pattern", "output", "checkpoint")
    validate.topic_pattern(cfg.topic_pattern)
    validate.starting_offsets(cfg.starting_offsets)
    validate.trigger(cfg.trigger)
    validate.duration("--session-timeout", cfg.session_timeout)
    validate.duration("--state-retention", cfg.state_retention)
    if duration_ms(cfg.state_retention) <= duration_ms(cfg.session_timeout):
        raise UsageError(f"--state-retention {cfg.state_retention!r} must be longer than "
                         f"--session-timeout {cfg.session_timeout!r} (a timed-out session keeps its "
                         "state until the retention has passed)")
    if cfg.compact_every not in (None, "off"):
        validate.duration("--compact-every", cfg.compact_every)
    validate.duration("--grace", cfg.compact_grace, allow_zero=True)
    validate.vacuum_retention(cfg.vacuum_retention, cfg.unsafe_vacuum_retention)
    validate.row_schema(cfg.row_schema)
    validate.local_output_writable(cfg.output)
    validate.local_output_writable(cfg.checkpoint, "--checkpoint")


def _settings(cfg: Config, **over) -> PipelineSettings:
    s = PipelineSettings(
        bootstrap_servers=cfg.bootstrap_servers, topic_pattern=cfg.topic_pattern, output=cfg.output,
        checkpoint=cfg.checkpoint, trigger=cfg.trigger, starting_offsets=cfg.starting_offsets,
        max_offsets_per_trigger=cfg.max_offsets_per_trigger, session_timeout=cfg.session_timeout,
        state_retention=cfg.state_retention,
        await_snapshot=cfg.await_snapshot, row_schema=cfg.row_schema, kafka_options=dict(cfg.kafka),
        compact_every=None if cfg.compact_every in (None, "off") else cfg.compact_every,
        compact_grace=cfg.compact_grace, vacuum_retention=cfg.vacuum_retention,
    )
    for k, v in over.items():
        setattr(s, k, v)
    return s


def _stream(cfg: Config, settings: PipelineSettings, app: str, progress=None) -> int:
    from reconstructor.pipeline import start

    validate.broker_reachable(cfg.bootstrap_servers, cfg.kafka)
    spark = _spark(cfg, app)
    try:
        query = start(spark, settings)
        await_query(query, on_progress=progress or _log_progress)
    finally:
        from reconstructor.pipeline import stop_background

        stop_background()
    return 0


def _log_progress(p: dict) -> None:
    rows = p.get("numInputRows", 0)
    secs = (p.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    print(f"batch {p.get('batchId')}: {rows:,} records in {secs:.1f}s", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------


def run(args) -> int:
    cfg = _cfg(args)
    _validated_stream(cfg)
    return _stream(cfg, _settings(cfg), "reconstructor-run")


def config_show(args) -> int:
    cfg = _cfg(args)
    sys.stdout.write(cfg.to_toml())
    return 0


def replay(args) -> int:
    cfg = _cfg(args)
    if args.await_snapshot:
        cfg.await_snapshot = True
    # A replay never moves another query's checkpoint: it takes only a --checkpoint flag (one with
    # no committed batch, checked before the query starts), never the configured one.
    configured = _cfg(argparse.Namespace(**{**vars(args), "checkpoint": None})).checkpoint
    cfg.checkpoint = args.checkpoint
    if not cfg.checkpoint and cfg.output:
        cfg.checkpoint = f"{cfg.output.rstrip('/')}/_checkpoints/replay-{uuid.uuid4().hex[:8]}"
    validate.require(cfg, "bootstrap_servers", "topic_pattern", "output", "checkpoint")
    if args.from_offsets:
        offsets = validate.starting_offsets(args.from_offsets)
    elif args.from_timestamp:
        offsets = _offsets_for_timestamp(cfg, args.from_timestamp)
    else:
        offsets = _offsets_from_last_snapshot(cfg)
        # Sessions whose snapshot lies after their partition's start see updates first.
        cfg.await_snapshot = True
    cfg.starting_offsets = offsets
    cfg.trigger = "available-now"
    _validated_stream(cfg)
    left_alone = (f"; the configured checkpoint {configured} is left alone"
                  if configured and configured != cfg.checkpoint else "")
    print(f"replaying from {offsets} into {cfg.output} (checkpoint {cfg.checkpoint}{left_alone})",
          file=sys.stderr)
    from reconstructor.progress import CatchUpProgress

    return _stream(cfg, _settings(cfg, dedupe_changes=True), "reconstructor-replay",
                   progress=CatchUpProgress(starting=offsets))


def _offsets_for_timestamp(cfg: Config, ts: str) -> str:
    try:
        when = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--from-timestamp {ts!r} is not an RFC 3339 timestamp") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    from confluent_kafka import Consumer, TopicPartition

    from reconstructor.kafka_admin import client_or_usage_error, librdkafka_settings

    parts = [TopicPartition(t, p, int(when.timestamp() * 1000))
             for t, ps in _partitions(cfg).items() for p in ps]
    if not parts:
        raise UsageError(f"no topic matches --topic-pattern {cfg.topic_pattern!r}")
    consumer = client_or_usage_error(Consumer, {
        **librdkafka_settings(cfg.kafka), "bootstrap.servers": cfg.bootstrap_servers,
        "group.id": "reconstructor-replay", "enable.auto.commit": False})
    try:
        found = consumer.offsets_for_times(parts, timeout=10)
    finally:
        consumer.close()
    offsets: dict[str, dict[str, int]] = {}
    for tp in found:
        offsets.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset if tp.offset >= 0 else -1
    return json.dumps(offsets, sort_keys=True)


def _offsets_from_last_snapshot(cfg: Config) -> str:
    """Per partition, the smallest snapshot offset of its open sessions (from the sessions table).

    Partitions of matching topics with no open session there start at the earliest offset: their
    sessions never reached a table (or ended), and a replay is idempotent."""
    validate.require(cfg, "output")
    spark = _spark(cfg, "reconstructor-replay-plan")
    from reconstructor.spark.sinks import SESSIONS, table_path

    try:
        rows = (spark.read.format("delta").load(table_path(cfg.output, SESSIONS))
                .where("status = 'open'").groupBy("topic", "partition")
                .agg({"snapshot_offset": "min"}).collect())
    except Exception as exc:
        raise ReconstructorError(f"cannot read the sessions table under {cfg.output}: "
                                 f"{error_line(exc)}") from None
    offsets: dict[str, dict[str, int]] = {
        topic: {str(p): -2 for p in parts} for topic, parts in _partitions(cfg).items()}
    for r in rows:
        offsets.setdefault(r["topic"], {})[str(r["partition"])] = int(r["min(snapshot_offset)"])
    if not offsets:
        raise ReconstructorError(f"no topic matches --topic-pattern {cfg.topic_pattern!r}")
    return json.dumps(offsets, sort_keys=True)


def _partitions(cfg: Config) -> dict[str, list[int]]:
    import re

    from reconstructor.kafka_admin import broker_metadata, librdkafka_settings

    settings = librdkafka_settings(cfg.kafka)  # the stream's security, before any connection
    validate.broker_reachable(cfg.bootstrap_servers, cfg.kafka)
    pattern = re.compile(f"^(?:{cfg.topic_pattern})$")
    meta = broker_metadata(cfg.bootstrap_servers, 10, settings)
    return {t: sorted(tm.partitions) for t, tm in meta.topics.items() if pattern.match(t)}


def compact(args) -> int:
    cfg = _cfg(args)
    validate.require(cfg, "output")
    validate.duration("--grace", cfg.compact_grace, allow_zero=True)
    validate.vacuum_retention(cfg.vacuum_retention, cfg.unsafe_vacuum_retention)
    from reconstructor.spark.compaction import Compactor

    spark = _spark(cfg, "reconstructor-compact")
    report = Compactor(spark, cfg.output, grace_s=duration_ms(cfg.compact_grace) / 1000,
                       retention_hours=duration_ms(cfg.vacuum_retention) / 3_600_000,
                       min_files=args.min_files).run()
    for line in report.lines():
        print(line)
    return 0


def state(args) -> int:
    cfg = _cfg(args)
    validate.require(cfg, "checkpoint")
    schema = validate.row_schema(cfg.row_schema)
    from reconstructor.spark.state_reader import read_session_state

    spark = _spark(cfg, "reconstructor-state")
    found = read_session_state(spark, cfg.checkpoint, args.topic, args.session, schema)
    if found is None:
        raise ReconstructorError(f"no state for session {args.session!r} of topic {args.topic!r} "
                                 f"in {cfg.checkpoint}")
    info, table = found
    if args.format == "json":
        rows = json.loads(table.reset_index().to_json(orient="records", date_format="iso"))
        print(json.dumps({"session": info, "rows": rows}, indent=2, default=str))
    else:
        print(" ".join(f"{k}={v}" for k, v in info.items()))
        print(table.to_string() if len(table) else "(empty table)")
    return 0


def produce(args) -> int:
    from reconstructor import localstack

    bootstrap = args.bootstrap_servers or localstack.bootstrap_servers()
    sent, culprit = produce_fleet(bootstrap, args)
    print(f"produced {sent:,} messages to {args.sensors} topic(s) {args.topic_prefix}0..{args.sensors - 1}")
    if culprit is not None:
        print(f"injected {args.inject} into session {culprit.session} at seq {culprit.message['seq']}")
    return 0


def produce_fleet(bootstrap: str, args):
    from confluent_kafka.admin import AdminClient, NewTopic

    from reconstructor.fleet import FleetSpec, inject, plan_fleet, publish
    from reconstructor.producer import SensorProducer

    for name in ("sensors", "sessions", "rows", "partitions"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    validate.broker_reachable(bootstrap, {})
    spec = FleetSpec(topic_prefix=args.topic_prefix, sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=args.rows, updates=args.updates,
                     rows_per_update=args.rows_per_update, resync_every=args.resync_every,
                     end_sessions=not args.no_end, seed=args.seed)
    admin = AdminClient({"bootstrap.servers": bootstrap})
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
    from reconstructor import localstack
    from reconstructor.pipeline import start

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
