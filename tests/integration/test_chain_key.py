"""One chain key per output: `run` and `replay` refuse a key that differs from the one the output's
change log was chained with (none counts as one), exit 2 with one line naming the output's scheme
and never the key, before a record is read; rotating the key is a replay into a new output under
the new key.  One produced stream and the suite's SparkSession for every case, outputs on the
local stack's S3 (the unkeyed one on a local path)."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from reconstructor.audit.delta_tables import delta_uri, storage_options
from reconstructor.contract.row_schema import RowSchema
from tests.support.cli import cli_in_process as cli
from tests.support.cli import refusal_line
from tests.support.pipeline import produce
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet
from workbench.smoke import local_s3

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("spark")]
NAMES = RowSchema.load().names
KEY, OTHER, NEW = "chain-key-of-the-output", "another-chain-key", "the-rotated-chain-key"


def _version(output: str) -> int:
    """row_changes' latest Delta version: what a refused command leaves unchanged."""
    return DeltaTable(delta_uri(f"{output}/row_changes"), storage_options=storage_options(local_s3(), output)).version()


def test_a_run_or_replay_under_another_key_is_refused_and_a_rotation_is_a_replay_into_a_new_output(
        stack, run_id, monkeypatch, tmp_path):
    for name, value in (("ENDPOINT", stack.s3_endpoint()), ("REGION", stack.S3_REGION),
                        ("ACCESS_KEY", stack.S3_ACCESS_KEY), ("SECRET_KEY", stack.S3_SECRET_KEY),
                        ("PATH_STYLE", "true")):
        monkeypatch.setenv(f"RECON_S3_{name}", value)
    monkeypatch.delenv("RECON_CHAIN_KEY", raising=False)
    spec = FleetSpec(topic_prefix=f"ck{run_id}-sensor-", sensors=1, sessions_per_sensor=2, rows=6, updates=12,
                     seed=31, end_sessions=False)
    messages = list(plan_fleet(spec))
    half = len(messages) // 2
    pattern, bootstrap = f"ck{run_id}-sensor-[0-9]+", stack.bootstrap_servers()
    root = f"s3a://{localstack.S3_BUCKET}/chain-key-{run_id}"
    keyed, rotated, plain = f"{root}/keyed", f"{root}/rotated", str(tmp_path / "plain")
    common = ("--bootstrap-servers", bootstrap, "--topic-pattern", pattern)

    def run(output, *key):
        return cli("run", *common, "--compact-every", "off", "--output", output, "--checkpoint", f"{output}-chk",
                   *key)

    produce(spec, messages[:half], 2)
    first = run(keyed, "--chain-key", KEY)
    assert first.returncode == 0, first.stderr[-3000:]
    produce(spec, messages[half:], 2, create=False)
    before = _version(keyed)

    # No key, or another key, over a keyed output: one line naming its scheme, never a key.
    without = refusal_line(run(keyed))
    assert without.startswith(f"reconstructor: the output {keyed} is chained with hmac-sha256"), without
    assert "--chain-key" in without and "replay into a new output" in without, without
    wrong = run(keyed, "--chain-key", OTHER)
    line = refusal_line(wrong)
    assert line.startswith(f"reconstructor: the output {keyed} is chained with hmac-sha256 under another key"), line
    assert OTHER not in wrong.stderr + wrong.stdout and KEY not in wrong.stderr + wrong.stdout
    assert _version(keyed) == before  # refused before a record was read: not one commit

    # The output's own key carries on, and the whole log verifies under it.
    same = run(keyed, "--chain-key", KEY)
    assert same.returncode == 0, same.stderr[-3000:]
    assert _version(keyed) > before
    verified = cli("verify", "--output", keyed, "--chain-key", KEY)
    assert verified.returncode == 0, verified.stderr[-3000:]

    # Rotation: a replay into a new output (and a new checkpoint) under the new key, verified with it.
    replayed = cli("replay", *common, "--output", rotated, "--checkpoint", f"{rotated}-chk", "--from", "earliest",
                   "--chain-key", NEW)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert cli("verify", "--output", rotated, "--chain-key", NEW).returncode == 0
    assert cli("verify", "--output", rotated, "--chain-key", KEY).returncode == 3
    # A replay into the rotated output under the old key is refused like a run.
    again = refusal_line(cli("replay", *common, "--output", rotated, "--checkpoint", f"{rotated}-chk2",
                             "--from", "earliest", "--chain-key", KEY))
    assert again.startswith(f"reconstructor: the output {rotated} is chained with hmac-sha256 under another key"), again

    # A key over an output chained without one.
    unkeyed = run(plain)
    assert unkeyed.returncode == 0, unkeyed.stderr[-3000:]
    keyed_over_plain = run(plain, "--chain-key", KEY)
    line = refusal_line(keyed_over_plain)
    assert line.startswith(f"reconstructor: the output {plain} is chained with sha256"), line
    assert KEY not in keyed_over_plain.stderr + keyed_over_plain.stdout
