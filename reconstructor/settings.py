"""Effective configuration: defaults, then a TOML file (``--config``), then ``RECON_*`` env, then flags.

Kafka security settings and S3 credentials pass through to Spark untouched but never reach a log
line or ``--help``: ``redacted()`` is the only form that is ever printed.  Durations are parsed
here, once, when the layers are merged; everything after sees ``timedelta``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from reconstructor.core.policy import IntegrityPolicy, OnDrift, OnViolation
from reconstructor.errors import UsageError

# A setting holds a secret when a word of its name says so ("ssl.key.password", "fs.s3a.access.key",
# "fs.azure.account.key.<account>", "spark.ssl.keyPassword"), unless its last word says the value is
# only about the secret: where it lives, its kind, the class that provides it ("ssl.keystore.location",
# "key.serializer", "fs.s3a.aws.credentials.provider", "spark.authenticate.secret.file").  Words, not
# letters: "keystore", "keymanager" and "keyprovider" are other words.  Certificates are public.
_SECRET_WORDS = frozenset({"key", "password", "passwd", "passphrase", "secret", "token", "credential",
                           "credentials", "jaas", "sas"})
_DESCRIPTOR_WORDS = frozenset({"location", "path", "file", "type", "provider", "class", "algorithm",
                               "mechanism", "protocol", "serializer", "deserializer", "url", "uri",
                               "endpoint", "enabled", "length", "bits", "size"})
# camelCase words that are one word in dotted names ("spark.ssl.keyStore" is "ssl.keystore").
_COMPOUNDS = {("key", "store"): "keystore", ("trust", "store"): "truststore",
              ("key", "manager"): "keymanager", ("trust", "manager"): "trustmanager"}
REDACTED = "***"
# A Java system property inside a value ("spark.driver.extraJavaOptions" = "-Xss8m -Dapp.password=x"):
# its value is a secret when its name is one, as a setting's is.  A quoted value, or a quoted
# option ("-Dapp.password=x y"), may hold spaces.
_SYSTEM_PROPERTY = re.compile(r"""(?<!\S)(?P<quote>["'])?(?P<head>-D(?P<name>[^\s=]+)=)"""
                              r"""(?(quote)(?:(?!(?P=quote)).)*|(?:"[^"]*"|'[^']*'|\S*))""")

# Kafka client settings that may come from the environment (RECON_KAFKA_SASL_MECHANISM, ...).
_KAFKA_ENV = re.compile(r"^RECON_KAFKA_((SECURITY|SASL|SSL)_[A-Z0-9_]+)$")


@dataclass
class S3Config:
    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    path_style: bool = False


# The longest duration a setting takes.  Each becomes a wait or a date: a timer's or a sleep's
# wait ends at 292 years (nanoseconds in 64 bits), a date at the year 9999; a longer setting is a
# typo, refused where it is read rather than an OverflowError in a thread or in Spark.
LONGEST_DURATION = dt.timedelta(days=36500)


class Duration(dt.timedelta):
    """A ``timedelta`` read from text ('90 seconds', '30s', '1 hour', '2h', '1.5 days').

    It keeps the words it was given in, so that a message or ``config show`` echoes the value the
    way the operator wrote it."""

    __slots__ = ("text",)
    _UNITS = {"ms": dt.timedelta(milliseconds=1), "millisecond": dt.timedelta(milliseconds=1),
              "s": dt.timedelta(seconds=1), "sec": dt.timedelta(seconds=1),
              "second": dt.timedelta(seconds=1), "m": dt.timedelta(minutes=1),
              "min": dt.timedelta(minutes=1), "minute": dt.timedelta(minutes=1),
              "h": dt.timedelta(hours=1), "hour": dt.timedelta(hours=1),
              "d": dt.timedelta(days=1), "day": dt.timedelta(days=1)}

    def __new__(cls, text: str) -> "Duration":
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", text or "")
        # The unit as written first ("ms"), then without a plural "s" ("seconds", "mins").
        unit = m and next((u for u in (m.group(2).lower(), m.group(2).lower().removesuffix("s"))
                           if u in cls._UNITS), None)
        if unit is None:
            raise ValueError(f"not a duration: {text!r} (use e.g. '30 seconds', '10 minutes', '1 hour')")
        # Whole milliseconds, the finest unit the settings are used in.
        ms = float(m.group(1)) * (cls._UNITS[unit] / dt.timedelta(milliseconds=1))
        if ms > LONGEST_DURATION / dt.timedelta(milliseconds=1):
            raise ValueError(f"too long: {text!r} (at most {duration_text(LONGEST_DURATION)}, about 100 years)")
        self = super().__new__(cls, milliseconds=int(ms))
        self.text = text
        return self

    def __reduce__(self):  # copies (``asdict``) rebuild it from its text
        return (Duration, (self.text,))

    def __str__(self) -> str:
        return self.text


def duration_text(value: dt.timedelta) -> str:
    """A duration as words: as the operator wrote it, else in its largest whole unit ('7 days')."""
    if isinstance(value, Duration):
        return value.text
    for unit, size in (("day", dt.timedelta(days=1)), ("hour", dt.timedelta(hours=1)),
                       ("minute", dt.timedelta(minutes=1)), ("second", dt.timedelta(seconds=1)),
                       ("millisecond", dt.timedelta(milliseconds=1))):
        if value % size == dt.timedelta(0) and value:
            count = value // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return "0 seconds"


# Delta's own floor for VACUUM: a shorter retention may delete files that a reader or a concurrent
# writer still needs.  The default, and below it only with unsafe_vacuum_retention.
SAFE_VACUUM_RETENTION = Duration("168 hours")

# The trigger values that are not an interval.
AVAILABLE_NOW = "available-now"
_NAMED_TRIGGERS = (AVAILABLE_NOW, "availableNow", "once")
COMPACTION_OFF = "off"  # compact_every: no in-stream compaction

# Records per micro-batch unless set.  A batch pays a fixed cost (three Delta transactions, the
# state store commit) whatever its size, so larger batches cost less per update; but a first run
# over a long backlog, uncapped, is one batch holding all of it in the batch cache and in the state
# function's frames.  200,000 keeps a batch's memory to a few hundred MB on a small driver while
# the fixed cost stays a small share of it.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000


@dataclass
class Config:
    bootstrap_servers: str | None = None
    topic_pattern: str | None = None
    output: str | None = None
    checkpoint: str | None = None
    trigger: str | dt.timedelta = AVAILABLE_NOW  # or "once", or an interval
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    session_timeout: dt.timedelta = Duration("1 hour")
    state_retention: dt.timedelta = Duration("7 days")
    row_schema: str | None = None
    await_snapshot: bool = False
    # What a violation does (``fail``: stop; ``quarantine``: set the session aside until its next
    # snapshot) and what a snapshot that differs from the rebuilt table does.
    on_violation: str = OnViolation.FAIL.value
    on_drift: str = OnDrift.RECORD.value
    compact_every: dt.timedelta | None = Duration("1 hour")  # None: no in-stream compaction
    compact_grace: dt.timedelta = Duration("15 minutes")
    vacuum_retention: dt.timedelta = SAFE_VACUUM_RETENTION
    unsafe_vacuum_retention: bool = False  # allow a vacuum_retention under 168 hours
    # Restarts of a failed query in a row (``reconstructor.spark.restarts``); None: 5 for an interval
    # trigger, none for available-now.  The wait before the first, doubling up to a minute.
    restart_attempts: int | None = None
    restart_backoff: dt.timedelta = Duration("2 seconds")
    # The writer lease on the output (``reconstructor.contract.lease``): how long a driver that stopped
    # renewing it (crashed) holds it; renewed every quarter of it.
    lease_ttl: dt.timedelta = Duration("2 minutes")
    # The change log's hash chain (``core.chain``): with a key its digests are HMACs, which an
    # editor without the key cannot recompute.  A secret: redacted wherever settings are printed.
    chain_key: str | None = None
    shuffle_partitions: int | None = None
    master: str | None = None
    # The folder ``make jars`` fills (Spark's jars in its ``spark/`` subfolder); unset, ``.jars``
    # in the working directory (``default_jars_dir``).  Databricks and EMR provide the jars: nothing is there.
    jars_dir: str | None = None
    # Metrics (``reconstructor.metrics.export``): a Prometheus endpoint on metrics_host:metrics_port
    # and a JSON line per batch appended to metrics_log; each off unless set.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_log: str | None = None
    kafka: dict[str, str] = field(default_factory=dict)
    spark: dict[str, str] = field(default_factory=dict)
    s3: S3Config = field(default_factory=S3Config)

    def policy(self) -> IntegrityPolicy:
        return IntegrityPolicy(OnViolation(self.on_violation), OnDrift(self.on_drift))

    def redacted(self) -> dict[str, Any]:
        return _redact(asdict(self))

    def to_toml(self) -> str:
        """The effective configuration as TOML, secrets redacted (for ``config show``)."""
        data = self.redacted()
        if self.compact_every is None:
            data["compact_every"] = COMPACTION_OFF
        lines = []
        for key, value in data.items():
            if not isinstance(value, dict) and value is not None:
                lines.append(f"{key} = {_toml_value(value)}")
        for key, value in data.items():
            if isinstance(value, dict) and value:
                lines.append(f"\n[{key}]")
                for k, v in value.items():
                    if v is not None:
                        lines.append(f"{json.dumps(k) if '.' in k else k} = {_toml_value(v)}")
        return "\n".join(lines) + "\n"


def default_jars_dir() -> Path:
    """Where the JVM jars are when ``jars_dir`` is not set: ``.jars`` in the working directory,
    the folder ``make jars`` fills in a checkout.  Databricks and EMR provide the jars themselves,
    and the folder is then absent."""
    return Path.cwd() / ".jars"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dt.timedelta):
        return json.dumps(duration_text(value))
    return json.dumps(str(value))


def _redact(value, key: str = ""):
    if isinstance(value, dict):
        return {k: _redact(v, k) for k, v in value.items()}
    if value is not None and is_secret(key):
        return REDACTED
    if isinstance(value, str):
        return _SYSTEM_PROPERTY.sub(lambda m: (m["quote"] or "") + m["head"] + REDACTED
                                    if is_secret(m["name"]) else m[0], value)
    return value


def _words(key: str) -> list[str]:
    parts = re.split(r"[._\-\s]+|(?<=[a-z0-9])(?=[A-Z])", key)
    words: list[str] = []
    for part in (p.lower() for p in parts if p):
        if words and (words[-1], part) in _COMPOUNDS:
            words[-1] = _COMPOUNDS[(words[-1], part)]
        else:
            words.append(part)
    return words


def is_secret(key: str) -> bool:
    """Whether the value of setting ``key`` is a secret (see ``_SECRET_WORDS``)."""
    words = _words(key)
    return bool(words) and not _SECRET_WORDS.isdisjoint(words) and words[-1] not in _DESCRIPTOR_WORDS


# The settings that hold one value (a flag, a RECON_* variable, a top-level key of the file).
SCALAR_SETTINGS = frozenset({f.name for f in fields(Config)} - {"kafka", "spark", "s3"})
_S3_FIELDS = {f.name for f in fields(S3Config)}


def load(
    path: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Config:
    """Merge the layers; unknown keys in the file are usage errors (a typo is not silently ignored)."""
    env = os.environ if env is None else env
    cfg = Config()
    if path:
        _apply(cfg, _read_toml(path), source=path)
    _apply(cfg, _from_env(env), source="environment")
    _apply(cfg, {k: v for k, v in (flags or {}).items() if v is not None}, source="flags")
    _parse_durations(cfg)
    return cfg


def from_args(args: argparse.Namespace) -> Config:
    """The configuration a command runs with: its flags over ``RECON_*`` over its ``--config`` file."""
    flags = {k: v for k, v in vars(args).items() if k in SCALAR_SETTINGS and v is not None}
    return load(getattr(args, "config", None), flags=flags)


# Each duration setting: the flag that names it in messages, and whether zero means something
# (a zero grace closes an hour right at its end; any other zero duration is a typo, or spins).
_DURATIONS = {"trigger": ("--trigger", False), "session_timeout": ("--session-timeout", False),
              "state_retention": ("--state-retention", False),
              "compact_every": ("--compact-every", False), "compact_grace": ("--grace", True),
              "vacuum_retention": ("--vacuum-retention", False),
              "restart_backoff": ("--restart-backoff", False), "lease_ttl": ("--lease-ttl", False)}


def _parse_durations(cfg: Config) -> None:
    """The merged duration settings, still text, become ``timedelta`` (or stay a named trigger,
    or ``None`` for compact_every "off")."""
    for name, (flag, zero_allowed) in _DURATIONS.items():
        value = getattr(cfg, name)
        if isinstance(value, dt.timedelta) or value is None:
            continue
        if (name == "trigger" and value in _NAMED_TRIGGERS) or (
                name == "compact_every" and value == COMPACTION_OFF):
            setattr(cfg, name, None if value == COMPACTION_OFF else value)
            continue
        try:
            duration = Duration(value)
        except ValueError as exc:
            raise UsageError(f"{flag}: {exc}") from None
        if not duration and not zero_allowed:
            raise UsageError(f"{flag} {value!r} must be longer than zero (e.g. '30 seconds', '1 hour')")
        setattr(cfg, name, duration)


def _read_toml(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file {path} does not exist")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None


def _from_env(env: Mapping[str, str]) -> dict:
    data: dict[str, Any] = {}
    for name in SCALAR_SETTINGS:
        value = env.get(f"RECON_{name.upper()}")
        if value not in (None, ""):
            data[name] = value
    s3 = {k: env[f"RECON_S3_{k.upper()}"] for k in _S3_FIELDS if env.get(f"RECON_S3_{k.upper()}")}
    if s3:
        data["s3"] = s3
    kafka = {}
    for name, value in env.items():
        m = _KAFKA_ENV.match(name)
        if m:
            kafka[m.group(1).lower().replace("_", ".")] = value
    if kafka:
        data["kafka"] = kafka
    return data


def _apply(cfg: Config, data: Mapping[str, Any], source: str) -> None:
    for key, value in data.items():
        key = key.replace("-", "_")
        if key in ("kafka", "spark"):
            if not isinstance(value, Mapping):
                raise UsageError(f"{source}: [{key}] must be a table of settings")
            getattr(cfg, key).update({str(k): str(v) for k, v in value.items()})
        elif key == "s3":
            if not isinstance(value, Mapping):
                raise UsageError(f"{source}: [s3] must be a table of settings")
            for k, v in value.items():
                k = k.replace("-", "_")
                if k not in _S3_FIELDS:
                    raise UsageError(f"{source}: unknown setting s3.{k}")
                setattr(cfg.s3, k, _coerce(k, v, bool if k == "path_style" else str, source))
        elif key in _CHOICES:
            if str(value) not in _CHOICES[key]:
                raise UsageError(f"{source}: {key} must be one of {', '.join(_CHOICES[key])}, got {value!r}")
            setattr(cfg, key, str(value))
        elif key in SCALAR_SETTINGS:
            setattr(cfg, key, _coerce(key, value, _FIELD_TYPES.get(key, str), source))
        else:
            raise UsageError(f"{source}: unknown setting {key!r}")


# The settings that take one of a few words.
_CHOICES = {"on_violation": tuple(v.value for v in OnViolation), "on_drift": tuple(v.value for v in OnDrift)}

_FIELD_TYPES = {"max_offsets_per_trigger": int, "shuffle_partitions": int, "await_snapshot": bool,
                "unsafe_vacuum_retention": bool, "restart_attempts": int, "metrics_port": int}
# Whole-number settings where zero means something (no restart at all).
_ZERO_ALLOWED = frozenset({"restart_attempts"})


def _coerce(key: str, value, typ, source: str):
    if value is None:
        return None
    if typ is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise UsageError(f"{source}: {key} must be true or false, got {value!r}")
    if typ is int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise UsageError(f"{source}: {key} must be a whole number, got {value!r}") from None
        if key in _ZERO_ALLOWED and number < 0:
            raise UsageError(f"{source}: {key} must be zero or more, got {value!r}")
        if number <= 0 and key not in _ZERO_ALLOWED:
            raise UsageError(f"{source}: {key} must be positive, got {value!r}")
        return number
    return str(value)
