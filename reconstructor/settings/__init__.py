"""The settings: one typed model (``model``), the layers it is read from (``layers``), durations and
triggers (``durations``), and which values are secrets (``secrets``)."""

from reconstructor.settings.durations import (
    AVAILABLE_NOW,
    LONGEST_DURATION,
    SAFE_VACUUM_RETENTION,
    Duration,
    Trigger,
    duration_text,
)
from reconstructor.settings.layers import OTHER_VARIABLES, env_name, from_args, load
from reconstructor.settings.model import (
    COMPACTION_OFF,
    DEFAULT_MAX_OFFSETS_PER_TRIGGER,
    SCALAR_SETTINGS,
    Needed,
    S3Settings,
    Settings,
    StatefulEngine,
    declaration,
    default_jars_dir,
)
from reconstructor.settings.secrets import REDACTED, is_secret, redact

__all__ = [
    "AVAILABLE_NOW",
    "COMPACTION_OFF",
    "DEFAULT_MAX_OFFSETS_PER_TRIGGER",
    "LONGEST_DURATION",
    "OTHER_VARIABLES",
    "REDACTED",
    "SAFE_VACUUM_RETENTION",
    "SCALAR_SETTINGS",
    "Duration",
    "Needed",
    "S3Settings",
    "Settings",
    "StatefulEngine",
    "Trigger",
    "declaration",
    "default_jars_dir",
    "duration_text",
    "env_name",
    "from_args",
    "is_secret",
    "load",
    "redact",
]
