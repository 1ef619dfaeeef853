"""The settings model: every setting declared once, with its type, default, flag, the commands that
take the flag, and its help.  The CLI's flags and ``--help``, the ``RECON_*`` variables, the TOML
keys and the README's configuration table are all generated from these declarations.

pydantic holds the model: typed fields, refusal of unknown keys, and a model's equality and dump
for ``config show``.  The layering (file, environment, flags) is ``layers``'s, which names the
layer a bad value came from.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from reconstructor.core.policy import IntegrityPolicy, OnDrift, OnViolation
from reconstructor.core.resync import DEFAULT_RESYNC_INTERVAL
from reconstructor.errors import UsageError
from reconstructor.settings.durations import (
    AVAILABLE_NOW,
    SAFE_VACUUM_RETENTION,
    Duration,
    Trigger,
    duration_text,
    milliseconds,
)
from reconstructor.settings.secrets import redact

if TYPE_CHECKING:
    from reconstructor.contract.row_schema import RowSchema
    from reconstructor.core.step_spec import StepSpec

# Records per micro-batch unless set.  A batch pays a fixed cost (three Delta transactions, the
# state store commit) whatever its size, so larger batches cost less per update; but a first run
# over a long backlog, uncapped, is one batch holding all of it in the batch cache and in the state
# function's frames.  200,000 keeps a batch's memory to a few hundred MB on a small driver while
# the fixed cost stays a small share of it.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000
COMPACTION_OFF = "off"  # compact_every: no in-stream compaction

# The commands a flag may belong to.
RUN, REPLAY, COMPACT, STATE, VERIFY, ASOF, CONFIG = "run", "replay", "compact", "state", "verify", "asof", "config"
CHECK = "check"
JARS = "jars"
_STREAM = (RUN, REPLAY, CONFIG)
_SPARK = (RUN, REPLAY, COMPACT, STATE, CONFIG)


def setting(default: Any, help: str, *, flag: str | None = None, commands: tuple[str, ...] = (),
            metavar: str | None = None, shown: str | None = None, zero: bool = False,
            help_for: dict[str, str] | None = None, secret: bool = False) -> Any:
    """A setting's declaration.  ``flag`` and ``commands``: the flag (default ``--<name>``) and the
    commands that take it (none: file and environment only); ``shown``: the default as the help and
    the README say it, when the value alone does not; ``zero``: whether zero means something (a
    zero grace, no restart) rather than a typo; ``help_for``: a command's own wording."""
    extra: dict[str, Any] = {
        "flag": flag, "commands": commands, "metavar": metavar, "shown": shown, "zero": zero,
        "help_for": help_for or {}, "secret": secret}
    return Field(default, description=help, json_schema_extra=extra)


class StatefulEngine(str, enum.Enum):
    """Where the stateful step runs: the Python core in ``applyInPandasWithState``, or its JVM port
    in ``flatMapGroupsWithState`` (the engine jar).  Both write the same tables; a checkpoint keeps
    the engine it started with (``spark.engines.engine_for``)."""

    PYTHON = "python"
    JVM = "jvm"


class S3Settings(BaseModel):
    """The ``[s3]`` table (``RECON_S3_*``): the endpoint and credentials of s3a:// outputs; unset,
    the default AWS credential chain."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = setting(None, "S3 endpoint URL (unset: AWS's)")
    region: str | None = setting(None, "S3 region", shown="us-east-1")
    access_key: str | None = setting(None, "access key id (a secret)", secret=True)
    secret_key: str | None = setting(None, "secret access key (a secret)", secret=True)
    path_style: bool = setting(False, "path-style requests (an endpoint without virtual hosts)")


#: The settings that some commands cannot run without (see ``Settings.need``).
Needed = Literal["bootstrap_servers", "topic_pattern", "output", "checkpoint"]


class Settings(BaseModel):
    """A command's effective settings: defaults < the TOML file < ``RECON_*`` < flags."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    bootstrap_servers: str | None = setting(
        None, "Kafka bootstrap servers, host:port[,...]", metavar="HOSTS", commands=(*_STREAM, CHECK, VERIFY),
        help_for={VERIFY: "Kafka bootstrap servers, host:port[,...] (with --against-kafka)"})
    topic_pattern: str | None = setting(
        None, "anchored regex of the topics to read, e.g. 'sensor-.*'", metavar="REGEX",
        commands=(RUN, REPLAY, VERIFY, CHECK, CONFIG),
        help_for={VERIFY: "check only the topics this anchored regex matches"})
    output: str | None = setting(
        None, "output root: a local path or s3a://bucket/prefix", metavar="URI",
        commands=(RUN, REPLAY, COMPACT, VERIFY, ASOF, CONFIG))
    checkpoint: str | None = setting(
        None, "streaming checkpoint location (same storage as the output)", metavar="URI",
        commands=(RUN, REPLAY, STATE, CONFIG))
    trigger: Trigger = setting(
        AVAILABLE_NOW, "when micro-batches run: available-now (what Kafka holds, then stop), once, "
        "or an interval such as '1 minute' (continuously)", metavar="WHEN", commands=(RUN, CONFIG))
    starting_offsets: str = setting(
        "earliest", "where a first run starts: earliest, latest or JSON offsets (first run only)",
        metavar="WHERE", commands=(RUN, CONFIG))
    max_offsets_per_trigger: int | None = setting(
        DEFAULT_MAX_OFFSETS_PER_TRIGGER, "cap on Kafka records per micro-batch", metavar="N",
        commands=_STREAM, shown=f"{DEFAULT_MAX_OFFSETS_PER_TRIGGER:,}")
    session_timeout: Duration = setting(
        Duration("1 hour"), "processing time after which a silent session is timed_out (check: by "
        "its records' Kafka timestamps)", metavar="DURATION", commands=(*_STREAM, CHECK),
        help_for={CHECK: "silence after which a session is timed_out, by its records' Kafka timestamps"})
    state_retention: Duration = setting(
        Duration("7 days"), "how long a silent session's state is kept after its timeout "
        "(longer than the timeout; check: by its records' Kafka timestamps)", metavar="DURATION",
        commands=(*_STREAM, CHECK),
        help_for={CHECK: "silence after which a session's state is gone and its id starts a new session, "
                         "by its records' Kafka timestamps (longer than the timeout)"})
    row_schema: str | None = setting(
        None, "the row columns and types: a JSON file like schemas/demo_sensor.json", metavar="FILE",
        commands=(*_SPARK, CHECK), shown="the bundled demo_sensor")
    await_snapshot: bool = setting(
        False, "skip a session's updates until its next snapshot (replays that start mid-session)",
        commands=(REPLAY,))
    on_violation: OnViolation = setting(
        OnViolation.FAIL, "fail: stop on the first violation; quarantine: set the session aside, "
        "record its records in the violations table, resync it at its next snapshot", commands=_STREAM)
    resync_topic: str | None = setting(
        None, "ask a quarantined session's sensor for a snapshot: one JSON request per session, keyed by "
        "its id, to this Kafka topic (at least once; never from a replay; not a topic --topic-pattern "
        "reads)", metavar="TOPIC", commands=(RUN, CONFIG), shown="off")
    resync_interval: Duration = setting(
        Duration(duration_text(DEFAULT_RESYNC_INTERVAL)), "how often a session that stays quarantined "
        "is asked again (while its records keep arriving)", metavar="DURATION", commands=(RUN, CONFIG))
    on_drift: OnDrift = setting(
        OnDrift.RECORD, "a snapshot that differs from the table rebuilt from the updates: record a "
        "SNAPSHOT_DRIFT row in violations, fail the query (exit 3), or ignore it (no audit)",
        commands=(*_STREAM, CHECK))
    engine: StatefulEngine | None = setting(
        None, "the stateful step: jvm (the core's port in flatMapGroupsWithState, the faster; needs the "
        "engine jar, which the wheel carries) or python (the core itself, in applyInPandasWithState; no "
        "jar). A checkpoint keeps the engine it started with", commands=_STREAM,
        shown="the checkpoint's; for a new checkpoint jvm when the engine jar is on Spark's classpath, "
        "else python")
    catalog: str | None = setting(
        None, "register the four tables and the row_versions view by name in this schema of the "
        "session's catalog (e.g. main.sensors), as external Delta tables at the output's paths",
        metavar="SCHEMA", commands=(RUN, REPLAY, CONFIG), shown="off")
    catalog_replace: bool = setting(
        False, "point --catalog names registered at another output to this one (after a replay into a "
        "new output)", commands=(RUN, REPLAY))
    compact_every: Duration | None = setting(
        Duration("1 hour"), "in-stream compaction interval ('off' to disable)", metavar="DURATION",
        commands=(RUN, CONFIG))
    compact_grace: Duration = setting(
        Duration("15 minutes"), "how long after its end an hour counts as closed", flag="--grace",
        metavar="DURATION", commands=(COMPACT,), zero=True)
    vacuum_retention: Duration = setting(
        SAFE_VACUUM_RETENTION, "VACUUM retention (under 168 hours only with --unsafe-vacuum-retention)",
        metavar="DURATION", commands=(COMPACT,))
    unsafe_vacuum_retention: bool = setting(
        False, "allow a VACUUM retention under 168 hours. Unsafe: VACUUM may delete files that a "
        "reader or a concurrent writer still needs, failing that query or corrupting its result",
        commands=(RUN, REPLAY, COMPACT, CONFIG))
    restart_attempts: int | None = setting(
        None, "restart a query that failed (not on a violation or bad usage) up to N times in a row "
        "from its checkpoint; 0: never", metavar="N", commands=(RUN, CONFIG), zero=True,
        shown="5 with an interval trigger, 0 with available-now")
    restart_backoff: Duration = setting(
        Duration("2 seconds"), "wait before the first restart, doubling each attempt up to 1 minute",
        metavar="DURATION", commands=(RUN, CONFIG))
    lease_ttl: Duration = setting(
        Duration("2 minutes"), "the output's writer lease: how long a driver that stopped renewing "
        "it (crashed) still holds it", metavar="DURATION", commands=(RUN, REPLAY, COMPACT, CONFIG))
    chain_key: str | None = setting(
        None, "the change log's HMAC key (a secret: prefer RECON_CHAIN_KEY or the config file)",
        metavar="SECRET", commands=(RUN, REPLAY, VERIFY), shown="none: plain SHA-256 digests", secret=True)
    shuffle_partitions: int | None = setting(
        None, "state partitions; a checkpoint keeps the number it started with, so on a cluster set "
        "it to the executors' cores before the first run", shown="driver cores (at least 2)")
    master: str | None = setting(
        None, "Spark master", metavar="URL", commands=_SPARK, shown="local[*] unless spark-submit set one")
    jars_dir: str | None = setting(
        None, "a folder whose spark/ jars go on the classpath, as `make jars` or `reconstructor jars DIR` "
        "fill it; without one, a driver gets Delta and the Kafka source from Maven (leave unset on "
        "Databricks and EMR, which provide them)",
        shown=".jars in the working directory, else in the checkout the package is installed from")
    metrics_port: int | None = setting(
        None, "serve the run's metrics in Prometheus' text format on this port", metavar="PORT",
        commands=_STREAM, shown="off")
    metrics_host: str = setting(
        "127.0.0.1", "the address the metrics port listens on (0.0.0.0: every interface)",
        metavar="ADDR", commands=_STREAM)
    metrics_log: str | None = setting(
        None, "append one JSON line of metrics per micro-batch to this file", metavar="FILE",
        commands=_STREAM, shown="off")
    kafka: dict[str, str] = Field(default_factory=dict, description=(
        "passed to Spark's Kafka source as kafka.<name> (security, ...)"))
    spark: dict[str, str] = Field(default_factory=dict, description="any Spark setting")
    s3: S3Settings = Field(default_factory=S3Settings, description=(
        "endpoint, region, access_key, secret_key, path_style (unset: the default AWS credential chain)"))

    def policy(self) -> IntegrityPolicy:
        return IntegrityPolicy(self.on_violation, self.on_drift)

    def step_spec(self, schema: RowSchema) -> StepSpec:
        """The stateful step's spec (``core.step_spec``), the same for both engines."""
        from reconstructor.core.step_spec import StepSpec  # it loads Arrow, which --help does without

        return StepSpec(schema, session_timeout_ms=milliseconds(self.session_timeout),
                        state_retention_ms=milliseconds(self.state_retention), await_snapshot=self.await_snapshot,
                        policy=self.policy(), chain_key=self.chain_key or None)

    def need(self, name: Needed) -> str:
        """A place the command cannot run without: the setting's value, or a ``UsageError`` naming
        its flag, its variable and the config file (the commands check theirs before they start)."""
        self.require(name)
        return str(getattr(self, name))

    def require(self, *names: Needed) -> None:
        """Every one of ``names`` set, or one ``UsageError`` naming the missing flags."""
        missing = [n for n in names if getattr(self, n) in (None, "")]
        if missing:
            flags = ", ".join("--" + n.replace("_", "-") for n in missing)
            raise UsageError(f"missing {flags} (or set it in --config / RECON_{missing[0].upper()})")

    def redacted(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data["s3"] = self.s3.model_dump()
        return cast(dict[str, Any], redact(data))

    def to_toml(self) -> str:
        """The effective settings as TOML, secrets redacted (``config show``); it loads back to
        the same settings."""
        data = self.redacted()
        if self.compact_every is None:
            data["compact_every"] = COMPACTION_OFF
        lines = [f"{key} = {_toml_value(value)}" for key, value in data.items()
                 if not isinstance(value, dict) and value is not None]
        for key, value in data.items():
            if isinstance(value, dict) and value:
                lines.append(f"\n[{key}]")
                lines += [f"{json.dumps(k) if '.' in k else k} = {_toml_value(v)}"
                          for k, v in value.items() if v is not None]
        return "\n".join(lines) + "\n"


#: The settings that hold one value (a flag, a RECON_* variable, a top-level key of the file).
TABLES = ("kafka", "spark", "s3")
SCALAR_SETTINGS = tuple(name for name in Settings.model_fields if name not in TABLES)


def declaration(name: str, model: type[BaseModel] = Settings) -> dict[str, Any]:
    """A setting's declared metadata (see ``setting``)."""
    extra = model.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_of(name: str) -> str:
    """A setting's flag: as declared, else ``--<name>`` with dashes."""
    return declaration(name)["flag"] or f"--{name.replace('_', '-')}"


def default_jars_dir(cwd: Path | None = None, checkout: Path | None = None) -> Path:
    """Where the JVM jars are when ``jars_dir`` is not set: ``.jars`` in the working directory when
    it holds Spark jars, else the ``.jars`` that ``make jars`` filled in the checkout this package
    is installed from (``make`` installs it editable), so that the installed CLI runs from any
    folder.  Databricks and EMR provide the jars themselves, and neither folder is there."""
    here = (cwd or Path.cwd()) / ".jars"
    if any((here / "spark").glob("*.jar")):
        return here
    beside = (checkout or Path(__file__).resolve().parents[2]) / ".jars"
    return beside if any((beside / "spark").glob("*.jar")) else here


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dt.timedelta):
        return json.dumps(duration_text(value))
    if isinstance(value, enum.Enum):
        return json.dumps(value.value)
    return json.dumps(str(value))
