"""``reconstructor check`` against the single-process peer, on the throughput benchmark's default fleet.

``make bench-check`` (``python -m tests.benchmarks.check_bench``): publishes the default fleet
(4 sensors x 10 sessions, 200-row snapshots, 1,000 updates of 3 rows each: 40,040 records on 4
topics x 3 partitions), then runs, alternately and ``--repeat`` times, ``reconstructor check`` as a
process of its own and the peer (``tests.benchmarks.peer.run_peer``: confluent-kafka, ``json``, the
same integrity checks on dicts, delta-rs writes) in this one.  Each is timed from its start of
reading to its end: ``check``'s own ``seconds`` (its report), the peer's call; ``check``'s whole
process (interpreter, imports, broker lookups) is printed beside it.  No JVM starts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from reconstructor.contract.row_schema import RowSchema
from tests.benchmarks.peer import run_peer
from tests.support.kafka import create_topics
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet, publish
from workbench.producer import SensorProducer

PARTITIONS = 3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="measured runs of each; the median counts")
    p.add_argument("--sensors", type=int, default=4)
    p.add_argument("--sessions", type=int, default=10, help="sessions per sensor")
    p.add_argument("--updates", type=int, default=1000, help="update messages per session")
    args = p.parse_args(argv)

    localstack.up()
    spec = FleetSpec(topic_prefix=f"checkbench{uuid.uuid4().hex[:8]}-sensor-", sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=200, updates=args.updates, rows_per_update=3,
                     end_sessions=False, seed=11)
    messages = list(plan_fleet(spec))
    bootstrap = localstack.bootstrap_servers()
    create_topics(bootstrap, dict.fromkeys(spec.topics(), PARTITIONS))
    publish(SensorProducer(bootstrap), messages, dict.fromkeys(spec.topics(), PARTITIONS))
    pattern = f"{spec.topic_prefix}[0-9]+"
    print(f"fleet: {len(messages):,} records on {args.sensors} topics x {PARTITIONS} partitions", flush=True)
    work = Path(tempfile.mkdtemp(prefix="recon-check-bench-"))
    checks, wholes, peers = [], [], []
    for i in range(args.repeat):
        started = time.perf_counter()
        ran = subprocess.run([sys.executable, "-m", "reconstructor", "check", "--bootstrap-servers", bootstrap,
                              "--topic-pattern", pattern, "--format", "json"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}, check=False)
        wholes.append(time.perf_counter() - started)
        if ran.returncode != 0:
            print(ran.stdout, ran.stderr, file=sys.stderr)
            return 1
        report = json.loads(ran.stdout)
        checks.append(report["seconds"])
        started = time.perf_counter()
        run_peer(bootstrap, pattern, str(work / f"peer-{i}" / "row_changes"), RowSchema.load(),
                 group=f"peer-{uuid.uuid4().hex[:8]}")
        peers.append(time.perf_counter() - started)
        print(f"round {i + 1}: check {checks[-1]:.2f} s (whole process {wholes[-1]:.2f} s), peer {peers[-1]:.2f} s",
              flush=True)
    check_s, peer_s, whole_s = (statistics.median(x) for x in (checks, peers, wholes))
    n = len(messages)
    print(f"check: {n / check_s:,.0f} records/s ({check_s:.2f} s; whole process {whole_s:.2f} s); "
          f"peer: {n / peer_s:,.0f} records/s ({peer_s:.2f} s); check / peer: {peer_s / check_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
