"""The layers a command's settings come from: defaults, then a TOML file (``--config``), then
``RECON_*`` variables, then flags.  Each layer's values are read into the setting's type as the
layer is applied, so a bad value is refused naming the layer it came from; an unknown key or
``RECON_*`` variable is refused too (a typo is not silently ignored), except the pass-through
tables (``[kafka]``, ``[spark]``) and the variables listed in ``OTHER_VARIABLES``.
"""

from __future__ import annotations

import argparse
import enum
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reconstructor.errors import UsageError
from reconstructor.settings.durations import Duration, Trigger
from reconstructor.settings.model import COMPACTION_OFF, SCALAR_SETTINGS, S3Settings, Settings, declaration, flag_of

ENV_PREFIX = "RECON_"
# Kafka client settings that may come from the environment (RECON_KAFKA_SASL_MECHANISM, ...).
_KAFKA_ENV = re.compile(r"^RECON_KAFKA_((SECURITY|SASL|SSL)_[A-Z0-9_]+)$")

#: ``RECON_*`` variables that are not settings, and who reads them.
OTHER_VARIABLES = {
    "RECON_SPARK_LOG_LEVEL": "the level of Spark's own log lines (default WARN)",
    "RECON_KAFKA_PORT": "the workbench: the local Kafka broker's port",
    "RECON_KAFKA_CONTROLLER_PORT": "the workbench: the local Kafka controller's port",
    "RECON_S3_PORT": "the workbench: the local S3 endpoint's port",
    "RECON_STACK_DIR": "the workbench: where the local stack keeps its state",
    "RECON_FUZZ_SEED": "the test suite: the fuzz suite's seed",
    "RECON_FUZZ_EXAMPLES": "the test suite: the fuzz suite's examples",
}


def env_name(name: str, table: str | None = None) -> str:
    """The ``RECON_*`` variable of a setting (``RECON_LEASE_TTL``, ``RECON_S3_ENDPOINT``)."""
    return f"{ENV_PREFIX}{(table + '_') if table else ''}{name}".upper()


def load(path: str | None = None, env: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> Settings:
    """The settings of the layers merged, each value read into its type."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    s3: dict[str, Any] = {}
    tables: dict[str, dict[str, str]] = {"kafka": {}, "spark": {}}
    if path:
        _apply(values, s3, tables, _read_toml(path), source=path)
    _apply(values, s3, tables, _from_env(env), source="environment")
    _apply(values, s3, tables, {k: v for k, v in (flags or {}).items() if v is not None}, source="flags")
    return Settings(**values, s3=S3Settings(**s3), **tables)  # the model fills in the defaults


def from_args(args: argparse.Namespace) -> Settings:
    """The settings a command runs with: its flags over ``RECON_*`` over its ``--config`` file."""
    flags = {k: v for k, v in vars(args).items() if k in SCALAR_SETTINGS and v is not None}
    return load(getattr(args, "config", None), flags=flags)


def _read_toml(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file {path} does not exist")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    s3_names = {env_name(k, "s3"): k for k in S3Settings.model_fields}
    scalar_names = {env_name(k): k for k in SCALAR_SETTINGS}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or value in (None, ""):
            continue
        if name in scalar_names:
            data[scalar_names[name]] = value
        elif name in s3_names:
            data.setdefault("s3", {})[s3_names[name]] = value
        elif kafka := _KAFKA_ENV.match(name):
            data.setdefault("kafka", {})[kafka.group(1).lower().replace("_", ".")] = value
        elif name not in OTHER_VARIABLES:
            raise UsageError(f"environment: unknown setting {name} (the RECON_* variables are the "
                             f"settings' names, e.g. RECON_TOPIC_PATTERN; see the README's configuration)")
    return data


def _apply(values: dict[str, Any], s3: dict[str, Any], tables: dict[str, Any], data: Mapping[str, Any],
           source: str) -> None:
    for key, value in data.items():
        key = key.replace("-", "_")
        if key in tables:
            if not isinstance(value, Mapping):
                raise UsageError(f"{source}: [{key}] must be a table of settings")
            tables[key].update({str(k): str(v) for k, v in value.items()})
        elif key == "s3":
            if not isinstance(value, Mapping):
                raise UsageError(f"{source}: [s3] must be a table of settings")
            for k, v in value.items():
                k = k.replace("-", "_")
                if k not in S3Settings.model_fields:
                    raise UsageError(f"{source}: unknown setting s3.{k}")
                s3[k] = _read(k, v, S3Settings, source)
        elif key in SCALAR_SETTINGS:
            values[key] = _read(key, value, Settings, source)
        else:
            raise UsageError(f"{source}: unknown setting {key!r}")


def _read(name: str, value: Any, model: Any, source: str) -> Any:
    """``value`` of setting ``name`` in its declared type, or a usage error naming the layer."""
    if value is None:
        return None
    kind = declared_type(model.model_fields[name].annotation)
    if kind is bool:
        return _boolean(name, value, source)
    if kind is int:
        return _whole_number(name, value, source, declaration(name, model)["zero"])
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        choices = tuple(v.value for v in kind)
        text = str(getattr(value, "value", value))  # a word, or the enum itself (in-process callers)
        if text not in choices:
            raise UsageError(f"{source}: {name} must be one of {', '.join(choices)}, got {value!r}")
        return kind(text)
    if kind in (Duration, Trigger):
        return _duration(name, value, kind)
    return str(value)


def declared_type(annotation: Any) -> Any:
    """The type an annotation declares, without ``| None``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1
    return args[0] if optional else annotation


def _boolean(name: str, value: Any, source: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes", "on"):
        return True
    if str(value).lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{source}: {name} must be true or false, got {value!r}")


def _whole_number(name: str, value: Any, source: str, zero_allowed: bool) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{source}: {name} must be a whole number, got {value!r}") from None
    if zero_allowed and number < 0:
        raise UsageError(f"{source}: {name} must be zero or more, got {value!r}")
    if number <= 0 and not zero_allowed:
        raise UsageError(f"{source}: {name} must be positive, got {value!r}")
    return number


def _duration(name: str, value: Any, kind: Any) -> Any:
    """A duration setting (or the trigger, or compact_every 'off'), named by its flag in errors: a
    zero duration is a typo (or spins) unless the setting says zero means something."""
    if isinstance(value, kind):
        return value
    flag = flag_of(name)
    if name == "compact_every" and value == COMPACTION_OFF:
        return None
    try:
        parsed = kind(str(value))
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    interval = parsed.interval if isinstance(parsed, Trigger) else parsed
    if interval is not None and not interval and not declaration(name)["zero"]:
        raise UsageError(f"{flag} {value!r} must be longer than zero (e.g. '30 seconds', '1 hour')")
    return parsed
