"""The command line's parser.  Each command's settings flags are generated from the settings model
(``reconstructor.settings.model``): a flag's name, type, choices, help and default are declared
there once.  What is here is each command's own arguments (where a replay starts, which session
``state`` prints) and its help page.
"""

from __future__ import annotations

import argparse
import enum
import textwrap

from reconstructor.errors import EXIT_USAGE
from reconstructor.settings.layers import declared_type, env_name
from reconstructor.settings.model import (
    ASOF,
    CHECK,
    COMPACT,
    CONFIG,
    JARS,
    REPLAY,
    RUN,
    SCALAR_SETTINGS,
    STATE,
    VERIFY,
    Settings,
    declaration,
    flag_of,
)
from reconstructor.settings.reference import default_text

#: Commands of the local workbench (``python -m workbench``), which the product does not carry.
WORKBENCH_COMMANDS = ("demo", "produce")


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (its default prints usage to stderr, also exit 2)."""

    def error(self, message: str):
        if any(f"invalid choice: '{moved}'" in message for moved in WORKBENCH_COMMANDS):
            message += (" (the demo fleet's commands are the workbench's, in a checkout: "
                        "make demo, or python -m workbench demo|produce)")
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _fmt(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def _examples(*lines: str) -> str:
    return "examples:\n" + "".join(f"  {line}\n" for line in lines)


#: Each command: its one-line help, its description and its examples.
COMMANDS = {
    RUN: ("the streaming job",
          "Read the topics, rebuild every session in strict seq order, write Delta tables.",
          _examples("reconstructor run --bootstrap-servers 127.0.0.1:9092 --topic-pattern 'sensor-.*' \\",
                    "    --output /data/recon --checkpoint /data/recon/_checkpoint",
                    "reconstructor run --config prod.toml --trigger '1 minute'")),
    REPLAY: ("rebuild from given offsets, a timestamp or each session's last snapshot",
             "Re-read Kafka from a starting point into the same or another output, with a fresh "
             "checkpoint, and stop when caught up.",
             _examples("reconstructor replay --config prod.toml --from-last-snapshot",
                       "reconstructor replay --config prod.toml --from '{\"sensor-1\": {\"0\": 1200}}' "
                       "--await-snapshot",
                       "reconstructor replay --config prod.toml --from-timestamp 2026-11-21T08:00:00Z "
                       "--output /tmp/replay")),
    COMPACT: ("OPTIMIZE closed hours and VACUUM, for schedulers",
              "Bin-pack the row_changes hours that have closed and VACUUM all tables. On S3 with the "
              "single-driver log store, run it only while no stream writes.",
              _examples("reconstructor compact --output s3a://recon/tables --vacuum-retention '168 hours'")),
    STATE: ("print a session's table from the streaming checkpoint",
            "Read the state store of a checkpoint (Spark's state data source) and decode the session's "
            "Arrow table.",
            _examples("reconstructor state --checkpoint /data/recon/_checkpoint --topic sensor-1 "
                      "--session sensor-1-session-0")),
    VERIFY: ("check the output tables at rest against each other (no JVM)",
             "Read the tables with delta-rs and check them: each change logged once, each session's "
             "seqs, row_changes folded equals current_rows and sessions.row_count, quarantined sessions "
             "match violations, each session's hash chain. With --against-kafka, then each record Kafka "
             "still holds, up to the writer's committed offsets, against the rows the tables hold at its "
             "offset. Exit 3 with the first discrepancy.",
             _examples("reconstructor verify --output /data/recon",
                       "reconstructor verify --config prod.toml --output s3a://recon/tables "
                       "--topic-pattern 'sensor-1.*'",
                       "reconstructor verify --output /data/recon --against-kafka --bootstrap-servers 127.0.0.1:9092",
                       "reconstructor verify --config prod.toml --against-kafka --topic-pattern 'sensor-1.*'")),
    ASOF: ("print a session's table as it was at a seq or an event time",
           "Fold the session's row_changes (read with delta-rs, no JVM) up to a seq or an event time.",
           _examples("reconstructor asof --output /data/recon --topic sensor-1 --session sensor-1-session-0 --seq 40",
                     "reconstructor asof --output s3a://recon/tables --topic sensor-1 --session sensor-1-session-0 \\",
                     "    --at 2026-11-21T10:00:30Z --format csv")),
    CHECK: ("judge every session of a topic or a file by the rules, writing nothing (no JVM)",
            "Read the topics (from the earliest offset, given offsets or a time) or a JSON-lines file of "
            "records, apply the rules in quarantine mode so that each session gets its own verdict, and "
            "print each session's first violation and a summary. Sessions whose start lies before the "
            "first offset read are awaited to their next snapshot and reported as not checked until "
            "then. Exit 0 when clean, 3 when not.",
            _examples("reconstructor check --bootstrap-servers 127.0.0.1:9092 --topic-pattern 'sensor-.*'",
                      "reconstructor check --config prod.toml --from-timestamp 2026-11-28T08:00:00Z --format json",
                      "reconstructor check --file records.jsonl --row-schema schemas/my_sensor.json")),
    CONFIG: ("show the effective configuration (secrets redacted)", None, None),
    JARS: ("write the JVM jars into a folder, for hosts that cannot reach Maven",
           "Resolve the JVM jars a driver needs besides pyspark's (Delta, the Kafka source; S3A with --s3a) "
           "from Maven Central through Spark's own Ivy, and write them with the engine jar into DIR/spark: "
           "set jars_dir / RECON_JARS_DIR to DIR on a host that cannot reach Maven. Ivy caches what it "
           "downloads (in ~/.ivy2.5.2, or [spark] spark.jars.ivy), as a run without jars_dir does; "
           "[spark] spark.jars.repositories or spark.jars.ivySettings name other repositories. Other jars "
           "in DIR/spark are removed. With --engine-only, only DIR/reconstructor-engine.jar, which "
           "Databricks and EMR deployments ship (their platforms provide the rest).",
           _examples("reconstructor jars /opt/recon-jars && RECON_JARS_DIR=/opt/recon-jars reconstructor run ...",
                     "reconstructor jars --s3a /opt/recon-jars          # outputs on s3a:// too",
                     "reconstructor jars --engine-only dist/             # the jar a deployment ships",
                     "reconstructor jars --config mirror.toml /opt/recon-jars  # [spark] spark.jars.repositories")),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="reconstructor", formatter_class=_fmt,
        description="Rebuild sensor tables from ordered snapshot/update Kafka streams into Delta tables.",
        epilog=textwrap.dedent("""\
            exit codes: 0 done, 2 bad usage or config, 3 integrity violation,
              130/143 stopped by SIGINT/SIGTERM, 1 other failure

            examples:
              reconstructor run --bootstrap-servers 127.0.0.1:9092 --topic-pattern 'sensor-.*' \\
                  --output s3a://recon/tables --checkpoint s3a://recon/checkpoints/main
              reconstructor config show --config prod.toml
            """))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for command, (help_line, description, epilog) in COMMANDS.items():
        p = sub.add_parser(command, help=help_line, description=description, epilog=epilog, formatter_class=_fmt)
        _COMMAND_ARGUMENTS[command](p)
        add_setting_flags(p, command)
        p.add_argument("-v", "--verbose", action="store_true", help="log more, with stack traces")
    return parser


def add_setting_flags(p: argparse.ArgumentParser, command: str) -> None:
    """The flags of the settings that ``command`` takes, as the model declares them."""
    p.add_argument("--config", metavar="FILE", help="TOML config file (flags win over it; env RECON_* in between)")
    for name in SCALAR_SETTINGS:
        d = declaration(name)
        if command not in d["commands"]:
            continue
        p.add_argument(flag_of(name), dest=name, default=None,
                       help=flag_help(name, command), **_flag_kind(name, d))


def flag_help(name: str, command: str | None = None) -> str:
    """A setting's help: its declared text, its default and its variable (a secret's default is
    never shown)."""
    d = declaration(name)
    text = d["help_for"].get(command, Settings.model_fields[name].description)
    default = default_text(name)
    return f"{text} (default {default}; env {env_name(name)})" if default else f"{text} (env {env_name(name)})"


def _flag_kind(name: str, d: dict) -> dict:
    kind = declared_type(Settings.model_fields[name].annotation)
    if kind is bool:
        return {"action": "store_true"}
    extra = {"metavar": d["metavar"]} if d["metavar"] else {}
    if kind is int:
        return {"type": int, **extra}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"choices": [v.value for v in kind]}
    return extra


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from", dest="from_offsets", metavar="JSON", help='offsets: {"topic": {"partition": offset}}')
    start.add_argument("--from-timestamp", metavar="RFC3339", help="the first offset at or after this time")
    start.add_argument("--from-last-snapshot", action="store_true",
                       help="each open session's last snapshot, from the sessions table")


def _compact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-files", type=int, default=4, metavar="N",
                   help="compact an hour only when it has more files than this (default 4)")


def _session_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--session", required=True)


def _state_arguments(p: argparse.ArgumentParser) -> None:
    _session_arguments(p)
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")


def _asof_arguments(p: argparse.ArgumentParser) -> None:
    _session_arguments(p)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", metavar="RFC3339",
                      help="the changes of messages with an event time (ts) at or before this")
    when.add_argument("--seq", type=int, metavar="N", help="the changes of messages with a seq at or before N")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")


def _check_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--file", metavar="FILE",
                        help="a JSON-lines file of records instead of Kafka (docs/contract.md: key and value "
                             "in base64)")
    source.add_argument("--from", dest="from_offsets", metavar="JSON",
                        help='start offsets: {"topic": {"partition": offset}} (-2 earliest, -1 the end; '
                             "other partitions from their earliest)")
    source.add_argument("--from-timestamp", metavar="RFC3339",
                        help="each partition's first offset at or after this time")
    p.add_argument("--format", choices=["text", "json"], default="text")


def _verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--against-kafka", action="store_true",
                   help="also hold the tables to the records Kafka still holds, up to the writer's committed "
                        "offsets (needs --bootstrap-servers; [kafka] settings apply)")


def _config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["show"])


def _jars_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="the folder to fill (created if missing)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--s3a", action="store_true",
                      help="S3A (hadoop-aws) too, for s3a:// outputs: its AWS SDK bundle is about 700 MB")
    what.add_argument("--engine-only", action="store_true",
                      help="only DIR/reconstructor-engine.jar, resolving nothing")


_COMMAND_ARGUMENTS = {RUN: lambda p: None, REPLAY: _replay_arguments, COMPACT: _compact_arguments,
                      STATE: _state_arguments, VERIFY: _verify_arguments, ASOF: _asof_arguments,
                      CHECK: _check_arguments, CONFIG: _config_arguments, JARS: _jars_arguments}
