"""The settings model is the one declaration of each setting: the flags, their help, the
``RECON_*`` variables and the README's configuration table all come from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconstructor import settings
from reconstructor.cli.parser import COMMANDS, build_parser
from reconstructor.errors import UsageError
from reconstructor.settings.model import SCALAR_SETTINGS, Settings, declaration, flag_of
from reconstructor.settings.reference import BEGIN, END, markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_configuration_table_is_the_one_the_model_generates():
    text = README.read_text()
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == markdown_table().strip(), (
        "the README's configuration table differs from the settings model: "
        "run .venv/bin/python -m reconstructor.settings.reference README.md")


def test_every_setting_has_help_and_each_flag_is_on_the_commands_it_names():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name in SCALAR_SETTINGS:
        assert Settings.model_fields[name].description, name
        d = declaration(name)
        flag = flag_of(name)
        for command in COMMANDS:
            flags = {s for a in subparsers[command]._actions for s in a.option_strings}
            assert (flag in flags) == (command in d["commands"]), (name, command)


@pytest.mark.parametrize("name", sorted(SCALAR_SETTINGS))
def test_each_setting_is_read_from_its_variable(name):
    value = {bool: "true", int: "3"}.get(settings.layers.declared_type(Settings.model_fields[name].annotation))
    kind = settings.layers.declared_type(Settings.model_fields[name].annotation)
    if value is None:
        value = {"on_violation": "quarantine", "on_drift": "ignore", "engine": "jvm"}.get(name, "7 minutes" if kind in (
            settings.Duration, settings.Trigger) else "x")
    from_env = settings.load(None, env={settings.env_name(name): value})
    assert getattr(from_env, name) != getattr(Settings(), name)


def test_an_unknown_recon_variable_is_refused_and_the_known_others_are_not():
    with pytest.raises(UsageError, match="environment: unknown setting RECON_TRIGER"):
        settings.load(None, env={"RECON_TRIGER": "1 minute"})
    assert settings.load(None, env=dict.fromkeys(settings.OTHER_VARIABLES, "1")) == Settings()
    kafka = settings.load(None, env={"RECON_KAFKA_SASL_MECHANISM": "PLAIN", "RECON_S3_REGION": "eu-west-1"})
    assert kafka.kafka == {"sasl.mechanism": "PLAIN"} and kafka.s3.region == "eu-west-1"


def test_the_model_refuses_a_key_it_does_not_declare():
    with pytest.raises(Exception, match="extra"):
        Settings(toppic_pattern="x")
