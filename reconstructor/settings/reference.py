"""The settings as users read them: each one's default in words, and the README's configuration
table, generated from the model so that the two never disagree (a unit test compares them).

``python -m reconstructor.settings.reference README.md`` rewrites the table in place.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

from reconstructor.settings.durations import duration_text
from reconstructor.settings.layers import env_name
from reconstructor.settings.model import SCALAR_SETTINGS, TABLES, Settings, declaration, flag_of

BEGIN, END = "<!-- settings-table:begin -->", "<!-- settings-table:end -->"


def default_text(name: str) -> str:
    """A setting's default as the help and the README say it ('' when it has none)."""
    d = declaration(name)
    if d["shown"]:
        return str(d["shown"])
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    if value is None or value is False:
        return ""
    if isinstance(value, enum.Enum):
        return str(value.value)
    return duration_text(value) if hasattr(value, "total_seconds") else str(value)


def flag_text(name: str) -> str:
    """The flag of a setting and the commands that take it ('run, replay: --lease-ttl')."""
    d = declaration(name)
    commands = [c for c in d["commands"] if c != "config"]
    if not commands:
        return ""
    return f"{', '.join(commands)}: `{flag_of(name)}`"


def markdown_table() -> str:
    """The README's configuration table."""
    rows = ["| setting (TOML) | flag | env | default | meaning |", "|---|---|---|---|---|"]
    for name in SCALAR_SETTINGS:
        default = default_text(name)
        rows.append(f"| `{name}` | {flag_text(name)} | `{env_name(name)}` | {f'`{default}`' if default else ''} "
                    f"| {Settings.model_fields[name].description} |")
    for table in TABLES:
        env = {"kafka": "`RECON_KAFKA_SECURITY_*`, `RECON_KAFKA_SASL_*`, `RECON_KAFKA_SSL_*`",
               "s3": "`RECON_S3_<NAME>`", "spark": ""}[table]
        rows.append(f"| `[{table}]` | | {env} | | {Settings.model_fields[table].description} |")
    return "\n".join(rows) + "\n"


def rewrite(path: Path) -> bool:
    """Put the generated table between the markers of ``path``; whether the file changed."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"
    if new != text:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["README.md"]:
        print(f"{arg}: {'rewritten' if rewrite(Path(arg)) else 'current'}")
