"""verify and asof on tables a real run wrote (Kafka, Spark, delta-spark), read back with delta-rs:
the run's output verifies, locally and on S3; each corruption is named; asof and the README's SQL
recipe give the tables as they were; the run registered the tables by name in Spark's catalog
(``--catalog``).  One pipeline run for the whole file."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from pathlib import Path

import boto3
import pyarrow.compute as pc
import pytest
from delta.tables import DeltaTable as SparkDeltaTable
from deltalake import DeltaTable, write_deltalake

from reconstructor.contract.comments import TABLE_COMMENTS, column_comment
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import SESSIONS, TABLES
from reconstructor.errors import UsageError
from reconstructor.settings import S3Settings
from reconstructor.spark.catalog import comment_tables, register_tables, table_comment
from reconstructor.spark.compaction import Compactor
from tests.support.cli import cli, cli_in_process
from tests.support.pipeline import current_tables, expected_all, produce
from workbench import localstack
from workbench.fleet import FleetSpec, inject, plan_fleet

pytestmark = pytest.mark.integration
SCHEMA = RowSchema.load()
NAMES = SCHEMA.names
README = Path(__file__).resolve().parents[2] / "README.md"
KEY = "verify-asof-chain-key"  # the run's chain is HMACs: verify needs it


@pytest.fixture(scope="module")
def fleet(stack, spark, tmp_path_factory):
    """A fleet with a lost update (quarantined, then resynced) run once in quarantine mode."""
    run_id = random.Random().randbytes(5).hex()
    spec = FleetSpec(topic_prefix=f"v{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=12,
                     updates=30, rows_per_update=2, resync_every=8, end_sessions=False, seed=5)
    original = list(plan_fleet(spec))
    victim = sorted({p.session for p in original})[0]
    messages, _ = inject(original, "gap-resync", random.Random(2), session=victim)
    produce(spec, messages, 2)
    out = tmp_path_factory.mktemp("verify") / "out"
    ran = cli_in_process("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", f"{spec.topic_prefix}[0-9]+",
              "--output", str(out), "--checkpoint", str(out.parent / "chk"), "--compact-every", "off",
              "--on-violation", "quarantine", "--chain-key", KEY, "--catalog", f"v{run_id}")
    assert ran.returncode == 0, ran.stderr[-3000:]
    return {"out": out, "original": original, "messages": messages, "victim": victim, "run_id": run_id}


def verify(output, *flags, key=KEY):
    return cli("verify", "--output", str(output), *flags, *(("--chain-key", key) if key else ()))


def failed_line(result) -> str:
    assert result.returncode == 3, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def copy_of(fleet, tmp_path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(fleet["out"], copy)
    return copy


def last_upsert(output: Path):
    """An open session's row and its last change, as row_changes holds it."""
    changes = DeltaTable(str(output / "row_changes")).to_pandas().sort_values(["topic", "session", "offset", "row_pos"])
    last = changes.groupby(["topic", "session", "row_id"]).tail(1)
    return last[(last["op"] == "upsert") & (last["type"] == "update")].iloc[0]


def test_the_run_verifies_and_the_summary_counts_what_was_checked(fleet):
    result = verify(fleet["out"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"verify {fleet['out']}: no discrepancy"
    assert re.search(r"row_changes\s+[\d,]+ rows in \d+ hour partitions?", result.stdout)
    assert "sessions     4 (4 open)" in result.stdout
    assert re.search(r"[1-9][\d,]* set aside \(in violations\)", result.stdout)  # the quarantined records
    assert "change rows/s" in lines[-1]
    # The victim's chain goes on through its quarantine and resync: one chain per session.
    assert re.search(r"hash chain: [1-9][\d,]* messages recomputed \(hmac-sha256\) and linked in 4 chains",
                     result.stdout), result.stdout
    narrowed = verify(fleet["out"], "--topic-pattern", f"v{fleet['run_id']}-sensor-1")
    assert narrowed.returncode == 0 and "sessions     2 (2 open)" in narrowed.stdout


def test_the_run_verifies_on_s3(fleet, monkeypatch):
    """The tables copied to the local stack's S3 with delta-rs, verified through s3a://."""
    s3 = S3Settings(endpoint=localstack.s3_endpoint(), region=localstack.S3_REGION, access_key=localstack.S3_ACCESS_KEY,
                    secret_key=localstack.S3_SECRET_KEY, path_style=True)
    root = f"s3a://{localstack.S3_BUCKET}/verify-{fleet['run_id']}/out"
    # Every file, the Delta logs with their commits' fleet seals too: the output as the run left it.
    bucket = boto3.client("s3", endpoint_url=s3.endpoint, region_name=s3.region, aws_access_key_id=s3.access_key,
                          aws_secret_access_key=s3.secret_key)
    for path in (p for name in TABLES for p in (fleet["out"] / name).rglob("*")):
        if path.is_file() and not path.name.endswith(".crc"):
            bucket.upload_file(str(path), localstack.S3_BUCKET,
                               f"verify-{fleet['run_id']}/out/{path.relative_to(fleet['out']).as_posix()}")
    for key, value in (("ENDPOINT", s3.endpoint), ("REGION", s3.region), ("ACCESS_KEY", s3.access_key),
                       ("SECRET_KEY", s3.secret_key), ("PATH_STYLE", "true")):
        monkeypatch.setenv(f"RECON_S3_{key}", value)
    result = verify(root)
    assert result.returncode == 0, result.stderr
    assert f"verify {root}: no discrepancy" in result.stdout


def test_a_deleted_change_row_is_named(fleet, tmp_path):
    out = copy_of(fleet, tmp_path)
    change = last_upsert(out)
    table = DeltaTable(str(out / "row_changes"))
    table.alter.set_table_properties({"delta.appendOnly": "false"})
    table.delete(f"session = '{change.session}' AND row_id = '{change.row_id}' AND \"offset\" = {change.offset}")
    line = failed_line(verify(out))
    assert line == (f"reconstructor: VERIFY FAILED row_changes topic={change.topic} session={change.session} "
                    f"seq={change.seq}: the digest of the message at offset {change.offset} is not the one its rows "
                    "give: a change of it was altered, added or removed (or the key is not the chain's)"), line


def _changes(out: Path):
    return DeltaTable(str(out / "row_changes")).to_pandas().sort_values(["topic", "session", "offset", "row_pos"])


def _editable(out: Path) -> DeltaTable:
    table = DeltaTable(str(out / "row_changes"))
    table.alter.set_table_properties({"delta.appendOnly": "false"})
    return table


def test_every_change_row_of_a_message_deleted_is_named(fleet, tmp_path):
    """Later changes to the same rows remain, so no other table tells: the next message links to a
    digest that no message holds any more."""
    out = copy_of(fleet, tmp_path)
    changes = _changes(out)
    updates = changes[(changes["type"] == "update") & (changes["session"] != fleet["victim"])]
    victim = updates.drop_duplicates(["topic", "session", "offset"]).iloc[3]
    following = changes[(changes["session"] == victim.session) & (changes["offset"] > victim.offset)].iloc[0]
    _editable(out).delete(f"session = '{victim.session}' AND \"offset\" = {victim.offset}")
    line = failed_line(verify(out))
    assert line == (f"reconstructor: VERIFY FAILED row_changes topic={victim.topic} session={victim.session} "
                    f"seq={following.seq}: the message at offset {following.offset} links to a digest that no "
                    "message of the session holds: a message before it lost its rows"), line


def test_an_altered_value_of_a_change_that_a_later_one_overwrote_is_named(fleet, tmp_path):
    out = copy_of(fleet, tmp_path)
    changes = _changes(out)
    upserts = changes[(changes["op"] == "upsert") & (changes["type"] == "update")]
    overwritten = upserts[upserts.duplicated(["topic", "session", "row_id"], keep="last")].iloc[0]
    _editable(out).update(predicate=f"session = '{overwritten.session}' AND \"offset\" = {overwritten.offset} "
                                    f"AND row_id = '{overwritten.row_id}'", new_values={"temperature": "-999.0"})
    line = failed_line(verify(out))
    assert line.startswith(f"reconstructor: VERIFY FAILED row_changes topic={overwritten.topic} "
                           f"session={overwritten.session} seq={overwritten.seq}: the digest of the message at "
                           f"offset {overwritten.offset} is not the one its rows give"), line


def test_the_last_message_of_a_session_deleted_is_named_by_its_chain_head(fleet, tmp_path):
    out = copy_of(fleet, tmp_path)
    changes = _changes(out)
    last = changes[changes["session"] != fleet["victim"]].groupby(["topic", "session"]).tail(1).iloc[0]
    _editable(out).delete(f"session = '{last.session}' AND \"offset\" = {last.offset}")
    line = failed_line(verify(out))
    assert line.startswith(f"reconstructor: VERIFY FAILED sessions topic={last.topic} session={last.session} "), line
    assert ": chain_head is hmac-sha256:" in line and "messages after it lost their rows" in line, line


def _open_session_tail(out: Path, victim: str):
    """An open session's messages with rows, by offset, as row_changes holds them."""
    changes = _changes(out)
    sessions = DeltaTable(str(out / "sessions")).to_pandas()
    session = sessions[(sessions["status"] == "open") & (sessions["session"] != victim)].iloc[0]
    return session, changes[changes["session"] == session.session].drop_duplicates("offset")


def test_the_last_messages_deleted_and_the_head_moved_back_to_a_digest_the_run_made_is_named_by_the_seal(
        fleet, tmp_path):
    """A careful truncation: every link left holds and chain_head names the last message left, so
    only the seal of the session's row tells."""
    out = copy_of(fleet, tmp_path)
    session, messages = _open_session_tail(out, fleet["victim"])
    kept = messages.iloc[-3]
    _editable(out).delete(f"session = '{session.session}' AND \"offset\" > {kept.offset}")
    DeltaTable(str(out / "sessions")).update(predicate=f"session = '{session.session}'",
                                             new_values={"chain_head": kept.chain_digest})
    line = failed_line(verify(out))
    assert line == (f"reconstructor: VERIFY FAILED sessions topic={session.topic} session={session.session} "
                    f"seq={session.last_seq}: the session's row does not give its seal: its status, seqs, offsets, "
                    "row count or chain_head were altered (or the key is not the chain's)"), line


def test_a_sessions_chain_nulled_and_its_values_changed_is_named_by_the_seal(fleet, tmp_path):
    """Nulling chain_prev, chain_digest and chain_head made the rows read as written before the
    chain; the head is sealed, and a seal nulled as well leaves a row unsealed in a sealed output."""
    out = copy_of(fleet, tmp_path)
    session, _ = _open_session_tail(out, fleet["victim"])
    where = f"session = '{session.session}'"
    _editable(out).update(predicate=where, updates={"chain_prev": "NULL", "chain_digest": "NULL",
                                                    "temperature": "-999.0"})
    DeltaTable(str(out / "current_rows")).update(predicate=where, new_values={"temperature": "-999.0"})
    sessions = DeltaTable(str(out / "sessions"))
    sessions.update(predicate=where, updates={"chain_head": "NULL"})
    assert "does not give its seal" in failed_line(verify(out))
    sessions.update(predicate=where, updates={"chain_seal": "NULL"})
    line = failed_line(verify(out))
    assert line == (f"reconstructor: VERIFY FAILED sessions topic={session.topic} session={session.session} "
                    f"seq={session.last_seq}: the session's row has no seal, but the output is sealed: its seal "
                    "was removed"), line


def _deletable(out: Path, name: str) -> DeltaTable:
    table = DeltaTable(str(out / name))
    if table.metadata().configuration.get("delta.appendOnly") == "true":
        table.alter.set_table_properties({"delta.appendOnly": "false"})
    return table


def test_a_whole_session_removed_from_the_four_tables_is_named_by_the_fleet_seal(fleet, tmp_path):
    """Every row of one session gone from every table: no chain, seal or fold is left to tell; the
    fleet seal of the last batch still counts its row."""
    out = copy_of(fleet, tmp_path)
    session, _ = _open_session_tail(out, fleet["victim"])
    for name in TABLES:
        _deletable(out, name).delete(f"session = '{session.session}'")
    line = failed_line(verify(out))
    deleted = DeltaTable(str(out / "sessions")).version()
    assert line == ("reconstructor: VERIFY FAILED sessions: sessions holds 3 rows; the fleet seal counts 4: a "
                    f"session's row was removed, added or replaced (Delta commit {deleted} changed the table's data "
                    "and carries no fleet seal)"), line


def test_the_violation_rows_of_a_resynced_session_deleted_are_named_by_the_fleet_seal(fleet, tmp_path):
    """The victim's GAP and the records set aside until its resync, deleted: the session is open
    again and its chain goes on, so only the fleet seal counts them."""
    out = copy_of(fleet, tmp_path)
    violations = _deletable(out, "violations")
    held = violations.to_pandas()
    assert (held["session"] == fleet["victim"]).any() and (held["kind"] == "GAP").any()
    violations.delete(f"session = '{fleet['victim']}'")
    line = failed_line(verify(out))
    kept = int((held["session"] != fleet["victim"]).sum())
    assert line == (f"reconstructor: VERIFY FAILED violations: violations holds {kept} rows; the fleet seal counts "
                    f"{len(held)}: a violation's row was removed, added or altered (Delta commit "
                    f"{violations.version()} changed the table's data and carries no fleet seal)"), line


def verified(output):
    """``verify`` in this process (it starts no JVM)."""
    return cli_in_process("verify", "--output", str(output), "--chain-key", KEY)


def _commits(table: Path) -> dict[int, dict]:
    """The commit info of each commit the table's log holds, by version."""
    found = {}
    for path in (table / "_delta_log").glob("*.json"):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found[int(path.stem)] = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    return found


def test_the_fleet_seal_outlives_log_cleanup_and_a_write_of_data_without_it_is_named(fleet, spark, tmp_path):
    """An idle output's compactions go on past delta.logRetentionDuration, and a checkpoint's log
    cleanup takes every batch's commit out of sessions' log: the compaction's commits carry the
    seal forward, so nothing edited verifies.  A user's OPTIMIZE changes no data and keeps the
    seal; a user's write that changes data carries none and is named."""
    out = copy_of(fleet, tmp_path)
    sessions = out / SESSIONS
    sealed = max(v for v, info in _commits(sessions).items() if "reconstructor.fleet" in info.get("userMetadata", ""))
    # A short retention (Delta wants the deleted files' no longer) and a checkpoint at every commit.
    spark.sql(f"ALTER TABLE delta.`{sessions}` SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 1 days', "
              "'delta.deletedFileRetentionDuration' = 'interval 1 days', 'delta.checkpointInterval' = '1')")
    days_ago = time.time() - 3 * 86_400  # Delta cleans by the log files' times, a day at a time
    for path in (sessions / "_delta_log").iterdir():
        os.utime(path, (days_ago, days_ago))
    Compactor(spark, str(out)).vacuum([SESSIONS])  # the product's compaction, then a checkpoint and its cleanup
    assert min(_commits(sessions)) > sealed, sorted(_commits(sessions))  # the batches' commits left the log
    vacuums = [json.loads(info["userMetadata"]) for info in _commits(sessions).values()
               if info["operation"].startswith("VACUUM")]
    assert vacuums and all(c["reconstructor.fleet_origin"] == sealed for c in vacuums), vacuums
    result = verified(out)
    assert result.returncode == 0, result.stderr
    assert "fleet: 4 session rows and" in result.stdout, result.stdout

    table = DeltaTable(str(sessions))
    table.optimize.z_order(["topic", "session"])  # a user's own OPTIMIZE: every action dataChange=false
    assert _commits(sessions)[table.version()]["operation"] == "OPTIMIZE"
    assert verified(out).returncode == 0
    table.update(predicate=f"session = '{fleet['victim']}'", updates={"updated_at": "TIMESTAMP '2001-01-01'"})
    line = failed_line(verified(out))
    assert line == (f"reconstructor: VERIFY FAILED sessions: Delta commit {table.version()} changed the table's "
                    "data and carries no fleet seal: it was written by something other than a keyed run or replay"), line


def test_a_null_double_replaced_by_nan_is_named(fleet, tmp_path):
    out = copy_of(fleet, tmp_path)
    change = last_upsert(out)
    where = f"session = '{change.session}' AND row_id = '{change.row_id}'"
    _editable(out).update(predicate=where, updates={"temperature": "CAST('NaN' AS DOUBLE)"})
    DeltaTable(str(out / "current_rows")).update(predicate=where, updates={"temperature": "CAST('NaN' AS DOUBLE)"})
    line = failed_line(verify(out))
    assert line.startswith(f"reconstructor: VERIFY FAILED row_changes topic={change.topic} session={change.session} "), line
    assert "temperature is NaN in the change at offset" in line and "a value the pipeline never writes" in line, line


def test_the_run_seals_every_session_row(fleet):
    sessions = DeltaTable(str(fleet["out"] / "sessions")).to_pandas()
    assert sessions["chain_seal"].str.startswith("hmac-sha256:").all()
    result = verify(fleet["out"])
    assert "seals: 4 session rows sealed with the key" in result.stdout
    violations = len(DeltaTable(str(fleet["out"] / "violations")).to_pandas())
    assert f"fleet: 4 session rows and {violations} violation rows as the last batch sealed them" in result.stdout


def test_a_keyed_chain_needs_its_key(fleet):
    without = verify(fleet["out"], key=None)
    assert without.returncode == 2, without.stderr
    assert without.stderr.strip() == ("reconstructor: row_changes' digests are HMACs: verify needs the chain's key "
                                      "(--chain-key, RECON_CHAIN_KEY or chain_key in the config file)")
    wrong = failed_line(verify(fleet["out"], key="not-the-key"))
    assert "is not the one its rows give" in wrong and "(or the key is not the chain's)" in wrong


def test_a_changed_value_in_current_rows_is_named(fleet, tmp_path):
    out = copy_of(fleet, tmp_path)
    change = last_upsert(out)
    DeltaTable(str(out / "current_rows")).update(
        predicate=f"session = '{change.session}' AND row_id = '{change.row_id}'", new_values={"temperature": -999.0})
    line = failed_line(verify(out))
    assert line == (f"reconstructor: VERIFY FAILED current_rows topic={change.topic} session={change.session} "
                    f"seq={change.seq} row={change.row_id}: temperature is -999.0 here, {float(change.temperature)!r} "
                    "in row_changes")


def test_a_duplicated_change_row_is_named(fleet, tmp_path):
    out = copy_of(fleet, tmp_path)
    change = last_upsert(out)
    table = DeltaTable(str(out / "row_changes"))
    data = table.to_pyarrow_table()
    row = data.filter(pc.and_(pc.equal(data["session"], change.session),
                              pc.and_(pc.equal(data["offset"], int(change.offset)),
                                      pc.equal(data["row_id"], change.row_id))))
    write_deltalake(str(out / "row_changes"), row, mode="append")
    line = failed_line(verify(out))
    assert line.startswith(f"reconstructor: VERIFY FAILED row_changes topic={change.topic} session={change.session} "
                           f"seq={change.seq} row={change.row_id}: the change at partition {change.partition} "
                           f"offset {change.offset} row_pos {change.row_pos} is logged twice"), line


def expected_at(messages, topic, session, keep) -> dict:
    mine = [p for p in messages if p.topic == topic and p.session == session and keep(p.message)]
    return expected_all(mine, NAMES).get((topic, session), {})


def asof_rows(out, topic, session, *flags) -> dict:
    shown = cli("asof", "--output", str(out), "--topic", topic, "--session", session, "--format", "json", *flags)
    assert shown.returncode == 0, shown.stderr
    return {r["row_id"]: r for r in json.loads(shown.stdout)["rows"]}


def same_rows(shown: dict, expected: dict) -> None:
    assert set(shown) == set(expected)
    for rid, values in expected.items():
        for c in ("temperature", "status", "reading_count"):
            assert shown[rid][c] == values[c], (rid, c)


def test_asof_a_seq_and_a_time_match_the_produced_stream(fleet, tmp_path):
    topic = f"v{fleet['run_id']}-sensor-1"
    session = f"{topic}-session-0"
    same_rows(asof_rows(fleet["out"], topic, session, "--seq", "13"),
              expected_at(fleet["messages"], topic, session, lambda m: m["seq"] <= 13))
    at = next(p.message["ts"] for p in fleet["messages"] if p.session == session and p.message["seq"] == 21)
    same_rows(asof_rows(fleet["out"], topic, session, "--at", at),
              expected_at(fleet["messages"], topic, session, lambda m: m["ts"] <= at))
    # asof names the digest of the last message it folded: the chain's state at that point.
    shown = cli("asof", "--output", str(fleet["out"]), "--topic", topic, "--session", session, "--seq", "13",
                "--format", "json")
    logged = _changes(fleet["out"])
    logged = logged[(logged["session"] == session) & (logged["seq"] <= 13)]
    assert json.loads(shown.stdout)["session"]["chain_digest"] == logged.sort_values("seq")["chain_digest"].iloc[-1]
    as_csv = cli("asof", "--output", str(fleet["out"]), "--topic", topic, "--session", session, "--seq", "13",
                 "--format", "csv")
    assert as_csv.returncode == 0 and as_csv.stdout.splitlines()[0] == ",".join(["row_id", *NAMES])
    missing = cli("asof", "--output", str(fleet["out"]), "--topic", topic, "--session", "nope", "--seq", "1")
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"reconstructor: no session 'nope' of topic {topic!r} in {fleet['out']}"


def readme_sql() -> str:
    text = README.read_text()
    return re.search(r"```sql\n(CREATE OR REPLACE TEMP VIEW row_versions.*?)```", text, re.S).group(1)


def test_the_readme_row_versions_view_runs_and_gives_the_tables(fleet, spark):
    out = fleet["out"]
    spark.sql(readme_sql().replace("s3a://recon/tables", str(out)).rstrip().rstrip(";"))
    now = spark.sql("SELECT * FROM row_versions WHERE to_seq IS NULL").collect()
    tables: dict = {}
    for r in now:
        tables.setdefault((r.topic, r.session), {})[r.row_id] = {c: r[c] for c in NAMES}
    assert tables == current_tables(spark, str(out), NAMES)
    topic = f"v{fleet['run_id']}-sensor-1"
    session = f"{topic}-session-0"
    at_13 = spark.sql(f"SELECT * FROM row_versions WHERE topic = '{topic}' AND session = '{session}' "
                      "AND from_seq <= 13 AND (to_seq IS NULL OR to_seq > 13)").collect()
    same_rows({r.row_id: r.asDict() for r in at_13},
              expected_at(fleet["messages"], topic, session, lambda m: m["seq"] <= 13))


def _append_copy_of(table_dir: Path, predicate) -> None:
    data = DeltaTable(str(table_dir)).to_pyarrow_table()
    write_deltalake(str(table_dir), data.filter(predicate(data)), mode="append")


@pytest.mark.parametrize("corruption", ["current_rows row twice", "sessions row twice", "current_rows seq",
                                        "current_rows offset"])
def test_a_duplicated_or_altered_live_row_is_named(fleet, tmp_path, corruption):
    out = copy_of(fleet, tmp_path)
    change = last_upsert(out)
    mine = f"session = '{change.session}'"
    if corruption == "current_rows row twice":
        _append_copy_of(out / "current_rows", lambda d: pc.and_(pc.equal(d["session"], change.session),
                                                                 pc.equal(d["row_id"], change.row_id)))
        expected = ("current_rows", f"row={change.row_id}: the row is held twice")
    elif corruption == "sessions row twice":
        _append_copy_of(out / "sessions", lambda d: pc.equal(d["session"], change.session))
        expected = ("sessions", ": the session has 2 rows")
    else:
        column = corruption.split()[-1]
        DeltaTable(str(out / "current_rows")).update(
            predicate=f"{mine} AND row_id = '{change.row_id}'", new_values={f'"{column}"': "1"})
        expected = ("current_rows", f"row={change.row_id}: {column} is 1 here, {int(change[column])} in row_changes")
    line = failed_line(verify(out))
    assert line.startswith(f"reconstructor: VERIFY FAILED {expected[0]} topic={change.topic} "
                           f"session={change.session} "), line
    assert expected[1] in line, line


def _described(spark, ident: str) -> dict[str, str | None]:
    """A table's columns and their comments, as ``DESCRIBE TABLE`` shows them."""
    out = {}
    for r in spark.sql(f"DESCRIBE TABLE {ident}").collect():
        if not r.col_name or r.col_name.startswith("#"):
            break  # the partition section repeats columns
        out[r.col_name] = r.comment
    return out


def test_the_run_registers_its_tables_by_name_with_the_contracts_comments_and_the_row_versions_view(fleet, spark):
    catalog, out = f"v{fleet['run_id']}", fleet["out"]
    assert {t.name for t in spark.catalog.listTables(catalog)} == {*TABLES, "row_versions"}
    for name in TABLES:
        table = spark.catalog.getTable(f"{catalog}.{name}")
        assert (table.tableType, table.description) == ("EXTERNAL", TABLE_COMMENTS[name])
        assert spark.table(f"{catalog}.{name}").count() == spark.read.format("delta").load(str(out / name)).count()
        described = _described(spark, f"{catalog}.{name}")
        assert described and all(comment == column_comment(name, column, SCHEMA)
                                 for column, comment in described.items()), (name, described)
    now = spark.sql(f"SELECT * FROM {catalog}.row_versions WHERE to_seq IS NULL").collect()
    tables: dict = {}
    for r in now:
        tables.setdefault((r.topic, r.session), {})[r.row_id] = {c: r[c] for c in NAMES}
    assert tables == current_tables(spark, str(out), NAMES)


def test_registering_again_commits_nothing_and_another_output_takes_the_names_only_when_asked(fleet, spark, tmp_path):
    catalog, out = f"v{fleet['run_id']}", fleet["out"]
    versions = {name: DeltaTable(str(out / name)).version() for name in TABLES}
    assert comment_tables(spark, str(out), SCHEMA) == 0
    assert register_tables(spark, catalog, str(out), SCHEMA) == []
    assert {name: DeltaTable(str(out / name)).version() for name in TABLES} == versions
    copy = copy_of(fleet, tmp_path)  # as a replay into a new output leaves it
    with pytest.raises(UsageError, match=f"{catalog}.row_changes is registered at .*, not at {copy}/row_changes: "
                                         "pass --catalog-replace to point it here"):
        register_tables(spark, catalog, str(copy), SCHEMA)
    try:
        assert register_tables(spark, catalog, str(copy), SCHEMA, replace=True) == [
            f"{catalog}.{name}" for name in TABLES]
        location = spark.sql(f"DESCRIBE DETAIL {catalog}.sessions").collect()[0].location
        assert location.rstrip("/").endswith(f"{copy}/sessions")
        assert copy.exists() and (out / "sessions").exists()  # a name dropped leaves the files
    finally:
        register_tables(spark, catalog, str(out), SCHEMA, replace=True)


def test_a_tables_comment_is_read_from_its_metadata_and_a_column_named_comment_is_not_it(spark, tmp_path):
    commented, bare = str(tmp_path / "commented"), str(tmp_path / "bare")
    SparkDeltaTable.createIfNotExists(spark).location(commented).comment("it's `the` table").addColumn(
        "Comment", "string", comment="a column").execute()
    SparkDeltaTable.createIfNotExists(spark).location(bare).addColumn("Comment", "string").execute()
    assert table_comment(spark, commented) == "it's `the` table"
    assert table_comment(spark, bare) is None
