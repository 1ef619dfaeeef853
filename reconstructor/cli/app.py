"""``reconstructor``: the command line (also ``python -m reconstructor``).

Exit codes: 0 done; 2 bad usage or config (nothing started); 3 integrity violation; 130 and 143
stopped by SIGINT (Ctrl-C) and SIGTERM; 1 any other failure.  Every failure or stop ends with one
line on stderr saying what is wrong or where the run stopped.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import textwrap
import traceback
from typing import Sequence

from reconstructor.cli import commands
from reconstructor import settings as configuration
from reconstructor.core.policy import OnDrift, OnViolation
from reconstructor.errors import EXIT_OK, EXIT_USAGE, StoppedBySignal
from reconstructor.cli.failures import explain

log = logging.getLogger("reconstructor")


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (its default prints usage to stderr, also exit 2)."""

    def error(self, message: str):  # noqa: D401
        if any(f"invalid choice: '{moved}'" in message for moved in _WORKBENCH_COMMANDS):
            message += (" (the demo fleet's commands are the workbench's, in a checkout: "
                        "make demo, or python -m workbench demo|produce)")
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: Commands of the local workbench (``python -m workbench``), which the product does not carry.
_WORKBENCH_COMMANDS = ("demo", "produce")


def _fmt(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def _add_common(p: argparse.ArgumentParser, *, kafka: bool = True, output: bool = True,
                checkpoint: bool = True) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML config file (flags win over it; env RECON_* in between)")
    if kafka:
        p.add_argument("--bootstrap-servers", metavar="HOSTS", help="Kafka bootstrap servers, host:port[,...]")
    if output:
        p.add_argument("--output", metavar="URI", help="output root: a local path or s3a://bucket/prefix")
    if checkpoint:
        p.add_argument("--checkpoint", metavar="URI", help="streaming checkpoint location (same storage as the output)")
    p.add_argument("--row-schema", metavar="FILE", help="row schema JSON (default: the bundled demo_sensor)")
    p.add_argument("--master", metavar="URL", help="Spark master (default: local[*] unless spark-submit set one)")
    p.add_argument("-v", "--verbose", action="store_true", help="log more, with Spark's warnings and stack traces")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="reconstructor",
        formatter_class=_fmt,
        description="Rebuild sensor tables from ordered snapshot/update Kafka streams into Delta tables.",
        epilog=textwrap.dedent("""\
            exit codes: 0 done, 2 bad usage or config, 3 integrity violation,
              130/143 stopped by SIGINT/SIGTERM, 1 other failure

            examples:
              reconstructor run --bootstrap-servers 127.0.0.1:9092 --topic-pattern 'sensor-.*' \\
                  --output s3a://recon/tables --checkpoint s3a://recon/checkpoints/main
              reconstructor config show --config prod.toml
            """),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="the streaming job", formatter_class=_fmt,
                         description="Read the topics, rebuild every session in strict seq order, write Delta tables.",
                         epilog=textwrap.dedent("""\
                             examples:
                               reconstructor run --bootstrap-servers 127.0.0.1:9092 --topic-pattern 'sensor-.*' \\
                                   --output /data/recon --checkpoint /data/recon/_checkpoint
                               reconstructor run --config prod.toml --trigger '1 minute'
                             """))
    _add_common(run)
    _add_stream_flags(run)
    _add_chain_flag(run)

    replay = sub.add_parser("replay", help="rebuild from given offsets, a timestamp or each session's last snapshot",
                            formatter_class=_fmt,
                            description="Re-read Kafka from a starting point into the same or another output, "
                                        "with a fresh checkpoint, and stop when caught up.",
                            epilog=textwrap.dedent("""\
                                examples:
                                  reconstructor replay --config prod.toml --from-last-snapshot
                                  reconstructor replay --config prod.toml --from '{"sensor-1": {"0": 1200}}' --await-snapshot
                                  reconstructor replay --config prod.toml --from-timestamp 2026-11-21T08:00:00Z --output /tmp/replay
                                """))
    _add_common(replay)
    replay.add_argument("--topic-pattern", metavar="REGEX", help="anchored regex of the topics to read")
    start = replay.add_mutually_exclusive_group(required=True)
    start.add_argument("--from", dest="from_offsets", metavar="JSON", help='offsets: {"topic": {"partition": offset}}')
    start.add_argument("--from-timestamp", metavar="RFC3339", help="the first offset at or after this time")
    start.add_argument("--from-last-snapshot", action="store_true",
                       help="each open session's last snapshot, from the sessions table")
    replay.add_argument("--await-snapshot", action="store_true", default=None,
                        help="skip a session's updates until its next snapshot (replays that start mid-session)")
    replay.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help=f"cap on records per micro-batch (default {configuration.DEFAULT_MAX_OFFSETS_PER_TRIGGER:,})")
    replay.add_argument("--session-timeout", metavar="DURATION")
    replay.add_argument("--state-retention", metavar="DURATION")
    _add_integrity_flags(replay)
    _add_chain_flag(replay)
    _add_unsafe_vacuum_flag(replay)
    _add_lease_flag(replay)
    _add_metrics_flags(replay)

    compact = sub.add_parser("compact", help="OPTIMIZE closed hours and VACUUM, for schedulers",
                             formatter_class=_fmt,
                             description="Bin-pack the row_changes hours that have closed and VACUUM all tables. "
                                         "On S3 with the single-driver log store, run it only while no stream writes.",
                             epilog="example:\n  reconstructor compact --output s3a://recon/tables --vacuum-retention '168 hours'\n")
    _add_common(compact, kafka=False, checkpoint=False)
    compact.add_argument("--grace", dest="compact_grace", metavar="DURATION",
                         help="how long after its end an hour counts as closed (default 15 minutes)")
    compact.add_argument("--vacuum-retention", metavar="DURATION", help="VACUUM retention (default 168 hours; less needs --unsafe-vacuum-retention)")
    _add_unsafe_vacuum_flag(compact)
    compact.add_argument("--min-files", type=int, default=4, metavar="N",
                         help="compact an hour only when it has more files than this (default 4)")
    _add_lease_flag(compact)

    state = sub.add_parser("state", help="print a session's table from the streaming checkpoint",
                           formatter_class=_fmt,
                           description="Read the state store of a checkpoint (Spark's state data source) and decode "
                                       "the session's Arrow table.",
                           epilog="example:\n  reconstructor state --checkpoint /data/recon/_checkpoint "
                                  "--topic sensor-1 --session sensor-1-session-0\n")
    _add_common(state, kafka=False, output=False)
    state.add_argument("--topic", required=True)
    state.add_argument("--session", required=True)
    state.add_argument("--format", choices=["table", "json", "csv"], default="table")

    verify = sub.add_parser("verify", help="check the output tables at rest against each other (no JVM)",
                            formatter_class=_fmt,
                            description="Read the tables with delta-rs and check them: each change logged once, "
                                        "each session's seqs, row_changes folded equals current_rows and "
                                        "sessions.row_count, quarantined sessions match violations. Exit 3 "
                                        "with the first discrepancy.",
                            epilog=textwrap.dedent("""\
                                examples:
                                  reconstructor verify --output /data/recon
                                  reconstructor verify --config prod.toml --output s3a://recon/tables --topic-pattern 'sensor-1.*'
                                """))
    _add_reader_flags(verify)
    verify.add_argument("--topic-pattern", metavar="REGEX", help="check only the topics this anchored regex matches")
    _add_chain_flag(verify)

    asof = sub.add_parser("asof", help="print a session's table as it was at a seq or an event time",
                          formatter_class=_fmt,
                          description="Fold the session's row_changes (read with delta-rs, no JVM) up to a seq "
                                      "or an event time.",
                          epilog=textwrap.dedent("""\
                              examples:
                                reconstructor asof --output /data/recon --topic sensor-1 --session sensor-1-session-0 --seq 40
                                reconstructor asof --output s3a://recon/tables --topic sensor-1 --session sensor-1-session-0 \\
                                    --at 2026-11-21T10:00:30Z --format csv
                              """))
    _add_reader_flags(asof)
    asof.add_argument("--topic", required=True)
    asof.add_argument("--session", required=True)
    when = asof.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", metavar="RFC3339", help="the changes of messages with an event time (ts) at or before this")
    when.add_argument("--seq", type=int, metavar="N", help="the changes of messages with a seq at or before N")
    asof.add_argument("--format", choices=["table", "json", "csv"], default="table")

    cfg = sub.add_parser("config", help="show the effective configuration (secrets redacted)", formatter_class=_fmt)
    cfg.add_argument("action", choices=["show"])
    _add_common(cfg)
    _add_stream_flags(cfg)
    return parser


def _add_reader_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the commands that read the tables with delta-rs: no Spark, so no --master."""
    p.add_argument("--config", metavar="FILE", help="TOML config file ([s3] settings; flags win, env RECON_* in between)")
    p.add_argument("--output", metavar="URI", help="output root: a local path or s3a://bucket/prefix")
    p.add_argument("-v", "--verbose", action="store_true", help="log more, with stack traces")


def _add_stream_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic-pattern", metavar="REGEX", help="anchored regex of the topics to read, e.g. 'sensor-.*'")
    p.add_argument("--trigger", metavar="WHEN", help="available-now (default) or an interval such as '1 minute'")
    p.add_argument("--starting-offsets", metavar="WHERE", help="earliest (default), latest or JSON offsets (first run only)")
    p.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                   help=f"cap on records per micro-batch (default {configuration.DEFAULT_MAX_OFFSETS_PER_TRIGGER:,})")
    p.add_argument("--session-timeout", metavar="DURATION", help="close a silent session after this (default 1 hour)")
    p.add_argument("--state-retention", metavar="DURATION",
                   help="forget a silent session's state after this (default 7 days; longer than the timeout)")
    p.add_argument("--compact-every", metavar="DURATION", help="in-stream compaction interval (default 1 hour; 'off' to disable)")
    p.add_argument("--restart-attempts", type=int, metavar="N",
                   help="restart a query that failed (not on a violation or bad usage) up to N times in a row "
                        "from its checkpoint (default 5 with an interval trigger, 0 with available-now)")
    p.add_argument("--restart-backoff", metavar="DURATION",
                   help="wait before the first restart, doubling each attempt up to 1 minute (default 2 seconds)")
    _add_lease_flag(p)
    _add_integrity_flags(p)
    _add_unsafe_vacuum_flag(p)
    _add_metrics_flags(p)


def _add_chain_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chain-key", metavar="SECRET",
                   help="the change log's HMAC key (a secret: prefer RECON_CHAIN_KEY or the config file; "
                        "default none: plain SHA-256 digests)")


def _add_lease_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lease-ttl", metavar="DURATION",
                   help="the output's writer lease: how long a crashed driver still holds it (default 2 minutes)")


def _add_metrics_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve the run's metrics in Prometheus' text format on this port (default: off)")
    p.add_argument("--metrics-host", metavar="ADDR",
                   help="the address the metrics port listens on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--metrics-log", metavar="FILE", help="append one JSON line of metrics per micro-batch to FILE")


def _add_integrity_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--on-violation", choices=[v.value for v in OnViolation],
                   help="fail (default): stop on the first violation; quarantine: set the session aside, "
                        "record its records in the violations table, resync it at its next snapshot")
    p.add_argument("--on-drift", choices=[v.value for v in OnDrift],
                   help="a snapshot that differs from the table rebuilt from the updates: record (default) "
                        "a SNAPSHOT_DRIFT row in violations, fail the query, or ignore (no audit)")


def _add_unsafe_vacuum_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unsafe-vacuum-retention", action="store_true", default=None,
                   help="allow a VACUUM retention under 168 hours (config unsafe_vacuum_retention, env "
                        "RECON_UNSAFE_VACUUM_RETENTION). Unsafe: VACUUM may delete files that a reader or "
                        "a concurrent writer still needs, failing that query or corrupting its result")


# --------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _dispatch(args)
    except StoppedBySignal as stopped:  # run and replay: a signal stops the query, one line says where
        print(f"reconstructor: {stopped}", file=sys.stderr, flush=True)
        if stopped.abandoned:
            # The engine's threads that ran the abandoned batch would hold the exit until they end
            # (seconds, or past the grace a scheduler allows); the checkpoint makes waiting needless.
            sys.stdout.flush()
            os._exit(stopped.exit_code)
        return stopped.exit_code
    except KeyboardInterrupt:  # Ctrl-C where no handler of a run took it
        stopped = StoppedBySignal(signal.SIGINT, "interrupted before it finished")
        print(f"reconstructor: {stopped}", file=sys.stderr, flush=True)
        return stopped.exit_code
    except BrokenPipeError:  # the reader went away (`... | head`): nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - every failure ends as one line
        failure = explain(exc, _config_or_none(args))
        if getattr(args, "verbose", False) and (failure is not exc or exc.__cause__ is not None):
            traceback.print_exception(exc)
        print(f"reconstructor: {failure}", file=sys.stderr)
        return failure.exit_code


def _dispatch(args) -> int:
    handlers = {
        "run": commands.run,
        "replay": commands.replay,
        "compact": commands.compact,
        "state": commands.state,
        "verify": commands.verify,
        "asof": commands.asof,
        "config": commands.config_show,
    }
    return handlers[args.command](args) or EXIT_OK


def _config_or_none(args) -> configuration.Config | None:
    """The settings a failure's line may name; none when they are what failed to load."""
    try:
        return configuration.from_args(args)
    except Exception:  # noqa: BLE001
        return None



__all__ = ["main", "build_parser"]
