"""Fleet capacity on the local stack: ``make bench-fleet`` (or ``python -m tests.benchmarks.fleet_bench``).

For each fleet size N (``--sessions``, default 250,500,1000,2000) and each engine (``--engines``), on
fresh topics (4 sensors x 2 partitions): every session publishes a 50-row snapshot, the engine
starts as its own process and reads them, then every session publishes one 3-row update a second
for ``--minutes`` while the engine consumes continuously under a ``--trigger`` interval:
  1. ``python`` and ``jvm``: the reconstructor's real command line, ``reconstructor run --trigger
     '30 seconds' --engine python|jvm``, one run per engine of the stateful step (``reconstructor``
     is accepted for ``python``);
  2. ``limit``: the same Kafka source and parse appended to one Delta table, no state (Spark's
     ceiling here), with the same processing-time trigger;
  Both Spark engines read at most ``--max-offsets`` records a batch, by default two intervals'
  updates (2 x N x interval): the reconstructor's own default cap (200,000) would otherwise bound
  it at 200,000 records an interval, below the updates of a fleet of 8,000 at a 30-second trigger;
  3. ``peer``: the single-process peer (``tests.benchmarks.peer``) applying records as they come and
     writing with delta-rs once per interval.
The publisher paces itself (each second's N updates in 20 slices) and records every record's
delivery; a sampler reads the broker's log end offsets every 5 s; the engine's batches come from its
checkpoint (``offsets/<n>``: the batch's trigger time and end offsets; ``commits/<n>``: its commit
time) or, for the peer, its write log.  From these, per engine and N:
  - batch durations (trigger to commit; for the peer, its busy time per interval);
  - Kafka lag over time: log end offsets minus the engine's committed end offsets;
  - end-to-end latency of each update: its batch's commit time minus its Kafka timestamp (p50, p95),
    over the updates published after ``--warmup`` (default: the run's first third);
  - keeps up: over the measured window (after the warm-up, until publishing stops) the median batch
    (of those started in the window; if none did, of those running through it) lasts no longer
    than the trigger interval, and the largest lag sampled in the window's last third is under two
    intervals' worth of updates (2 x N x interval).  An engine that keeps up
    lags at most one interval's records plus those arriving while a batch runs; one falling behind
    passes that as its backlog grows.
An engine that does not keep up at N is not run at larger N.  Engines run one at a time.  Progress
goes to stdout, a markdown table and the largest N each engine keeps up with at the end, the raw
series (lag samples, batches, latency percentiles) to ``--json``.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reconstructor.settings import Duration
from tests.benchmarks.fleet_figures import (
    Commit,
    Verdict,
    keeps_up,
    lag_series,
    latencies,
    measured_batches,
    percentile,
)
from workbench import localstack
from workbench.fleet import FleetSpec, hash_partition, plan_fleet
from workbench.producer import encode, librdkafka_logging

#: The reconstructor under each engine of its stateful step (``--engine``), then the limit and the peer.
RECONSTRUCTORS = ("python", "jvm")
ENGINES = (*RECONSTRUCTORS, "limit", "peer")
ALIASES = {"reconstructor": "python"}  # the name of the reconstructor's row before it had two engines
SENSORS = 4
PARTITIONS = 2
SNAPSHOT_ROWS = 50
ROWS_PER_UPDATE = 3
SLICES_PER_SECOND = 20
LAG_SAMPLE_SECONDS = 5.0
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # where ``python -m tests.benchmarks...`` resolves


# -------------------------------------------------------------------------------------------------
# The fleet: a paced publisher that keeps every record's delivery


def create_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **librdkafka_logging()})
    for future in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
                                       for t in topics]).values():
        future.result(30)


class Publisher:
    """Publishes a live fleet: the snapshots at once, then each second one update per session,
    spread over the second; every delivery report's (topic-partition, offset, Kafka timestamp) is
    kept for the latency figures."""

    def __init__(self, bootstrap: str, spec: FleetSpec):
        self.spec = spec
        self.sessions = spec.sensors * spec.sessions_per_sensor
        self.messages = plan_fleet(spec)  # snapshots first, then one update per session per round
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 20, "compression.type": "lz4", **librdkafka_logging()})
        self.deliveries: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
        self.errors: list[str] = []
        self.behind_max = 0.0  # how late the publisher ran against its own schedule, at most
        self.published = 0
        self.started = self.ended = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")
        else:
            self.deliveries[(msg.topic(), msg.partition())].append((msg.offset(), msg.timestamp()[1] / 1000))

    def _send(self, count: int) -> None:
        for _ in range(count):
            p = next(self.messages)
            while True:
                try:
                    self.producer.produce(p.topic, key=p.session.encode(), value=encode(p.message),
                                          partition=hash_partition(p.session, PARTITIONS),
                                          on_delivery=self._delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.poll(0)
        self.published += count

    def snapshots(self) -> None:
        self._send(self.sessions)
        self._flush()

    def _flush(self) -> None:
        if self.producer.flush(60) or self.errors:
            raise RuntimeError(f"publisher: delivery failed: {self.errors[:1] or 'not all delivered in 60s'}")

    def _run(self, seconds: int) -> None:
        self.started = t0 = time.time()
        bounds = [self.sessions * j // SLICES_PER_SECOND for j in range(SLICES_PER_SECOND + 1)]
        for i in range(seconds):
            if self._stop.is_set():
                break
            for j in range(SLICES_PER_SECOND):
                due = t0 + i + j / SLICES_PER_SECOND
                wait = due - time.time()
                if wait > 0:
                    time.sleep(wait)
                else:
                    self.behind_max = max(self.behind_max, -wait)
                self._send(bounds[j + 1] - bounds[j])
        self._flush()
        self.ended = time.time()

    def start_updates(self, seconds: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(seconds,), name="publisher", daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop publishing (at the end of the current second) and wait for the last deliveries."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class EndOffsetSampler:
    """The broker's log end offsets of the fleet's partitions, every few seconds, in a thread."""

    def __init__(self, bootstrap: str, partitions: list[tuple[str, int]]):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fleet-{uuid.uuid4().hex[:8]}",
                                  **librdkafka_logging()})
        self.partitions = partitions
        self.samples: list[tuple[float, dict[tuple[str, int], int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="end-offsets", daemon=True)

    def sample(self) -> dict[tuple[str, int], int]:
        return {(t, p): self.consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t, p in self.partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            high = self.sample()
            self.samples.append((time.time(), high))
            self._stop.wait(LAG_SAMPLE_SECONDS)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.consumer.close()


# -------------------------------------------------------------------------------------------------
# The engines: each its own process, each leaving a record of its batches


def spark_commits(checkpoint: Path) -> list[Commit]:
    """The committed batches of a Spark checkpoint: ``offsets/<n>`` holds the batch's trigger time
    (``batchTimestampMs``) and its sources' end offsets, ``commits/<n>`` is written when it commits
    (its mtime is the commit time)."""
    out = []
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return out
    for entry in commits.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            committed = entry.stat().st_mtime
            lines = (checkpoint / "offsets" / entry.name).read_text().splitlines()
        except FileNotFoundError:  # Spark has just cleaned an old batch's files away
            continue
        started = json.loads(lines[1])["batchTimestampMs"] / 1000
        ends = {}
        for source in lines[2:]:
            if source.strip().startswith("{"):
                for topic, parts in json.loads(source).items():
                    ends.update({(topic, int(p)): int(o) for p, o in parts.items()})
        out.append(Commit(int(entry.name), started, committed, ends))
    return sorted(out, key=lambda c: c.batch)


def spark_batch_in_flight(checkpoint: Path) -> tuple[int, float] | None:
    """The batch Spark has planned (``offsets/<n>``) but not committed: its id and trigger time."""
    def ids(folder: str) -> set[int]:
        path = checkpoint / folder
        return {int(p.name) for p in path.iterdir() if p.name.isdigit()} if path.is_dir() else set()

    pending = ids("offsets") - ids("commits")
    if not pending:
        return None
    batch = max(pending)
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    except FileNotFoundError:
        return None
    return batch, json.loads(lines[1])["batchTimestampMs"] / 1000


def peer_commits(log: Path) -> list[Commit]:
    """The peer's writes, from its JSON-lines log (see ``peer.run_peer_continuous``)."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        if line.endswith("}"):
            r = json.loads(line)
            ends = {(t, int(p)): o for t, parts in r["end_offsets"].items() for p, o in parts.items()}
            out.append(Commit(r["batch"], r["started"], r["committed"], ends))
    return out


class Engine:
    """An engine under test running as a subprocess in its own process group."""

    def __init__(self, name: str, bootstrap: str, pattern: str, root: Path, trigger: str, max_offsets: int):
        self.name, self.root = name, root
        self.checkpoint, self.output = root / "chk", root / "out"
        self.peer_log, self.metrics_log = root / "peer.jsonl", root / "metrics.jsonl"
        common = ["--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
                  "--output", str(self.output), "--checkpoint", str(self.checkpoint), "--trigger", trigger]
        if name in RECONSTRUCTORS:
            cmd = [sys.executable, "-m", "reconstructor", "run", *common, "--engine", name,
                   "--metrics-log", str(self.metrics_log), "--max-offsets-per-trigger", str(max_offsets)]
        elif name == "limit":
            cmd = [sys.executable, "-m", "tests.benchmarks.fleet_bench", "limit-run", *common,
                   "--max-offsets", str(max_offsets)]
        else:
            cmd = [sys.executable, "-m", "tests.benchmarks.fleet_bench", "peer-run", *common,
                   "--log", str(self.peer_log)]
        root.mkdir(parents=True, exist_ok=True)
        self.stderr = open(root / "engine.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.stderr, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=PROJECT_ROOT)

    def commits(self) -> list[Commit]:
        return peer_commits(self.peer_log) if self.name == "peer" else spark_commits(self.checkpoint)

    def in_flight(self) -> tuple[int, float] | None:
        """The batch running now, if the engine shows one (the peer applies records continuously)."""
        return None if self.name == "peer" else spark_batch_in_flight(self.checkpoint)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join((self.root / "engine.log").read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Ctrl-C, as an operator stops a run; SIGKILL of the group if it has not ended in a minute."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.stderr.close()

    def spark_batch_seconds(self) -> list[float]:
        """The reconstructor's own per-batch durations (its ``--metrics-log``), to set beside the
        checkpoint's."""
        if not self.metrics_log.exists():
            return []
        return [json.loads(x)["duration_seconds"] for x in self.metrics_log.read_text().splitlines() if x]


def limit_run(args) -> int:
    """The stateless limit as a continuous query: Kafka, the parse, appended to Delta, no state."""
    from pyspark.sql import functions as F

    from reconstructor.contract.row_schema import RowSchema
    from reconstructor.spark.builder import build_spark
    from reconstructor.spark.parse import parse_records
    from reconstructor.spark.source import kafka_stream

    spark = build_spark("fleet-limit", jars_dir=localstack.jars_dir(), conf={"spark.ui.enabled": "false"})
    # After the SparkContext, which installs a SIGINT handler of its own (cancel the jobs, raise).
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    raw = kafka_stream(spark, bootstrap_servers=args.bootstrap_servers, topic_pattern=args.topic_pattern,
                       max_offsets_per_trigger=args.max_offsets)
    parsed = parse_records(raw, RowSchema.load()).withColumn("hour", F.date_format("kafka_ts", "yyyy-MM-dd-HH"))
    query = (parsed.writeStream.format("delta").partitionBy("hour")
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=f"{Duration(args.trigger).total_seconds():g} seconds")
             .start(str(Path(args.output) / "row_changes")))
    # A short wait in a loop: the signal handler runs between waits, never inside a JVM call.
    while not stop.is_set() and query.isActive:
        query.awaitTermination(1)
    failed = query.exception()
    query.stop()
    spark.stop()
    if failed is not None:
        print(f"limit: the query failed: {failed}", file=sys.stderr)
        return 1
    return 0


def peer_run(args) -> int:
    from reconstructor.contract.row_schema import RowSchema
    from tests.benchmarks.peer import run_peer_continuous

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counts = run_peer_continuous(args.bootstrap_servers, args.topic_pattern, str(Path(args.output) / "row_changes"),
                                 RowSchema.load(), Duration(args.trigger).total_seconds(), args.log, stop,
                                 group=f"peer-{uuid.uuid4().hex[:8]}")
    print(f"peer: {counts}", flush=True)
    return 0


# -------------------------------------------------------------------------------------------------
# One step: one engine, one fleet size


def _covered(commits: list[Commit], high: dict[tuple[str, int], int]) -> bool:
    return bool(commits) and all(commits[-1].end_offsets.get(tp, 0) >= end for tp, end in high.items() if end)


def _wait_for(engine: Engine, high: dict, timeout: float, each=lambda commits: None) -> bool:
    """Until the engine has committed up to ``high`` (True), died or timed out (False); ``each``
    sees the commits every second."""
    deadline = time.time() + timeout
    while time.time() < deadline and engine.alive():
        commits = engine.commits()
        each(commits)
        if _covered(commits, high):
            return True
        time.sleep(1)
    return False


class BatchPrinter:
    """One progress line per batch the engine commits, with the lag at the last sample."""

    def __init__(self, label: str, sampler: EndOffsetSampler):
        self.label, self.sampler, self.shown = label, sampler, 0

    def __call__(self, commits: list[Commit]) -> None:
        for c in commits[self.shown:]:
            before = sum(commits[self.shown - 1].end_offsets.values()) if self.shown else 0
            (_, lag), = lag_series(self.sampler.samples[-1:] or [(time.time(), {})], commits)
            print(f"  {self.label} batch {c.batch}: {sum(c.end_offsets.values()) - before:,} records in "
                  f"{c.duration:.1f}s; lag {lag:,} at the last sample", flush=True)
            self.shown += 1


def run_step(engine_name: str, sessions: int, args, work: Path) -> dict:
    bootstrap, trigger_s = args.bootstrap_servers, Duration(args.trigger).total_seconds()
    seconds = round(args.minutes * 60)
    warmup = args.warmup if args.warmup is not None else seconds / 3
    prefix = f"fleet{uuid.uuid4().hex[:8]}-sensor-"
    spec = FleetSpec(topic_prefix=prefix, sensors=SENSORS, sessions_per_sensor=sessions // SENSORS,
                     rows=SNAPSHOT_ROWS, updates=seconds, rows_per_update=ROWS_PER_UPDATE,
                     end_sessions=False, seed=sessions, start=dt.datetime.now(dt.UTC))
    create_topics(bootstrap, spec.topics())
    partitions = [(t, p) for t in spec.topics() for p in range(PARTITIONS)]
    publisher = Publisher(bootstrap, spec)
    publisher.snapshots()
    sampler = EndOffsetSampler(bootstrap, partitions)
    snapshot_high = sampler.sample()
    label = f"{engine_name} N={sessions:,}"
    max_offsets = args.max_offsets or round(2 * sessions * trigger_s)
    engine = Engine(engine_name, bootstrap, f"{prefix}[0-9]+", work / f"{engine_name}-{sessions}", args.trigger,
                    max_offsets)
    result = {"engine": engine_name, "sessions": sessions, "trigger_seconds": trigger_s,
              "publish_seconds": seconds, "warmup_seconds": warmup, "max_offsets_per_trigger": max_offsets}
    died = None  # the engine's exit code if it ended before it was stopped
    try:
        if not _wait_for(engine, snapshot_high, args.startup_timeout):
            why = "exited" if not engine.alive() else f"no batch in {args.startup_timeout:g}s"
            print(f"{label}: the engine {why} before reading the snapshots:\n{engine.log_tail()}", flush=True)
            return {**result, "keeps_up": False, "reason": f"engine {why} before reading the snapshots"}
        print(f"{label}: snapshots read; publishing {sessions:,} updates/s for {seconds}s", flush=True)
        sampler.start()
        publisher.start_updates(seconds)
        show = BatchPrinter(label, sampler)
        while publisher.running():
            time.sleep(1)
            show(engine.commits())
            if not engine.alive():
                break
        publisher.stop()
        if publisher.errors:
            raise RuntimeError(f"publisher: {publisher.errors[0]}")
        ended = publisher.ended or time.time()
        # Let the engine commit what was published (within two intervals and a margin): the last
        # updates' latency is then measured rather than dropped.
        _wait_for(engine, sampler.sample(), 2 * trigger_s + 30, show)
        died = engine.proc.poll()
        commits, running, stopped = engine.commits(), engine.in_flight(), time.time()
    finally:
        publisher.stop()
        sampler.stop()
        engine.stop()
    t0 = publisher.started
    window = (t0 + warmup, ended)
    lag = lag_series(sampler.samples, commits)
    # A batch still running when the engine is stopped counts with the time it had run so far.
    unfinished = [Commit(running[0], running[1], stopped, {})] if running else []
    durations = [c.duration for c in measured_batches(commits + unfinished, window)]
    lats, uncommitted = latencies(publisher.deliveries, commits, since=window[0])
    verdict = keeps_up(durations, lag, window, sessions, trigger_s)
    if died is not None:
        print(f"{label}: the engine exited (rc={died}) during the run:\n{engine.log_tail()}", flush=True)
        verdict = Verdict(False, f"the engine exited (rc={died}) during the run")
    verdict_reason = verdict.reason
    lag_end = [n for t, n in lag if t <= ended]
    out = {
        **result,
        "keeps_up": verdict.keeps_up,
        "reason": verdict_reason,
        "updates_published": publisher.published - sessions,
        "publisher_behind_max_seconds": publisher.behind_max,
        "batch_seconds": {"p50": percentile(durations, 50), "max": max(durations, default=None),
                          "count": len(durations)},
        "lag_end": lag_end[-1] if lag_end else None,
        "latency_seconds": {"p50": percentile(lats, 50), "p95": percentile(lats, 95), "count": len(lats),
                            "uncommitted": uncommitted},
        "batches": [{"batch": c.batch, "started": c.started - t0, "committed": c.committed - t0,
                     "seconds": c.duration, "records": sum(c.end_offsets.values())} for c in commits],
        "lag": [[round(t - t0, 1), n] for t, n in lag],
        "batch_unfinished": {"batch": running[0], "started": running[1] - t0, "seconds_so_far": stopped - running[1]}
        if running else None,
    }
    if engine_name in RECONSTRUCTORS:
        out["metrics_log_batch_seconds"] = engine.spark_batch_seconds()
    b, lt = out["batch_seconds"], out["latency_seconds"]
    print(f"{label}: {'keeps up' if verdict.keeps_up else 'FALLS BEHIND'} ({verdict_reason}); batch p50 "
          f"{_num(b['p50'])}s max {_num(b['max'])}s; lag at end {_int(out['lag_end'])}; latency p50 "
          f"{_num(lt['p50'])}s p95 {_num(lt['p95'])}s over {lt['count']:,} updates "
          f"({uncommitted:,} uncommitted); publisher up to {publisher.behind_max:.2f}s late", flush=True)
    return out


def _num(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _int(x) -> str:
    return "-" if x is None else f"{x:,}"


def table(steps: list[dict], engines: list[str], sizes: list[int]) -> str:
    cols = ["keeps up", "batch p50/max s", "lag at end", "latency p50/p95 s"]
    head = "| N | " + " | ".join(f"{e}: {c}" for e in engines for c in cols) + " |"
    lines = [head, "|---:|" + "---|" * (len(engines) * len(cols))]
    by = {(s["engine"], s["sessions"]): s for s in steps}
    for n in sizes:
        cells = []
        for e in engines:
            s = by.get((e, n))
            if s is None:
                cells += ["-"] * len(cols)
                continue
            b, lt = s.get("batch_seconds") or {}, s.get("latency_seconds") or {}
            cells += ["yes" if s["keeps_up"] else "no", f"{_num(b.get('p50'))} / {_num(b.get('max'))}",
                      _int(s.get("lag_end")), f"{_num(lt.get('p50'))} / {_num(lt.get('p95'))}"]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def largest_kept(steps: list[dict], engine: str) -> int | None:
    kept = [s["sessions"] for s in steps if s["engine"] == engine and s["keeps_up"]]
    return max(kept) if kept else None


# -------------------------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",")]
    if any(n <= 0 or n % SENSORS for n in sizes):
        raise argparse.ArgumentTypeError(f"each fleet size must be a positive multiple of {SENSORS}")
    return sizes


def _engines(text: str) -> list[str]:
    names = list(dict.fromkeys(ALIASES.get(x.strip(), x.strip()) for x in text.split(",")))
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown engine {unknown[0]!r}; choose from {', '.join(ENGINES)}")
    return names


def _trigger(text: str) -> str:
    try:
        Duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _engine_args(name: str, argv: list[str]):
    """The internal subcommands that run one engine (``limit-run``, ``peer-run``)."""
    p = argparse.ArgumentParser(prog=f"fleet_bench {name}")
    for flag in ("--bootstrap-servers", "--topic-pattern", "--output", "--checkpoint", "--trigger"):
        p.add_argument(flag, required=True)
    if name == "peer-run":
        p.add_argument("--log", required=True)
    if name == "limit-run":
        p.add_argument("--max-offsets", type=int, required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "limit-run":
        return limit_run(_engine_args("limit-run", argv[1:]))
    if argv and argv[0] == "peer-run":
        return peer_run(_engine_args("peer-run", argv[1:]))
    p = argparse.ArgumentParser(prog="fleet_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=_sizes, default=[250, 500, 1000, 2000],
                   help="fleet sizes to step through, multiples of 4 (default 250,500,1000,2000)")
    p.add_argument("--engines", type=_engines, default=list(ENGINES),
                   help=f"default {','.join(ENGINES)} (python and jvm: the reconstructor under that engine)")
    p.add_argument("--minutes", type=float, default=3.0, help="how long each fleet publishes updates (default 3)")
    p.add_argument("--trigger", type=_trigger, default="30 seconds", help="the engines' interval (default '30 seconds')")
    p.add_argument("--max-offsets", type=int, default=None,
                   help="the Spark engines' cap on records a batch (default: two intervals' updates, 2 x N x "
                        "interval)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of updates left out of the figures (default: the first third)")
    p.add_argument("--startup-timeout", type=float, default=300.0,
                   help="seconds an engine has to start and read the snapshots (default 300)")
    p.add_argument("--bootstrap-servers", default=None, help="default: the local stack's broker")
    p.add_argument("--json", default="fleet-results.json", help="where to write the raw series")
    p.add_argument("--keep", action="store_true", help="keep the engines' tables, checkpoints and logs")
    args = p.parse_args(argv)
    args.bootstrap_servers = args.bootstrap_servers or localstack.bootstrap_servers()
    try:
        AdminClient({"bootstrap.servers": args.bootstrap_servers, **librdkafka_logging()}).list_topics(timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the broker is the same usage problem
        print(f"fleet_bench: no Kafka broker answers at {args.bootstrap_servers} ({exc}); "
              "start the local stack (make up)", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="recon-fleet-"))
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "started": dt.datetime.now(dt.UTC).isoformat(),
           "settings": {"sessions": args.sessions, "engines": args.engines, "minutes": args.minutes,
                        "trigger": args.trigger, "sensors": SENSORS, "partitions_per_topic": PARTITIONS,
                        "snapshot_rows": SNAPSHOT_ROWS, "rows_per_update": ROWS_PER_UPDATE},
           "steps": []}
    behind: set[str] = set()
    try:
        for n in args.sessions:
            for engine in args.engines:
                if engine in behind:
                    continue
                step = run_step(engine, n, args, work)
                out["steps"].append(step)
                Path(args.json).write_text(json.dumps(out, indent=2, default=str))
                if not step["keeps_up"]:
                    behind.add(engine)
    finally:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        if args.keep:
            print(f"tables, checkpoints and engine logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(out["steps"], args.engines, args.sessions))
    print("\nlargest N that keeps up: " + ", ".join(
        f"{e} {_int(largest_kept(out['steps'], e)) if largest_kept(out['steps'], e) else 'none'}"
        for e in args.engines))
    print(f"raw series written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
