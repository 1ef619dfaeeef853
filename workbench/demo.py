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
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from reconstructor.cli import commands, validate
from reconstructor.contract.tables import SESSIONS, TABLES, VIOLATIONS, table_path
from reconstructor.errors import ReconstructorError, UsageError
from workbench import localstack
from workbench.fleet import FleetSpec, Planned, inject, plan_fleet, publish
from workbench.producer import SensorProducer, encode, librdkafka_logging
from workbench.resync_responder import FleetSensors, ResyncResponder


def produce(args) -> int:
    bootstrap = args.bootstrap_servers or localstack.bootstrap_servers()
    fleet = produce_fleet(bootstrap, args, honor=args.honor_resync)
    print(f"produced {fleet.sent:,} messages to {args.sensors} topic(s) {args.topic_prefix}0..{args.sensors - 1}")
    if fleet.culprit is not None:
        print(f"injected {args.inject} into session {fleet.culprit.session} at seq {fleet.culprit.message['seq']}")
    if fleet.responder is not None:
        print(f"answering resync requests in {args.honor_resync} for {args.honor_for:g}s (Ctrl-C to stop) ...",
              flush=True)
        try:
            time.sleep(args.honor_for)
        except KeyboardInterrupt:
            pass
        fleet.finish()
        print(f"answered {fleet.responder.answered} of {fleet.responder.requests} resync request(s) with a "
              f"snapshot; sent {fleet.ended} end(s)")
    return 0


@dataclass
class ProducedFleet:
    """A fleet published, and when it honours resync requests: its sensors, answering in the
    background, with their sessions' ends held back until ``finish``."""

    sent: int
    culprit: Planned | None
    producer: SensorProducer
    sensors: FleetSensors | None = None
    responder: ResyncResponder | None = None
    held_ends: list[str] = field(default_factory=list)
    ended: int = 0

    def finish(self) -> int:
        """Wait until every request so far is answered, then end the sessions held open; how many
        messages that sent (the answers and the ends)."""
        if self.responder is None:
            return 0
        self.responder.settle()
        for session in self.held_ends:
            end = self.sensors.end(session)
            self.producer.send(end.topic, session, encode(end.message), self.sensors.sensors[session].partition)
        self.producer.flush()
        self.ended, self.held_ends = len(self.held_ends), []
        self.responder.close()
        return self.responder.answered + self.ended


def _open_sessions(args) -> int:
    """The sessions of each sensor left open: as asked, else none for ``produce`` and half (rounded
    down) for ``demo``, so that its tables show live sessions beside ended ones."""
    wanted = getattr(args, "open_sessions", None)
    if wanted is None:
        wanted = args.sessions // 2 if getattr(args, "command", None) == "demo" else 0
    if not 0 <= wanted <= args.sessions:
        raise UsageError(f"--open-sessions must be between 0 and --sessions ({args.sessions})")
    return wanted


def produce_fleet(bootstrap: str, args, honor: str | None = None) -> ProducedFleet:
    """Publish the fleet ``args`` describe; with ``honor`` (a resync topic), its sensors answer the
    requests there, and each session's end waits for ``ProducedFleet.finish``."""
    for name in ("sensors", "sessions", "rows", "partitions"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    if honor and args.inject == "after-end":
        raise UsageError("--inject after-end breaks a session after its end, which sensors that answer resync "
                         "requests hold back: drop the resync topic, or inject another fault")
    validate.broker_reachable(bootstrap, {})
    spec = FleetSpec(topic_prefix=args.topic_prefix, sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=args.rows, updates=args.updates,
                     rows_per_update=args.rows_per_update, resync_every=args.resync_every,
                     end_sessions=not args.no_end, open_sessions=_open_sessions(args), seed=args.seed)
    admin = AdminClient({"bootstrap.servers": bootstrap, **librdkafka_logging()})
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = {t: args.partitions for t in spec.topics()}
    if honor:
        wanted[honor] = 1
    new = [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in wanted.items() if t not in existing]
    for fut in admin.create_topics(new).values() if new else []:
        fut.result(30)
    planned = list(plan_fleet(spec))
    messages, culprit = inject(planned, args.inject) if args.inject else (planned, None)
    partitions = {t: args.partitions for t in spec.topics()}
    producer = SensorProducer(bootstrap)
    fleet = ProducedFleet(0, culprit, producer)
    if honor:
        # A sensor keeps its session open while it may be asked: the ends wait for ``finish``.
        ends = [p for p in messages if p.message.get("type") == "end"]
        messages = [p for p in messages if p.message.get("type") != "end"]
        fleet.sensors = FleetSensors.of(planned, messages, partitions)
        fleet.held_ends = [p.session for p in ends]
        fleet.responder = ResyncResponder(bootstrap, honor, fleet.sensors, producer).start()
    publish(producer, messages, partitions)
    fleet.sent = len(messages)
    return fleet


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
    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S")
    args.topic_prefix = f"demo-{run_id}-{args.topic_prefix}"
    bootstrap = localstack.bootstrap_servers()
    fleet = produce_fleet(bootstrap, args, honor=args.resync_topic)
    print(f"produced {fleet.sent:,} messages: {args.sensors} sensors x {args.sessions} sessions, "
          f"{args.rows} rows, {args.updates} updates each", flush=True)
    root = f"s3a://{localstack.S3_BUCKET}/demo/{run_id}"
    settings = write_demo_config(localstack.stack_dir() / "demo" / f"{run_id}.toml", {
        "bootstrap_servers": bootstrap, "topic_pattern": f"{args.topic_prefix}[0-9]+",
        "output": f"{root}/tables", "checkpoint": f"{root}/checkpoint", "compact_every": "off",
        "jars_dir": str(localstack.jars_dir().resolve()),
        **({"on_violation": args.on_violation} if getattr(args, "on_violation", None) else {}),
        **({"resync_topic": args.resync_topic} if args.resync_topic else {}),
        "s3": {"endpoint": localstack.s3_endpoint(), "region": localstack.S3_REGION,
               "access_key": localstack.S3_ACCESS_KEY, "secret_key": localstack.S3_SECRET_KEY,
               "path_style": True},
    })
    output = f"{root}/tables"
    print(f"reconstructing into {output} (settings: {settings}) ...", flush=True)
    commands.run(argparse.Namespace(config=str(settings)))  # as `reconstructor run --config` does
    if fleet.responder is not None:
        # The sensors answer the run's requests and end their sessions; the run reads what they sent.
        more = fleet.finish()
        print(f"the sensors answered {fleet.responder.answered} resync request(s) with a snapshot and "
              f"ended {fleet.ended} session(s); reconstructing what they sent ...", flush=True)
        if more:
            commands.run(argparse.Namespace(config=str(settings)))
    _summarise(output)
    reconstructor = command_prefix()
    config = shlex.quote(str(settings))
    topic = f"{args.topic_prefix}0"
    print(f"\ndone in {time.monotonic() - started:.0f}s; this run's settings are in {settings}. Next:")
    for why, command in (
        ("a session's table, read from the checkpoint",
         f"state --config {config} --topic {shlex.quote(topic)} --session {shlex.quote(topic + '-session-0')}"),
        ("every session in the topics judged by the rules, without Spark (exit 3 names each broken session)",
         f"check --config {config}"),
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
