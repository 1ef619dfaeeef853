"""``python -m workbench``: the local workbench's commands, run from a checkout.

- ``up | down | status | jars``: the local Kafka broker and S3 endpoint (``localstack``);
- ``produce``: the demo sensor fleet, with fault injection;
- ``demo``: the stack up, a fleet produced, ``reconstructor run`` over it, a summary.

The product's CLI (``reconstructor``) carries none of these: a deployed job has no local stack.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from reconstructor.core.policy import OnViolation
from reconstructor.errors import EXIT_OK
from reconstructor.failures import explain
from workbench.fleet import FAULTS


def _add_fleet_flags(p: argparse.ArgumentParser, bootstrap: bool = True) -> None:
    if bootstrap:
        p.add_argument("--bootstrap-servers", metavar="HOSTS", default=None,
                       help="Kafka bootstrap servers (default: the local stack)")
    p.add_argument("--topic-prefix", default="sensor-", help="topics are <prefix>0, <prefix>1, ... (default sensor-)")
    p.add_argument("--sensors", type=int, default=3, help="topics, one per sensor (default 3)")
    p.add_argument("--sessions", type=int, default=2, help="capture sessions per sensor (default 2)")
    p.add_argument("--rows", type=int, default=200, help="rows in each session's table (default 200)")
    p.add_argument("--updates", type=int, default=100, help="update messages per session (default 100)")
    p.add_argument("--rows-per-update", type=int, default=3)
    p.add_argument("--resync-every", type=int, default=0, help="send a fresh snapshot every N updates")
    p.add_argument("--partitions", type=int, default=3, help="partitions of each topic it creates (default 3)")
    p.add_argument("--no-end", action="store_true", help="leave the sessions open")
    p.add_argument("--open-sessions", type=int, default=None, metavar="N",
                   help="leave the last N sessions of each sensor open, end the others (default: none for "
                        "produce; half of each sensor's sessions, rounded down, for demo)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--inject", choices=FAULTS,
                   help="break one session on purpose (gap-resync: a lost update, then a snapshot of the "
                        "sensor's table; drift: an update that lost its rows, then such a snapshot)")
    p.add_argument("-v", "--verbose", action="store_true", help="log more (librdkafka's notices too)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench",
                                     description="The local workbench: the demo sensor fleet on the local stack.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    produce = sub.add_parser("produce", help="the demo sensor fleet, with fault injection",
                             description="Publish sessions (snapshot, updates, end) for a fleet of demo sensors.",
                             epilog="examples:\n  python -m workbench produce --sensors 3 --sessions 2 --rows 200 "
                                    "--updates 500 --inject gap\n",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_fleet_flags(produce)
    produce.add_argument("--honor-resync", metavar="TOPIC",
                         help="the sensors answer the reconstructor's resync requests in TOPIC (its --resync-topic) "
                              "with a snapshot, holding their sessions' ends back until --honor-for has passed")
    produce.add_argument("--honor-for", type=float, default=60.0, metavar="SECONDS",
                         help="how long the sensors answer requests (default 60)")
    demo = sub.add_parser("demo", help="start local Kafka and S3 if needed, produce, reconstruct, summarise",
                          description="The whole pipeline on the local stack (127.0.0.1:9092, http://127.0.0.1:9000).",
                          epilog="examples:\n  python -m workbench demo --inject gap-resync --on-violation quarantine\n"
                                 "  python -m workbench demo --inject gap --on-violation quarantine "
                                 "--resync-topic sensor-resync\n",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_fleet_flags(demo, bootstrap=False)
    demo.add_argument("--on-violation", choices=[v.value for v in OnViolation],
                      help="what the run does on a violation (default fail); try quarantine with --inject gap-resync")
    demo.add_argument("--resync-topic", metavar="TOPIC",
                      help="the run asks quarantined sessions' sensors for a snapshot in TOPIC, and the demo's "
                           "sensors answer; try with --inject gap --on-violation quarantine")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from workbench import demo

    try:
        return {"produce": demo.produce, "demo": demo.demo}[args.command](args) or EXIT_OK
    except Exception as exc:  # noqa: BLE001 - every failure ends as one line, as the product's do
        failure = explain(exc)
        print(f"reconstructor: {failure}", file=sys.stderr)
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
