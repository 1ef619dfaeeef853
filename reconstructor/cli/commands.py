"""What each CLI command does, over the library modules (jobs call these too).

The modules that drive Spark (the pipeline, compaction, the state reader) load pyspark and Delta,
so each is imported in the command that needs it: ``config show``, ``--help`` and the usage errors
stay quick.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING

from reconstructor.cli import validate
from reconstructor.cli.progress import CatchUpProgress, RecordProgress, batch_line
from reconstructor.core.timestamps import parse_rfc3339
from reconstructor.errors import ReconstructorError, UsageError
from reconstructor.failures import explain
from reconstructor.metrics.export import MetricsExport
from reconstructor.settings import AVAILABLE_NOW, Settings, default_jars_dir, from_args
from reconstructor.spark.restarts import Restarts, StopSignals, attempts_for, engine_ignores_sigterm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from reconstructor.core.step_spec import StepStart

log = logging.getLogger("reconstructor")


def _spark(cfg: Settings, app: str, signals: StopSignals | None = None) -> SparkSession:
    """The SparkSession; with ``signals``, their handlers are installed again once it started (the
    SparkContext sets a SIGINT handler of its own)."""
    return SparkStart(cfg, app).result(signals)


class SparkStart:
    """The SparkSession, started in a thread of its own (``result`` waits for it).

    The driver JVM's start is most of what a scheduled run costs before its first record, and needs
    none of the checks and none of the writer lease that come before a stream: those go on beside
    it.  While the JVM starts, this process's stdout and stderr are the JVM's (``logs.jvm_output``),
    so a failure beside it waits for the start (``wait``) before its line is printed.
    """

    def __init__(self, cfg: Settings, app: str):
        from reconstructor.spark import logs

        validate.classic_spark(cfg.master, cfg.spark)  # before anything of Spark starts
        self._cfg = cfg
        self._verbose = logging.getLogger().isEnabledFor(logging.INFO)  # -v
        logs.quiet_python(self._verbose)
        self._jars_dir = cfg.jars_dir or default_jars_dir()
        self._spark: SparkSession | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._build, args=(app,), name="spark-start", daemon=True)
        self._thread.start()

    def _build(self, app: str) -> None:
        from reconstructor.spark import jar_route, logs
        from reconstructor.spark.builder import build_spark, uses_s3a

        cfg = self._cfg
        s3a = uses_s3a(cfg.output, cfg.checkpoint)
        # The launcher's lines, held: with no jars_dir, Spark's report of resolving the packages.
        start = logs.StartLines(hold=not self._verbose)
        try:
            validate.s3_endpoint_reachable(cfg.s3.endpoint, cfg.output, cfg.checkpoint)
            with logs.jvm_output(self._verbose, start), engine_ignores_sigterm():
                try:
                    self._spark = build_spark(app, master=cfg.master, s3=cfg.s3, jars_dir=self._jars_dir,
                                              shuffle_partitions=cfg.shuffle_partitions,
                                              conf=logs.driver_conf(cfg.spark, self._verbose), s3a=s3a)
                except Exception as exc:
                    start.settle()
                    detail = jar_route.resolution_failure(start.lines)
                    if detail is None:
                        raise
                    start.release(lambda lines: [])  # the one line says it
                    raise jar_route.unresolved(detail, s3a) from exc
                finally:
                    start.release(jar_route.without_ivy_report)
        except BaseException as exc:  # noqa: BLE001 - raised by ``result``, in the caller's thread
            self._failure = exc

    def wait(self) -> None:
        """Until the start has ended, whichever way."""
        self._thread.join()

    def result(self, signals: StopSignals | None = None) -> SparkSession:
        """The started SparkSession, or the start's failure; with ``signals``, their handlers are
        installed again (the SparkContext sets a SIGINT handler of its own)."""
        from reconstructor.spark import logs
        from reconstructor.spark.builder import delta_on_classpath

        self.wait()
        if self._failure is not None:
            raise self._failure
        spark = self._spark
        assert spark is not None  # built, as nothing failed
        if not delta_on_classpath(spark):
            raise UsageError(f"Delta's classes are not in Spark's JVM: the jars_dir {self._jars_dir} holds no Spark "
                             "jars, and a driver started by spark-submit resolves none itself (ship the jars with the "
                             "job, or set jars_dir / RECON_JARS_DIR to a folder 'reconstructor jars DIR' filled; "
                             "Databricks and EMR provide them)")
        logs.set_engine_level(spark, self._verbose)
        if signals is not None:
            signals.install()
        return spark


def _validated_stream(cfg: Settings) -> None:
    cfg.require("bootstrap_servers", "topic_pattern", "output", "checkpoint")
    validate.classic_spark(cfg.master, cfg.spark)  # before the checks below create the output's folder
    validate.topic_pattern(cfg.need("topic_pattern"))
    validate.resync_topic(cfg.resync_topic, cfg.topic_pattern)
    validate.kafka_options(cfg.kafka)
    validate.starting_offsets(cfg.starting_offsets)
    validate.state_outlasts_timeout(cfg.state_retention, cfg.session_timeout)
    validate.vacuum_retention(cfg.vacuum_retention, cfg.unsafe_vacuum_retention)
    validate.row_schema(cfg.row_schema)
    validate.output_creatable(cfg.need("output"))
    validate.local_output_writable(cfg.need("output"))
    validate.local_output_writable(cfg.need("checkpoint"), "--checkpoint")


def _stream(cfg: Settings, app: str, progress=None, *, replay: bool = False,
            restarts: Restarts | None = None, signals: StopSignals | None = None,
            step_start: StepStart | None = None) -> int:
    """The metrics' port and log (``--metrics-*``); the SparkSession's start, beside which go the
    checks that need the broker, the writer lease and the chain key's check; then the stream to its end
    (``spark.stream_run.run_stream``: restarts from its checkpoint after a transient failure, stops
    on SIGINT and SIGTERM, never to restart) and the run's last lines.  Whatever was opened is
    closed however the run ends."""
    with contextlib.ExitStack() as opened:
        metrics = MetricsExport.open(cfg.metrics_host, cfg.metrics_port, cfg.metrics_log)
        if metrics is not None:
            opened.callback(metrics.close)
        signals = signals or _stop_signals()
        starting = SparkStart(cfg, app)  # beside the imports, the checks and the lease
        try:
            from reconstructor.spark.stream_run import run_stream

            validate.broker_reachable(cfg.need("bootstrap_servers"), cfg.kafka)
            if not replay:  # a replay never sends requests
                validate.resync_topic_exists(cfg.need("bootstrap_servers"), cfg.kafka, cfg.resync_topic)
            lease = _writer_lease(cfg, "replay" if replay else "run", cfg.checkpoint)
            if lease is not None:
                opened.callback(lease.release)
            _output_chain_key(cfg)
        except BaseException:
            starting.wait()  # this process's output is the JVM's until then: the failure's line waits
            raise
        spark = starting.result(signals)
        if progress is not None:  # a catch-up display of its own
            on_progress, query_ended = (lambda p, recorded: progress(p)), progress.end_line
        else:
            on_progress, query_ended = (lambda p, recorded: _log_progress(recorded, cfg, p)), None
        outcome = run_stream(spark, cfg, replay=replay, restarts=restarts or Restarts(0, cfg.restart_backoff),
                             signals=signals, lease=lease, on_progress=on_progress, tell=_tell,
                             query_ended=query_ended, metrics=metrics, step_start=step_start)
        if progress is not None:  # the records set aside once, at the end
            for batch_id in sorted(outcome.recorded):
                print(f"batch {batch_id}: {recorded_text(outcome.recorded[batch_id])}", file=sys.stderr)
        if outcome.quarantined_now is not None:
            print(_run_summary(cfg, outcome.quarantined_now, outcome.recorded.values()), file=sys.stderr)
    return 0


def _writer_lease(cfg: Settings, command: str, checkpoint: str | None, store=None):
    """The output's writer lease, taken (``reconstructor.contract.lease``) in ``store`` (by default, the
    output's); None on a file system that keeps none, with a warning."""
    from reconstructor.contract.lease import WriterLease, lease_store

    store = store or lease_store(cfg.need("output"), cfg.s3)
    if store is None:
        print(f"reconstructor: warning: no writer lease on {cfg.output} (one is kept on s3a://, s3:// and "
              f"local outputs): make sure no other driver writes it", file=sys.stderr, flush=True)
        return None
    validate.s3_endpoint_reachable(cfg.s3.endpoint, cfg.output)
    lease = WriterLease(store, command, checkpoint, cfg.lease_ttl.total_seconds())
    try:
        lease.acquire(cfg.need("output"))
    except ReconstructorError as exc:
        raise explain(exc, cfg) from None
    return lease


def _output_chain_key(cfg: Settings) -> None:
    """The chain key must be the one the output's change log was chained with (none counts as one):
    exit 2 before a record is read otherwise (``reconstructor.audit.key_check``).  Checked once the
    lease is held, so a storage failure has been named by then and no writer changes the log."""
    from reconstructor.audit.key_check import checked_outputs, require_output_key

    if not checked_outputs(cfg.need("output")):
        return
    from reconstructor.audit.delta_tables import OutputTables
    from reconstructor.core.chain import ChainKey

    try:
        require_output_key(OutputTables(cfg.need("output"), cfg.s3), ChainKey(cfg.chain_key))
    except UsageError:
        raise
    except Exception as exc:  # one line naming the output, however delta-rs failed
        failure = explain(exc, cfg)
        raise ReconstructorError(f"--output {cfg.output}: the chain key could not be checked against the "
                                 f"output's change log: {failure}") from exc


def _tell(line: str) -> None:
    print(f"reconstructor: {line}", file=sys.stderr, flush=True)


def _log_progress(recorded: dict, cfg: Settings, p: dict) -> None:
    line = batch_line(p, cap=cfg.max_offsets_per_trigger, continuous=cfg.trigger.continuous)
    if p.get("batchId") in recorded:
        line += f"; {recorded_text(recorded[p['batchId']])}"
    print(line, file=sys.stderr, flush=True)


def recorded_text(r) -> str:
    """What a batch wrote to ``violations``, in words."""
    parts = []
    if r.set_aside:
        parts.append(f"{_count(r.set_aside, 'record')} set aside from {_count(r.sessions, 'session')}")
    if r.drifts:
        parts.append(_count(r.drifts, "snapshot drift"))
    return ", ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _run_summary(cfg: Settings, quarantined_now: int, batches) -> str:
    """The run's last line on quarantine: sessions quarantined now (from the sessions table), and
    what this run recorded."""
    from reconstructor.contract.tables import VIOLATIONS, table_path  # it loads Arrow, which --help does without

    batches = list(batches)
    set_aside, drifts = sum(b.set_aside for b in batches), sum(b.drifts for b in batches)
    return (f"quarantine: {_count(quarantined_now, 'session')} quarantined now; this run set aside "
            f"{_count(set_aside, 'record')} and recorded {_count(drifts, 'snapshot drift')} in "
            f"{table_path(cfg.need('output'), VIOLATIONS)}")


# --------------------------------------------------------------------------------------------------


def _stop_signals() -> StopSignals:
    """SIGINT and SIGTERM stop the command's query (``restarts.StopSignals``), from now on."""
    signals = StopSignals()
    signals.install()
    return signals


def run(args) -> int:
    signals = _stop_signals()
    cfg = from_args(args)
    _validated_stream(cfg)
    restarts = Restarts(attempts_for(cfg.trigger, cfg.restart_attempts), cfg.restart_backoff)
    return _stream(cfg, "reconstructor-run", restarts=restarts, signals=signals)


def jars(args) -> int:
    """``reconstructor jars DIR``: the jars a driver needs, written into ``DIR`` for hosts that
    cannot reach Maven (``spark.jar_route.fill_jars_dir``)."""
    from pathlib import Path

    from reconstructor.spark.jar_route import engine_jar_to_copy, fill_jars_dir, what_resolves

    cfg = from_args(args)
    target = Path(args.dir)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} is not a folder")
    engine = engine_jar_to_copy(Path(cfg.jars_dir) if cfg.jars_dir else default_jars_dir())
    started = time.monotonic()
    if not args.engine_only:
        _tell(f"resolving {what_resolves(args.s3a)} from Maven through Spark's Ivy (what its cache holds "
              "is not downloaded again)")
    written = fill_jars_dir(target, s3a=args.s3a, engine_only=args.engine_only, engine=engine, conf=cfg.spark,
                            verbose=logging.getLogger().isEnabledFor(logging.INFO), tell=_tell)
    size = sum(jar.stat().st_size for jar in written) / 1e6
    if args.engine_only:
        print(f"{written[0]}: the engine jar ({size:.1f} MB), for a deployment to ship with the job")
    else:
        print(f"{target / 'spark'}: {len(written)} jars ({size:.0f} MB) in {time.monotonic() - started:.0f}s; "
              f"on a host without Maven set jars_dir / RECON_JARS_DIR to {target.resolve()}")
    return 0


def config_show(args) -> int:
    cfg = from_args(args)
    sys.stdout.write(cfg.to_toml())
    return 0


def replay(args) -> int:
    from reconstructor.cli import replay_plan

    signals = _stop_signals()
    cfg = from_args(args)
    # A replay never moves another query's checkpoint: it takes only a --checkpoint flag (one with
    # no committed batch, checked before the query starts), never the configured one.
    configured = from_args(argparse.Namespace(**{**vars(args), "checkpoint": None})).checkpoint
    cfg.checkpoint = args.checkpoint
    if not cfg.checkpoint and cfg.output:
        cfg.checkpoint = f"{cfg.output.rstrip('/')}/_checkpoints/replay-{uuid.uuid4().hex[:8]}"
    cfg.require("bootstrap_servers", "topic_pattern", "output", "checkpoint")
    step_start = None  # what a replay from the last snapshots adds to the step (core.step_spec)
    if args.from_offsets:
        offsets = validate.offsets_within(validate.starting_offsets(args.from_offsets), cfg.need("topic_pattern"))
    elif args.from_timestamp:
        offsets = replay_plan.offsets_for_timestamp(cfg, args.from_timestamp)
    else:
        from reconstructor.core.step_spec import StepStart

        offsets, seeds = replay_plan.plan_from_last_snapshot(_spark(cfg, "reconstructor-replay-plan", signals), cfg)
        # The sessions it does not rebuild start from the tables; those whose snapshot lies after
        # their partition's start see updates first, and await it.
        step_start = StepStart(session_seeds=seeds, await_snapshot=True)
    cfg.starting_offsets = offsets
    cfg.trigger = AVAILABLE_NOW
    _validated_stream(cfg)
    left_alone = (f"; the configured checkpoint {configured} is left alone"
                  if configured and configured != cfg.checkpoint else "")
    print(f"replaying from {offsets} into {cfg.output} (checkpoint {cfg.checkpoint}{left_alone})",
          file=sys.stderr)
    return _stream(cfg, "reconstructor-replay", progress=CatchUpProgress(starting=offsets),
                   replay=True, signals=signals, step_start=step_start)


def compact(args) -> int:
    cfg = from_args(args)
    cfg.require("output")
    validate.vacuum_retention(cfg.vacuum_retention, cfg.unsafe_vacuum_retention)
    from reconstructor.contract.lease import WriterLease, lease_store
    from reconstructor.spark.compaction import Compactor
    from reconstructor.spark.compaction_mark import CompactionMark

    store = lease_store(cfg.need("output"), cfg.s3)
    if store is not None:
        validate.s3_endpoint_reachable(cfg.s3.endpoint, cfg.output)
        try:
            live = WriterLease(store, "compact", None, cfg.lease_ttl.total_seconds()).holder()
        except ReconstructorError as exc:
            raise explain(exc, cfg) from None
        if live is not None:  # a run's in-stream compaction does the work (or another compact does)
            print(f"nothing to do: the output {cfg.output} is being written by {live.describe()}"
                  + (", whose in-stream compaction compacts it" if live.command != "compact" else ""))
            return 0
    lease = _writer_lease(cfg, "compact", None, store)
    try:
        spark = _spark(cfg, "reconstructor-compact")
        compactor = Compactor(spark, cfg.need("output"), grace_s=cfg.compact_grace.total_seconds(),
                              retention_hours=cfg.vacuum_retention / dt.timedelta(hours=1),
                              min_files=args.min_files, lease_check=lease.check if lease is not None else None)
        if not compactor.tables():  # a scheduled compact before the first run
            print(f"nothing to compact: the output {cfg.output} holds no tables yet")
            return 0
        report = compactor.run()
        CompactionMark(spark, cfg.need("output")).record(dt.datetime.now(dt.UTC))  # runs need not repeat it
    finally:
        if lease is not None:
            lease.release()
    for line in report.lines():
        print(line)
    return 0


def state(args) -> int:
    cfg = from_args(args)
    cfg.require("checkpoint")
    schema = validate.row_schema(cfg.row_schema)
    from reconstructor.spark.state_reader import read_session_state

    spark = _spark(cfg, "reconstructor-state")
    found = read_session_state(spark, cfg.need("checkpoint"), args.topic, args.session, schema)
    if found is None:
        raise ReconstructorError(f"no state for session {args.session!r} of topic {args.topic!r} "
                                 f"in {cfg.checkpoint}")
    info, table = found
    _print_table(info, table, args.format)
    return 0



def verify(args) -> int:
    """The tables at rest held to each other (``reconstructor.audit.checks``), read with delta-rs;
    with ``--against-kafka``, then to the records Kafka holds (``reconstructor.audit.source_check``)."""
    cfg = from_args(args)
    cfg.require("output")
    topics = validate.topic_pattern(args.topic_pattern) if args.topic_pattern else None
    if args.against_kafka:  # before the tables are read: a broker that does not answer is bad usage
        cfg.require("bootstrap_servers")
        with _broker_failure_is_usage():
            validate.broker_reachable(cfg.need("bootstrap_servers"), cfg.kafka)
    validate.s3_endpoint_reachable(cfg.s3.endpoint, cfg.output)
    from reconstructor.audit.checks import Verification
    from reconstructor.audit.delta_tables import OutputTables
    from reconstructor.audit.fleet_check import FleetCheck
    from reconstructor.audit.fold import row_columns
    from reconstructor.contract.tables import CURRENT_ROWS, ROW_CHANGES, SESSIONS, VIOLATIONS
    from reconstructor.core.chain import ChainKey
    from reconstructor.core.fleet_seal import VIOLATION_FIELDS
    from reconstructor.errors import DiscrepancyError

    started = time.monotonic()
    tables = OutputTables(cfg.need("output"), cfg.s3)
    key = ChainKey(cfg.chain_key)
    sessions, violations = tables.read(SESSIONS), tables.read(VIOLATIONS)
    # Of each table, only what the fleet seal covers (``Verification`` reads the rows again by topic).
    fleet = (FleetCheck(sessions.column("chain_seal").to_pylist() if "chain_seal" in sessions.column_names else [],
                        violations.select([c for c in VIOLATION_FIELDS if c in violations.column_names]).to_pylist(),
                        tables.fleet_state(SESSIONS), tables.fleet_state(VIOLATIONS), key)
             if cfg.chain_key else None)
    check = Verification(sessions, violations, row_columns(tables.columns(ROW_CHANGES)), topics, chain_key=key,
                         sessions_properties=tables.properties(SESSIONS), fleet=fleet)
    for hour in tables.hours(ROW_CHANGES):
        found = check.add_changes(hour)
        if found is not None:
            raise DiscrepancyError(found.line())
    found = check.finish(tables.read(CURRENT_ROWS))
    if found is not None:
        raise DiscrepancyError(found.line())
    lines = check.summary.lines(cfg.need("output"), time.monotonic() - started)
    if args.against_kafka:  # "no discrepancy" is said once the records agree too
        lines += _verify_against_kafka(cfg, tables, topics)
    print("\n".join(lines))
    return 0


def _verify_against_kafka(cfg: Settings, tables, topics: str | None) -> list[str]:
    """Each record Kafka holds for the output's topics, up to the writer's committed offsets, held
    to the tables (exit 3 at the first the tables lack or hold wrongly); the summary's lines."""
    import re

    from reconstructor.audit.source_check import SourceCheck, committed_ends
    from reconstructor.cli import record_sources, replay_plan
    from reconstructor.errors import DiscrepancyError
    from reconstructor.kafka_admin import watermark_bounds

    bootstrap = cfg.need("bootstrap_servers")
    ends = committed_ends(tables, topics)
    if not ends:
        raise UsageError(f"no topic of the output {cfg.output} matches --topic-pattern {topics!r}" if topics else
                         f"the output {cfg.output} records no batch's Kafka offsets (an earlier release wrote it): "
                         "it cannot be held to Kafka")
    held = sorted({t for t, _ in ends})
    with _broker_failure_is_usage():
        found = replay_plan.partitions(cfg.model_copy(update={"topic_pattern": "|".join(map(re.escape, held))}))
        bounds = watermark_bounds(bootstrap, cfg.kafka, found, "reconstructor-check")
    if not found:
        raise UsageError(f"none of the output's topics ({', '.join(held)}) is in Kafka at {bootstrap}")
    check = SourceCheck(tables, ends, bounds)
    source = record_sources.kafka_records(bootstrap, cfg.kafka, check.starts, check.read_ends)
    started = time.monotonic()
    progress = RecordProgress("checked against Kafka", check.total)
    for batch in source.batches:
        discrepancy = check.add(batch)
        if discrepancy is not None:
            raise DiscrepancyError(discrepancy.line())
        progress(check.summary.checked + check.summary.not_checked)
    progress.end()
    discrepancy = check.finish()
    if discrepancy is not None:
        raise DiscrepancyError(discrepancy.line())
    return check.summary.lines(time.monotonic() - started)


@contextlib.contextmanager
def _broker_failure_is_usage():
    """A broker that does not answer (or refuses the settings) is bad usage for a command that
    only reads Kafka: nothing started, exit 2 with the line that says so."""
    try:
        yield
    except UsageError:
        raise
    except ReconstructorError as exc:
        raise UsageError(str(exc)) from None


def check(args) -> int:
    """Every session of the topics (or of a file of records) judged by the rules, nothing written
    (``reconstructor.cli.check``)."""
    from reconstructor.cli import record_sources, replay_plan
    from reconstructor.cli.check import run_check
    from reconstructor.contract.row_schema import RowSchema
    from reconstructor.core.policy import OnViolation
    from reconstructor.kafka_admin import watermark_bounds

    cfg = from_args(args)
    validate.state_outlasts_timeout(cfg.state_retention, cfg.session_timeout)
    schema = RowSchema.load(cfg.row_schema)
    spec = cfg.model_copy(update={"on_violation": OnViolation.QUARANTINE}).step_spec(schema)
    if args.file is not None:
        if args.from_offsets or args.from_timestamp:
            raise UsageError("--from and --from-timestamp are for Kafka; a --file is read whole")
        return run_check(spec, record_sources.file_records(args.file), args.format)
    cfg.require("bootstrap_servers", "topic_pattern")
    validate.topic_pattern(cfg.need("topic_pattern"))
    with _broker_failure_is_usage():
        found = replay_plan.partitions(cfg)
    if not found:
        raise UsageError(f"no topic matches --topic-pattern {cfg.topic_pattern!r}")
    bounds = watermark_bounds(cfg.need("bootstrap_servers"), cfg.kafka, found, "reconstructor-check")
    given = (json.loads(replay_plan.offsets_for_timestamp(cfg, args.from_timestamp)) if args.from_timestamp
             else _from_offsets(args.from_offsets, cfg.need("topic_pattern")) if args.from_offsets else None)
    starts = record_sources.start_offsets(bounds, given)
    ends = {tp: high for tp, (_, high) in bounds.items()}
    return run_check(spec, record_sources.kafka_records(cfg.need("bootstrap_servers"), cfg.kafka, starts, ends),
                     args.format)


def _from_offsets(text: str, topic_pattern: str) -> dict[str, dict[str, int]]:
    """``check --from``: JSON offsets, checked as ``replay --from``'s are."""
    value = validate.offsets_within(validate.starting_offsets(text), topic_pattern)
    if value in ("earliest", "latest"):
        raise UsageError('--from must be JSON offsets such as {"sensor-1": {"0": 1200}} '
                         "(without it, check reads each partition from its earliest offset)")
    return json.loads(value)


def asof(args) -> int:
    """A session's table as it was at a seq or an event time, folded from ``row_changes``."""
    cfg = from_args(args)
    cfg.require("output")
    at = None
    if args.at is not None:
        try:
            at = parse_rfc3339(args.at)
        except ValueError as exc:
            raise UsageError(f"--at {exc}") from None
    validate.s3_endpoint_reachable(cfg.s3.endpoint, cfg.output)
    from reconstructor.audit.delta_tables import OutputTables
    from reconstructor.audit.fold import ChangeFold, changes_up_to, last_digest, row_columns
    from reconstructor.contract.tables import ROW_CHANGES, SESSIONS

    tables = OutputTables(cfg.need("output"), cfg.s3)
    changes = tables.session_rows(ROW_CHANGES, args.topic, args.session)
    if not changes.num_rows and not tables.session_rows(SESSIONS, args.topic, args.session).num_rows:
        raise ReconstructorError(f"no session {args.session!r} of topic {args.topic!r} in {cfg.output}")
    applied = changes_up_to(changes, seq=args.seq, at=at)
    fold = ChangeFold(row_columns(changes.schema.names))
    fold.add(applied)
    table = fold.frame(args.topic, args.session)
    seqs = applied["seq"].to_pylist()
    info = {"topic": args.topic, "session": args.session,
            "as_of": f"seq {args.seq}" if args.seq is not None or at is None else at.isoformat(),
            "last_seq": max(seqs) if seqs else None, "row_count": len(table),
            "chain_digest": last_digest(applied)}
    _print_table(info, table, args.format)
    return 0


def _print_table(info: dict, table, fmt: str) -> None:
    """A session's table as ``state`` and ``asof`` print it."""
    if fmt == "json":
        rows = json.loads(table.reset_index().to_json(orient="records", date_format="iso"))
        print(json.dumps({"session": info, "rows": rows}, indent=2, default=str))
    elif fmt == "csv":
        sys.stdout.write(table.reset_index().to_csv(index=False))
    else:
        print(" ".join(f"{k}={v}" for k, v in info.items()))
        print(table.to_string() if len(table) else "(empty table)")
