"""A scheduled run as the scheduler pays it: whole processes, wall clock, side by side.

``make bench BENCH_ARGS=scheduled`` (or ``python -m tests.benchmarks.scheduled_bench``).  A fleet of
open sessions (3 sensors, 4 sessions each, 50 rows, 100 updates) goes to Kafka once.  Then, for each
subject, a first run into new tables and ``--idle-runs`` runs with nothing new, each a new process
started as a scheduler starts it:

- the stateless limit (``tests.benchmarks.limit_process``): a SparkSession with the same jars,
  Spark's Kafka source, the value cast to string, one Delta append, ``availableNow``;
- ``reconstructor run --trigger available-now`` under each engine, with its defaults (compaction
  every hour, the writer lease on S3).

The subjects alternate within each round, and the median counts.  The tables and checkpoints are on
the local S3 endpoint (``--store local`` puts them in a folder).  Targets: a run with nothing new at
most 1.5x the limit's, a first run at most 2x.  Figures go to stdout and a JSON file; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.support.faulty_s3 import s3_env
from tests.support.kafka import create_topics
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet, publish
from workbench.producer import SensorProducer

PARTITIONS = 2
#: The targets: a subject's time over the limit's.
TARGETS = {"first run": 2.0, "nothing new": 1.5}


def _fleet(sensors: int, sessions: int, rows: int, updates: int) -> tuple[str, int]:
    """The fleet in Kafka; its topic pattern and message count."""
    spec = FleetSpec(topic_prefix=f"sched{uuid.uuid4().hex[:8]}-sensor-", sensors=sensors,
                     sessions_per_sensor=sessions, rows=rows, updates=updates, rows_per_update=3,
                     end_sessions=False, seed=17, start=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    messages = list(plan_fleet(spec))
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in spec.topics()})
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: PARTITIONS for t in spec.topics()})
    return f"{spec.topic_prefix}[0-9]+", len(messages)


def _command(subject: str, pattern: str, output: str, checkpoint: str) -> list[str]:
    if subject == "stateless limit":
        return [sys.executable, "-m", "tests.benchmarks.limit_process", "--pattern", pattern,
                "--output", f"{output}/row_changes", "--checkpoint", checkpoint]
    engine = subject.rsplit(" ", 1)[-1]
    return [sys.executable, "-m", "reconstructor", "run", "--topic-pattern", pattern, "--output", output,
            "--checkpoint", checkpoint, "--trigger", "available-now", "--engine", engine]


def _timed(command: list[str], env: dict[str, str], log: Path) -> float:
    started = time.perf_counter()
    with log.open("ab") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... exited {done.returncode}; see {log}")
    return seconds


#: The fleet: 12 open sessions (3 sensors, 4 sessions each, 50 rows, 100 updates of 3 rows).
FLEET = {"sensors": 3, "sessions": 4, "rows": 50, "updates": 100}


def measure(args) -> dict:
    """``args``: ``rounds``, ``idle_runs``, ``store``, ``engines`` (names), and the fleet's
    ``sensors``, ``sessions``, ``rows``, ``updates``."""
    pattern, messages = _fleet(args.sensors, args.sessions, args.rows, args.updates)
    print(f"fleet: {messages:,} messages on {args.sensors} topics x {PARTITIONS} partitions", flush=True)
    env = {**os.environ, "RECON_BOOTSTRAP_SERVERS": localstack.bootstrap_servers(), "PYTHONUNBUFFERED": "1"}
    if args.store == "s3":
        env.update(s3_env(localstack.s3_endpoint()))
    subjects = ["stateless limit", *(f"reconstructor, {e}" for e in args.engines)]
    first: dict[str, list[float]] = {s: [] for s in subjects}
    idle: dict[str, list[float]] = {s: [] for s in subjects}
    work = Path(tempfile.mkdtemp(prefix="recon-scheduled-"))
    for round_ in range(args.rounds):
        for subject in subjects:
            name = f"{subject.replace(', ', '-').replace(' ', '-')}-{round_}-{uuid.uuid4().hex[:6]}"
            root = (f"s3a://{localstack.S3_BUCKET}/bench-scheduled/{name}" if args.store == "s3"
                    else str(work / name))
            command = _command(subject, pattern, f"{root}/out", f"{root}/chk")
            log = work / f"{name}.log"
            first[subject].append(_timed(command, env, log))
            runs = [_timed(command, env, log) for _ in range(args.idle_runs)]
            idle[subject].append(statistics.median(runs))
            print(f"{subject}: first run {first[subject][-1]:.1f}s, nothing new "
                  f"{', '.join(f'{r:.1f}' for r in runs)}s", flush=True)
    limit = "stateless limit"
    table = {}
    for subject in subjects:
        f, i = statistics.median(first[subject]), statistics.median(idle[subject])
        table[subject] = {"first_run_s": f, "first_runs": first[subject], "nothing_new_s": i,
                          "nothing_new_runs": idle[subject],
                          "first_run_ratio": f / statistics.median(first[limit]),
                          "nothing_new_ratio": i / statistics.median(idle[limit])}
    return {"fleet": {"sensors": args.sensors, "sessions_per_sensor": args.sessions, "rows": args.rows,
                      "updates": args.updates, "messages": messages, "partitions_per_topic": PARTITIONS},
            "store": args.store, "rounds": args.rounds, "idle_runs": args.idle_runs, "subjects": table,
            "targets": TARGETS}


def print_table(s: dict) -> None:
    print("\n| subject | first run, s | nothing new, s | first run / limit's | nothing new / limit's |"
          "\n|---|---:|---:|---:|---:|")
    for subject, r in s["subjects"].items():
        print(f"| {subject} | {r['first_run_s']:.1f} | {r['nothing_new_s']:.1f} | {r['first_run_ratio']:.2f} | "
              f"{r['nothing_new_ratio']:.2f} |")
    print(f"targets: first run / limit's <= {TARGETS['first run']}, nothing new / limit's <= "
          f"{TARGETS['nothing new']} (medians of {s['rounds']} rounds; nothing new: the median of "
          f"{s['idle_runs']} runs in each)", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sensors", type=int, default=FLEET["sensors"])
    p.add_argument("--sessions", type=int, default=FLEET["sessions"], help="sessions per sensor")
    p.add_argument("--rows", type=int, default=FLEET["rows"])
    p.add_argument("--updates", type=int, default=FLEET["updates"])
    p.add_argument("--engines", default="python,jvm", type=lambda s: s.split(","))
    p.add_argument("--json", default="bench-scheduled.json")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every subject; the median counts")
    p.add_argument("--idle-runs", type=int, default=2, help="runs with nothing new after each first run")
    p.add_argument("--store", choices=["s3", "local"], default="s3",
                   help="the tables and checkpoints on the local S3 endpoint (default) or in a folder")
    args = p.parse_args(argv)
    localstack.up()
    out = measure(args)
    Path(args.json).write_text(json.dumps(out, indent=2))
    print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
