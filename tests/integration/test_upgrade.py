"""Upgrades: a checkpoint and tables written by the previous release continue under this one.

The previous release is taken from the repository's own history (``git archive``), run as a user
runs it (``python -m reconstructor run``) with the same stack, under each engine (the JVM engine
with the previous release's own engine jar, built from its tree); this release then carries on
from its checkpoint in this process.  The second half of the fleet holds nulls beside longs and
times with offsets, so new input meets the old state.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from reconstructor.contract.comments import TABLE_COMMENTS, column_comment
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import STATS_COLUMNS, STATS_PROPERTY, TABLES
from reconstructor.jars import ENGINE_JAR
from reconstructor.settings import StatefulEngine
from tests.support.pipeline import assert_exact, produce, read_table, run
from workbench.fleet import FleetSpec, plan_fleet

pytestmark = pytest.mark.integration
NAMES = RowSchema.load().names
#: The last landed release: update it when a release lands.
PREVIOUS_RELEASE = "68c49e6"
#: Both releases run with a chain key: the previous one sealed the session rows and the fleet with
#: it, and this one carries both seals on.
KEY = "upgrade-chain-key"
ROOT = Path(__file__).resolve().parents[2]


def _previous_release(into: Path) -> Path:
    """The previous release's tree, from git (a clone of the repository has its history)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS_RELEASE],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _previous_jars(old: Path, jars: Path, into: Path) -> Path:
    """A jars folder for the previous release: this checkout's Kafka and Delta jars beside the
    previous release's engine jar, built from its own tree as ``make jars`` builds it."""
    built = into / "build"
    subprocess.run(["mvn", "-q", "-B", "-o", "-s", str(ROOT / "infra/maven/settings.xml"), "-f",
                    str(old / "jvm/pom.xml"), f"-Djars.dir={built}", "package"], check=True, capture_output=True,
                   timeout=600)
    (into / "spark").mkdir(parents=True)
    for jar in (jars / "spark").glob("*.jar"):
        if jar.name != ENGINE_JAR:
            (into / "spark" / jar.name).symlink_to(jar)
    (into / "spark" / ENGINE_JAR).symlink_to(built / "spark" / ENGINE_JAR)
    (into / "kafka").symlink_to(jars / "kafka")
    return into


@pytest.mark.parametrize("engine", list(StatefulEngine), ids=lambda e: e.value)
def test_a_checkpoint_and_tables_of_the_previous_release_continue_exactly(stack, spark, run_id, tmp_path, engine):
    spec = FleetSpec(topic_prefix=f"up{engine.value}{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=20,
                     updates=60, rows_per_update=2, delete_ratio=0.1, seed=17)
    messages = list(plan_fleet(spec))
    half = len(messages) // 2
    for planned in messages[half:]:  # what the previous release read differently
        for row in planned.message.get("rows", []):
            values = row.get("values")
            if values is not None:
                values["reading_count"] = None if "reading_count" in values else 2**63 - 1
        planned.message["ts"] = planned.message["ts"].replace("Z", "+00:00")
    produce(spec, messages[:half], partitions=2)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    pattern = f"up{engine.value}{run_id}-sensor-[0-9]+"

    old = _previous_release(tmp_path / "previous")
    jars = stack.jars_dir()
    if engine is StatefulEngine.JVM:
        jars = _previous_jars(old, jars, tmp_path / "previous-jars")
    env = {**os.environ, "PYTHONPATH": str(old), "RECON_JARS_DIR": str(jars)}
    ran = subprocess.run([sys.executable, "-m", "reconstructor", "run", "--bootstrap-servers",
                          stack.bootstrap_servers(), "--topic-pattern", pattern, "--output", out,
                          "--checkpoint", chk, "--compact-every", "off", "--engine", engine.value, "--chain-key", KEY],
                         cwd=old, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert read_table(spark, out, "row_changes").count() > 0

    # This release's verify passes the previous release's output, fleet seal included.
    before = subprocess.run([sys.executable, "-m", "reconstructor", "verify", "--output", out, "--chain-key", KEY],
                            capture_output=True, text=True, timeout=600)
    assert before.returncode == 0, before.stderr[-3000:]
    assert re.search(r"fleet: \d+ session rows and 0 violation rows as the last batch sealed them", before.stdout), \
        before.stdout

    produce(spec, messages[half:], partitions=2, create=False)
    catalog = f"up{engine.value}{run_id}"
    unsealed = read_table(spark, out, "sessions").count()
    run(spark, pattern, out, chk, engine=engine, catalog=catalog, chain_key=KEY)
    assert_exact(spark, out, messages, NAMES)
    # The tables the previous release created take the contract's comments and their names.
    for name in TABLES:
        assert spark.catalog.getTable(f"{catalog}.{name}").description == TABLE_COMMENTS[name]
        fields = DeltaTable.forPath(spark, f"{out}/{name}").toDF().schema.fields
        assert all(f.metadata.get("comment") == column_comment(name, f.name, RowSchema.load()) for f in fields), name
    assert "resync_requested_at" in spark.table(f"{catalog}.sessions").columns
    # ... and keep statistics on the contract's columns only from then on.
    for name, columns in STATS_COLUMNS.items():
        properties = DeltaTable.forPath(spark, f"{out}/{name}").detail().collect()[0].properties
        assert properties.get(STATS_PROPERTY) == ",".join(columns), (name, properties)
    longs = {r.reading_count for r in read_table(spark, out, "row_changes").collect()}
    assert 2**63 - 1 in longs and None in longs
    # Each session's chain runs on across the two releases and verifies; every row is sealed, those
    # the previous release wrote included.
    assert unsealed > 0
    assert read_table(spark, out, "sessions").where("chain_seal IS NULL").count() == 0
    verified = subprocess.run([sys.executable, "-m", "reconstructor", "verify", "--output", out, "--chain-key", KEY],
                              capture_output=True, text=True, timeout=600)
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert " in 4 chains" in verified.stdout, verified.stdout
    assert "seals: 4 session rows sealed with the key" in verified.stdout, verified.stdout
    assert "fleet: 4 session rows and 0 violation rows as the last batch sealed them" in verified.stdout, \
        verified.stdout
