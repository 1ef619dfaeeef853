"""The writer lease on the real local S3 endpoint: S3's conditional PUT keeps one holder, and a
lease taken there refuses a second writer of an ``s3a://`` output until it is released; and on a
local output, whose lease the driver's process holds while it lives."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconstructor.contract.lease import S3LeaseStore, WriterLease, lease_store
from reconstructor.core.lease import Lease
from reconstructor.errors import LeaseLost, ReconstructorError, UsageError
from reconstructor.settings import S3Settings
from tests.support.faulty_s3 import held, release, s3_endpoint_of_its_own, wait_for

pytestmark = pytest.mark.integration


def _s3(stack) -> S3Settings:
    return S3Settings(endpoint=stack.s3_endpoint(), region=stack.S3_REGION, access_key=stack.S3_ACCESS_KEY,
                    secret_key=stack.S3_SECRET_KEY, path_style=True)


def test_conditional_puts_on_the_s3_endpoint_keep_one_holder(stack, run_id):
    store = lease_store(f"s3a://recon/lease{run_id}/out", _s3(stack))
    assert isinstance(store, S3LeaseStore) and store.key == f"lease{run_id}/out/_reconstructor/writer.lease"
    held = Lease("run", "chk-1", "h", 1, "t-1", 2e9)
    assert store.read() == (None, None)
    version = store.write(held, None)
    assert version is not None
    assert store.write(Lease("run", "chk-2", "h", 2, "t-2", 2e9), None) is None  # it exists
    assert store.write(held.released(), '"not-its-etag"') is None
    assert store.read() == (held, version)
    assert store.write(held.released(), version) is not None


def test_a_second_writer_of_an_s3_output_is_refused_until_the_first_releases(stack, run_id):
    output = f"s3a://recon/lease{run_id}/second"
    first = WriterLease(lease_store(output, _s3(stack)), "run", f"{output}/_checkpoints/a", ttl_s=60)
    first.acquire(output)
    second = WriterLease(lease_store(output, _s3(stack)), "run", f"{output}/_checkpoints/b", ttl_s=60)
    with pytest.raises(UsageError) as refused:
        second.acquire(output)
    assert f"is being written by a run of the checkpoint {output}/_checkpoints/a" in str(refused.value)
    first.release()
    second.acquire(output)
    second.check()
    second.release()


def test_a_bucket_that_does_not_exist_is_named(stack):
    store = lease_store("s3a://no-such-bucket/out", _s3(stack))
    with pytest.raises(ReconstructorError) as failed:
        store.read()
    assert "s3a://no-such-bucket/out/_reconstructor/writer.lease" in str(failed.value)
    assert "NoSuchBucket" in str(failed.value)


def test_a_driver_whose_clock_runs_ahead_does_not_take_a_live_lease(stack, run_id):
    """Expiry is not read off the holder's clock: a reader two minutes ahead sees the lease as long
    expired by the clocks, watches it, finds it renewed, and is refused; once the holder stops
    renewing (crashed), the reader takes it after watching it unchanged for the TTL on its own
    clock, whatever the two clocks say."""
    import time

    output = f"s3a://recon/lease{run_id}/skew"
    holder = WriterLease(lease_store(output, _s3(stack)), "run", f"{output}/_checkpoints/a", ttl_s=2,
                         clock=lambda: time.time() - 30)  # a holder whose clock runs behind
    holder.acquire(output)
    said: list[str] = []
    ahead = WriterLease(lease_store(output, _s3(stack)), "replay", f"{output}/_checkpoints/b", ttl_s=2,
                        clock=lambda: time.time() + 120, say=said.append)
    with pytest.raises(UsageError) as refused:
        ahead.acquire(output)
    assert f"is being written by a run of the checkpoint {output}/_checkpoints/a" in str(refused.value)
    holder.check()

    holder._stop.set()  # the holder stops renewing: crashed
    said.clear()
    ahead.acquire(output)
    assert len(said) == 1 and said[0].endswith(": watching its lease, which must stay unrenewed for 2s before "
                                               "it is taken"), said
    with pytest.raises(LeaseLost):
        holder.check()
    ahead.release()


def test_a_driver_with_a_shorter_ttl_waits_out_the_s3_lease_holders_longer_one(stack, run_id):
    """The holder, a process of its own, renews every half second (a TTL of 2s); a restart of the
    same writer with a TTL of 0.25s would see the lease unchanged for its own TTL between two
    renewals.  It waits until the holder releases; and once a holder with a TTL of 3s is killed,
    the restart takes its lease only after watching it unchanged for those 3s (on its own clock,
    which the test moves)."""
    import os
    import signal
    import threading

    from tests.support.lease_holder import lease_holder

    output, s3 = f"s3a://recon/lease{run_id}/ttls", _s3(stack)
    checkpoint = f"{output}/_checkpoints/a"
    env = {"RECON_S3_ENDPOINT": s3.endpoint or "", "RECON_S3_REGION": s3.region or "",
           "RECON_S3_ACCESS_KEY": s3.access_key or "", "RECON_S3_SECRET_KEY": s3.secret_key or "",
           "RECON_S3_PATH_STYLE": "true"}
    store = lease_store(output, s3)
    assert store is not None
    with lease_holder(output, checkpoint, ttl_s=2, env=env) as holder:
        restart = WriterLease(lease_store(output, s3), "run", checkpoint, ttl_s=0.25, say=lambda line: None)
        taking = threading.Thread(target=restart.acquire, args=(output,), daemon=True)
        taking.start()
        taking.join(1.5)  # three of the holder's renewals
        assert taking.is_alive() and store.read()[0].token == holder.token
        assert holder.check() == "ok"
        holder.release()
        taking.join(10)
        assert not taking.is_alive() and store.read()[0].token == restart.token
        restart.release()

    with lease_holder(output, checkpoint, ttl_s=3, env=env) as crashed:
        os.kill(crashed.proc.pid, signal.SIGKILL)
        crashed.proc.wait()
        watched = [0.0]  # the successor's monotonic clock, moved by its sleeps alone

        def sleep(seconds: float) -> None:
            watched[0] += seconds

        successor = WriterLease(lease_store(output, s3), "run", checkpoint, ttl_s=0.25,
                                monotonic=lambda: watched[0], sleep=sleep, say=lambda line: None)
        successor.acquire(output)
        assert watched[0] >= 3  # the crashed holder's TTL, not the successor's own
        assert store.read()[0].token == successor.token
        successor.release()


def test_an_endpoint_that_ignores_conditional_writes_is_refused(stack, run_id, tmp_path):
    """A store that drops ``If-None-Match`` and ``If-Match`` lets every driver take the lease: the
    lease's probe finds it out before any is taken (the local endpoint, started here without them)."""
    with s3_endpoint_of_its_own(tmp_path, "loose", "--ignore-conditional-writes") as (endpoint, _):
        s3 = S3Settings(endpoint=endpoint, region=stack.S3_REGION, access_key=stack.S3_ACCESS_KEY,
                        secret_key=stack.S3_SECRET_KEY, path_style=True)
        output = f"s3a://loose/lease{run_id}/out"
        lease = WriterLease(lease_store(output, s3), "run", f"{output}/_checkpoints/a", ttl_s=60)
        with pytest.raises(UsageError) as refused:
            lease.acquire(output)
        assert str(refused.value).startswith(
            f"the S3 endpoint {endpoint} does not honour conditional writes (If-None-Match and If-Match were "
            f"ignored on s3a://loose/lease{run_id}/out/_reconstructor/probe-"), refused.value
        assert str(refused.value).endswith("): the writer lease cannot keep a second driver out there")
        assert lease_store(output, s3).read() == (None, None)  # no lease was taken


# Commit fencing: Delta's log on s3a:// is written put-if-absent (reconstructor.delta.PutIfAbsentLogStore
# in the project's jar), so that of two drivers committing one version, the second fails and retries.

FIRST_COMMIT = r"_delta_log/0{19}1\.json$"


def test_a_second_committer_of_one_version_retries_instead_of_replacing_the_first(spark, stack, run_id, tmp_path):
    """Two drivers commit version 1 of one table: the endpoint holds this driver's PUT of
    ``00000000000000000001.json`` until the other driver (another machine, whose check for the file
    also found none) has written its own there.  The held write then fails at the store, and Delta
    retries it as version 2: both commits stay, where an unconditional PUT replaced the other's."""
    import json
    import threading

    hold = ("--hold-first-put", f"race{run_id}/" + FIRST_COMMIT)
    with s3_endpoint_of_its_own(tmp_path, "fenced", *hold) as (endpoint, client):
        spark.sparkContext._jsc.hadoopConfiguration().set("fs.s3a.bucket.fenced.endpoint", endpoint)
        table = f"s3a://fenced/race{run_id}"
        spark.range(1).write.format("delta").save(table)
        failed: list[BaseException] = []

        def append() -> None:
            try:
                spark.range(10, 15).write.format("delta").mode("append").save(table)
            except BaseException as exc:  # noqa: BLE001 - reported by the test's own assert
                failed.append(exc)

        writer = threading.Thread(target=append)
        writer.start()
        wait_for(lambda: held(endpoint), "a held commit")
        other = {"commitInfo": {"timestamp": 1, "operation": "WRITE", "isBlindAppend": True,
                                "operationParameters": {"mode": "Append"}, "userMetadata": "the other driver"}}
        client.put_object(Bucket="fenced", Key=f"race{run_id}/_delta_log/{1:020d}.json",
                          Body=(json.dumps(other) + "\n").encode())
        release(endpoint)
        writer.join(timeout=120)
        assert not writer.is_alive() and not failed, failed

        history = {r["version"]: r["userMetadata"] for r in
                   spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version", "userMetadata").collect()}
        assert history == {0: None, 1: "the other driver", 2: None}, history
        assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == [0, 10, 11, 12, 13, 14]


def test_a_commit_whose_answer_was_lost_is_not_made_twice(spark, stack, run_id, tmp_path):
    """The endpoint stores this driver's commit of version 1 and loses its answer: the client retries
    the PUT, which the object now there fails.  It is this driver's own, so the commit stands once,
    and is not retried as a second commit of the same rows."""
    lose = ("--lose-first-answer", f"lost{run_id}/" + FIRST_COMMIT)
    with s3_endpoint_of_its_own(tmp_path, "lossy", *lose) as (endpoint, _):
        spark.sparkContext._jsc.hadoopConfiguration().set("fs.s3a.bucket.lossy.endpoint", endpoint)
        table = f"s3a://lossy/lost{run_id}"
        spark.range(1).write.format("delta").save(table)
        spark.range(10, 15).write.format("delta").mode("append").save(table)
        versions = [r["version"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()]
        assert sorted(versions) == [0, 1], versions
        assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == [0, 10, 11, 12, 13, 14]


def test_a_commit_under_a_lease_the_output_no_longer_holds_is_refused_and_one_under_its_lease_stands(
        spark, stack, run_id):
    """A driver paused past its lease wakes after a successor took it: its commit, whose
    ``userMetadata`` names the lease it was made under, is refused by the log store, which reads
    the output's lease just before the PUT.  A commit under the current lease, and one naming no
    lease (a table's creation), are stored."""
    from reconstructor.contract.writer import batch_metadata

    output = f"s3a://{stack.S3_BUCKET}/fence{run_id}"
    table = f"{output}/row_changes"
    store = lease_store(output, _s3(stack))
    assert store is not None
    successor = Lease("run", f"{output}/chk", "host-b", 2, "token-successor", 2e9)
    assert store.write(successor, None) is not None
    spark.range(1).write.format("delta").save(table)

    def append(ids: range, lease: str) -> None:
        (spark.range(ids.start, ids.stop).write.format("delta").mode("append")
         .option("userMetadata", batch_metadata("q-1", 7, {}, lease=lease)).save(table))

    with pytest.raises(Exception, match=r"refused to commit .* under the writer lease token-paused"):
        append(range(10, 15), "token-paused")
    append(range(20, 22), "token-successor")
    versions = [r.version for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()]
    assert sorted(versions) == [0, 1], versions
    assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == [0, 20, 21]


# A local output's fence: the lease is held by its driver's process (a lock the kernel keeps for it
# while it lives, paused or not), and local commits carry no Delta transaction ids.

def _appending(table: Path) -> bool:
    """Whether an append to ``table`` has written data files that its log holds no commit of yet."""
    return any(table.rglob("*.parquet")) and \
        not any('"add"' in f.read_text() for f in (table / "_delta_log").glob("*.json"))


def test_a_local_driver_paused_past_its_lease_mid_batch_keeps_it_and_the_batch_is_written_once(
        stack, spark, run_id, tmp_path):
    """A run is stopped (SIGSTOP, its JVM with it) while its first batch appends to ``row_changes``,
    and stays stopped for two and a half times its TTL (2s); the same run started again on the
    checkpoint waits for it, since its process lives, and takes the lease only once the first,
    resumed, has ended.  The batch is in the tables once, and ``verify`` passes."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from reconstructor.audit.delta_tables import OutputTables
    from reconstructor.cli import main as cli_main
    from reconstructor.contract.lease import LEASE_NAME, FileLeaseStore
    from tests.support.cli import cli_in_process
    from tests.support.pipeline import change_count, produce
    from workbench.fleet import FleetSpec, plan_fleet

    spec = FleetSpec(topic_prefix=f"pause{run_id}-sensor-", sensors=1, sessions_per_sensor=2, rows=12, updates=40,
                     seed=31, end_sessions=False)
    messages = list(plan_fleet(spec))
    produce(spec, messages, 2)
    out, chk = tmp_path / "out", tmp_path / "chk"
    args = ("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", f"pause{run_id}-sensor-[0-9]+",
            "--output", str(out), "--checkpoint", str(chk), "--compact-every", "off", "--lease-ttl", "2 seconds")
    store = FileLeaseStore(out / LEASE_NAME)
    with open(tmp_path / "paused.log", "w") as log:
        paused = subprocess.Popen([sys.executable, "-m", "reconstructor", *args], stdout=log, stderr=log,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not _appending(out / "row_changes"):
            assert paused.poll() is None and time.monotonic() < deadline, (tmp_path / "paused.log").read_text()
            time.sleep(0.005)
        os.killpg(paused.pid, signal.SIGSTOP)
        assert _appending(out / "row_changes"), "the append committed before the driver was stopped"
        holder = store.read()[0]
        assert holder is not None

        def resume() -> None:
            """After 2.5 TTLs in which the restart did not take the lease; once it took it, after
            it has written the batch."""
            time.sleep(5)
            current = store.read()[0]
            if current is not None and current.token != holder.token:
                while not (chk / "commits" / "0").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            os.killpg(paused.pid, signal.SIGCONT)

        resuming = threading.Thread(target=resume, daemon=True)
        resuming.start()
        restarted = cli_in_process(*args)
        resuming.join()
        paused.wait(120)
    finally:
        if paused.poll() is None:
            os.killpg(paused.pid, signal.SIGKILL)
            paused.wait()
    changes = OutputTables(str(out), S3Settings()).read("row_changes")
    assert changes.num_rows == change_count(messages)
    keys = changes.select(["topic", "partition", "offset", "row_pos", "row_id"]).to_pylist()
    assert len({tuple(k.values()) for k in keys}) == changes.num_rows  # each change once
    assert cli_main(["verify", "--output", str(out)]) == 0
    assert paused.returncode == 0, (tmp_path / "paused.log").read_text()[-3000:]
    assert restarted.returncode == 0 and "waiting for it to end or its lease to expire" in restarted.stderr, \
        restarted.stderr[-3000:]
