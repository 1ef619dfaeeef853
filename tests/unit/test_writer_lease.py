"""The writer lease: one writing driver per output, a crashed one's successor after expiry.

The verdict is pure; the lease is exercised on a local file store with a clock the test moves
(the S3 store, on the real local endpoint, is in tests/integration/test_writer_lease.py)."""

from __future__ import annotations

import pytest

from reconstructor.contract.lease import FileLeaseStore, WriterLease
from reconstructor.core.lease import Lease, LeaseVerdict, LeaseWatch, verdict
from reconstructor.errors import LeaseLost, UsageError

NOW = 1_800_000_000.0


def lease(command="run", checkpoint="s3a://b/chk", token="t-1", expires_at=NOW + 60, ttl_s: float | None = 60.0):
    return Lease(command, checkpoint, "host-a", 41, token, expires_at, ttl_s)


def test_a_live_lease_of_another_writer_is_refused_and_an_expired_or_released_one_is_taken():
    me = lease(checkpoint="s3a://b/other-chk", token="t-2")
    assert verdict(None, me, NOW) == LeaseVerdict.TAKE
    assert verdict(lease(), me, NOW) == LeaseVerdict.REFUSE  # two first runs: the second is refused
    assert verdict(lease(command="replay"), lease(token="t-2"), NOW) == LeaseVerdict.REFUSE
    assert verdict(lease().released(), me, NOW) == LeaseVerdict.TAKE
    assert verdict(lease(), lease(), NOW) == LeaseVerdict.TAKE  # its own, renewed


def test_a_lease_expired_by_the_clocks_is_taken_only_once_watched_unrenewed_for_its_ttl():
    """The holder's clock may run behind the reader's: its stated expiry proves nothing."""
    me = lease(checkpoint="s3a://b/other-chk", token="t-2")
    assert verdict(lease(expires_at=NOW), me, NOW) == LeaseVerdict.WATCH
    assert verdict(lease(expires_at=NOW), me, NOW, unchanged_s=59.9, ttl_s=60) == LeaseVerdict.WATCH
    assert verdict(lease(expires_at=NOW), me, NOW, unchanged_s=60, ttl_s=60) == LeaseVerdict.TAKE
    assert verdict(lease(expires_at=NOW), me, NOW, unchanged_s=1, ttl_s=60, renewed=True) == LeaseVerdict.REFUSE
    # A live-looking lease is taken too once watched unrenewed for the TTL: its holder's clock ran ahead.
    assert verdict(lease(expires_at=NOW + 999), me, NOW, unchanged_s=60, ttl_s=60) == LeaseVerdict.TAKE


def test_a_watch_counts_from_the_first_sight_of_a_version_and_a_change_is_a_renewal():
    watch = LeaseWatch()
    assert watch.see("v1", 10.0) == 0.0 and not watch.renewed
    assert watch.see("v1", 25.0) == 15.0
    assert watch.see("v2", 30.0) == 0.0 and watch.renewed


def test_a_restarted_driver_of_the_same_writer_waits_and_a_stream_waits_for_a_compact():
    assert verdict(lease(), lease(checkpoint="s3a://b/chk/", token="t-2"), NOW) == LeaseVerdict.WAIT
    assert verdict(lease(command="compact", checkpoint=None), lease(token="t-2"), NOW) == LeaseVerdict.WAIT
    assert verdict(lease(command="compact", checkpoint=None), lease(command="compact", checkpoint=None,
                                                                     token="t-2"), NOW) == LeaseVerdict.REFUSE


def test_a_taker_waits_out_the_longer_of_its_own_ttl_and_the_one_the_lease_records():
    """The holder renews every quarter of its own TTL: a taker with a shorter one would see a live
    lease stay unchanged for its own TTL between two renewals."""
    long_held = lease(ttl_s=4)
    restart, other = lease(checkpoint="s3a://b/chk/", token="t-2"), lease(checkpoint="s3a://b/other", token="t-2")
    assert verdict(long_held, restart, NOW, unchanged_s=0.5, ttl_s=0.5) == LeaseVerdict.WAIT
    assert verdict(long_held, restart, NOW, unchanged_s=3.9, ttl_s=0.5) == LeaseVerdict.WAIT
    assert verdict(long_held, restart, NOW, unchanged_s=4, ttl_s=0.5) == LeaseVerdict.TAKE
    assert verdict(lease(expires_at=NOW, ttl_s=4), other, NOW, unchanged_s=0.5, ttl_s=0.5) == LeaseVerdict.WATCH
    assert verdict(lease(expires_at=NOW, ttl_s=4), other, NOW, unchanged_s=4, ttl_s=0.5) == LeaseVerdict.TAKE
    short_held = lease(ttl_s=0.5)  # a taker with the longer TTL waits out its own
    assert verdict(short_held, restart, NOW, unchanged_s=0.5, ttl_s=4) == LeaseVerdict.WAIT
    assert verdict(short_held, restart, NOW, unchanged_s=4, ttl_s=4) == LeaseVerdict.TAKE


def test_a_lease_states_its_holders_ttl(tmp_path):
    store = FileLeaseStore(tmp_path / "writer.lease")
    held = WriterLease(store, "run", "chk-1", ttl_s=42.5, say=lambda line: None)
    held.acquire("out")
    assert store.read()[0].ttl_s == 42.5
    assert Lease.from_json(store.read()[0].to_json()) == store.read()[0]
    held.release()


#: A lease as the release before TTLs were recorded wrote it.
EARLIER_RELEASE_LEASE = ('{"checkpoint": "s3a://b/chk", "command": "run", "expires_at": 1800000060.0, '
                         '"host": "host-a", "pid": 41, "token": "t-1"}')


def test_a_lease_of_an_earlier_release_is_read_and_taken_only_once_past_its_stated_expiry_by_the_takers_ttl():
    """Its holder's TTL is unknown, and may be longer than the taker's: the taker waits for it to
    stay unchanged for its own TTL and for its stated expiry to pass by that TTL on its own clock."""
    old = Lease.from_json(EARLIER_RELEASE_LEASE)
    assert old == lease(ttl_s=None)
    restart = lease(checkpoint="s3a://b/chk", token="t-2")
    assert verdict(old, restart, NOW, unchanged_s=600, ttl_s=10) == LeaseVerdict.WAIT
    assert verdict(old, restart, NOW + 60 + 9, unchanged_s=600, ttl_s=10) == LeaseVerdict.WAIT
    assert verdict(old, restart, NOW + 60 + 10, unchanged_s=9, ttl_s=10) == LeaseVerdict.WAIT
    assert verdict(old, restart, NOW + 60 + 10, unchanged_s=10, ttl_s=10) == LeaseVerdict.TAKE
    assert verdict(old.released(), restart, NOW) == LeaseVerdict.TAKE
    other = lease(checkpoint="s3a://b/other", token="t-2")
    assert verdict(old, other, NOW + 61, unchanged_s=600, ttl_s=10) == LeaseVerdict.WATCH


def test_a_stated_ttl_that_is_no_duration_counts_as_unknown():
    for ttl in ('"soon"', "-1", "0", "NaN", "Infinity", "null", "true"):
        text = EARLIER_RELEASE_LEASE.replace('"token"', f'"ttl_s": {ttl}, "token"')
        assert Lease.from_json(text) == lease(ttl_s=None), ttl


def test_unreadable_text_holds_no_lease():
    assert Lease.from_json("{not json") is None and Lease.from_json('{"command": "run"}') is None
    assert Lease.from_json(lease().to_json()) == lease()


class Clock:
    """A wall clock and a monotonic one that the test moves, and a sleep that moves both."""

    def __init__(self):
        self.now = NOW

    def __call__(self):
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def moved(store, command, checkpoint, ttl_s, clock: Clock) -> WriterLease:
    return WriterLease(store, command, checkpoint, ttl_s=ttl_s, clock=clock, monotonic=clock, sleep=clock.sleep,
                       say=lambda line: None)


def crashed(lease: WriterLease) -> None:
    """What a driver's death leaves of its lease: the lease, no longer renewed, and no process
    holding the output's lock (the kernel lets go of it)."""
    lease._stop.set()
    lease._let_go()


class StillWaiting(Exception):
    pass


class Impatient(Clock):
    """A clock whose sleep gives up after ``sleeps`` of them: for a wait that would not end."""

    def __init__(self, sleeps: int):
        super().__init__()
        self.sleeps = sleeps

    def sleep(self, seconds: float) -> None:
        self.sleeps -= 1
        if self.sleeps < 0:
            raise StillWaiting()
        super().sleep(seconds)


def test_one_writer_at_a_time_and_a_crashed_ones_successor_takes_over_after_expiry(tmp_path):
    store, clock = FileLeaseStore(tmp_path / "out" / "_reconstructor" / "writer.lease"), Clock()
    first = moved(store, "run", "chk-1", 40, clock)
    first.acquire("out")
    first.check()
    other = moved(store, "replay", "chk-2", 40, clock)
    with pytest.raises(UsageError) as refused:
        other.acquire("out")
    assert str(refused.value).startswith("the output out is being written by a run of the checkpoint chk-1 on ")
    assert other.holder() is not None

    crashed(first)  # and its time runs out
    clock.now += 41
    assert other.holder() is None
    before = clock.now
    other.acquire("out")  # after watching it unrenewed for the TTL
    assert clock.now - before >= 40
    with pytest.raises(LeaseLost):
        first.check()
    other.release()
    assert WriterLease(store, "compact", None, ttl_s=40, clock=clock).holder() is None


def test_a_crashed_holders_longer_ttl_is_waited_out_by_a_successor_with_a_shorter_one(tmp_path):
    store, clock = FileLeaseStore(tmp_path / "writer.lease"), Clock()
    first = moved(store, "run", "chk-1", 40, clock)
    first.acquire("out")
    crashed(first)
    restarted = moved(store, "run", "chk-1", 10, clock)
    before = clock.now
    restarted.acquire("out")
    assert clock.now - before >= 40  # the crashed one's TTL, not the successor's own 10s
    assert store.read()[0].token == restarted.token and store.read()[0].ttl_s == 10
    restarted.release()


def test_a_local_holder_paused_past_its_ttl_keeps_its_lease_while_its_process_lives(tmp_path):
    """A paused driver (SIGSTOP, a laptop asleep) renews nothing, but its process holds the output's
    lock: another writer is refused, the same writer's next start waits, ``compact`` names it, and
    the holder, resumed, still holds its lease."""
    store, clock = FileLeaseStore(tmp_path / "writer.lease"), Impatient(sleeps=200)
    paused = moved(store, "run", "chk-1", 4, clock)
    paused.acquire("out")
    paused._stop.set()  # its renewals stop with it
    clock.now += 600

    with pytest.raises(UsageError) as refused:
        moved(store, "replay", "chk-2", 4, clock).acquire("out")
    assert "is being written by a run of the checkpoint chk-1" in str(refused.value)
    with pytest.raises(StillWaiting):
        moved(store, "run", "chk-1", 4, clock).acquire("out")
    assert clock.now >= NOW + 600 + 4 * 10  # far past both TTLs, still waiting
    assert WriterLease(store, "compact", None, ttl_s=4, clock=clock).holder() == store.read()[0]
    assert store.read()[0].token == paused.token

    paused.check()  # resumed: still its own, renewed
    assert store.read()[0].expires_at == clock.now + 4
    paused.release()
    clock.sleeps = 200
    successor = moved(store, "run", "chk-1", 4, clock)
    successor.acquire("out")  # released: taken at once
    successor.release()


@pytest.mark.parametrize("paused", [False, True], ids=["live", "paused"])
def test_a_process_holding_a_local_lease_keeps_it_from_a_driver_with_a_shorter_ttl(tmp_path, paused):
    """Two processes: the holder (renewing every half second, or stopped by SIGSTOP past its TTL)
    and a restart of the same writer with an eighth of its TTL, which waits until the holder
    releases."""
    import os
    import signal
    import threading

    from reconstructor.contract.lease import lease_store
    from reconstructor.settings import S3Settings
    from tests.support.lease_holder import lease_holder

    output = str(tmp_path / "out")
    store = lease_store(output, S3Settings())
    with lease_holder(output, "chk-1", ttl_s=2) as holder:
        if paused:
            os.kill(holder.proc.pid, signal.SIGSTOP)
        restart = WriterLease(store, "run", "chk-1", ttl_s=0.25, say=lambda line: None)
        taking = threading.Thread(target=restart.acquire, args=(output,), daemon=True)
        taking.start()
        taking.join(3 if paused else 1.5)  # past the holder's TTL when paused, else past its renewals
        assert taking.is_alive() and store.read()[0].token == holder.token
        if paused:
            os.kill(holder.proc.pid, signal.SIGCONT)
        assert holder.check() == "ok"
        holder.release()
        taking.join(10)
        assert not taking.is_alive() and store.read()[0].token == restart.token
        restart.release()


def test_a_lease_lost_to_another_driver_is_found_by_the_renewal_and_stops_the_next_write(tmp_path):
    store, clock = FileLeaseStore(tmp_path / "writer.lease"), Clock()
    held = WriterLease(store, "run", "chk-1", ttl_s=0.4, clock=clock)
    held.acquire("out")
    _current, version = store.read()
    assert store.write(Lease("run", "chk-9", "h", 1, "thief", NOW + 999), version) is not None
    import time

    time.sleep(0.5)  # a renewal finds the lease taken
    with pytest.raises(LeaseLost) as lost:
        held.check()
    assert "taken by a run of the checkpoint chk-9" in str(lost.value)
    held.release()
    assert store.read()[0].token == "thief"  # a lost lease is never released over its new holder


def test_a_conditional_write_fails_when_the_lease_changed_since_it_was_read(tmp_path):
    store = FileLeaseStore(tmp_path / "writer.lease")
    assert store.write(lease(), None) is not None
    assert store.write(lease(token="t-2"), None) is None  # created in between
    _, version = store.read()
    assert store.write(lease(token="t-3"), "stale") is None
    assert store.write(lease(token="t-3"), version) is not None


class LandsThenTimesOut:
    """A store whose first renewal reaches S3 but whose answer is lost (a frozen endpoint that
    comes back after the client gave up): the driver's next conditional write finds its own."""

    def __init__(self, store):
        self.store, self.location, self.renewals = store, store.location, 0

    def read(self):
        return self.store.read()

    def write(self, lease, version):
        new = self.store.write(lease, version)
        if version is not None:
            self.renewals += 1
            if self.renewals == 1:
                raise OSError("read timeout on endpoint URL")
        return new


def test_a_renewal_whose_answer_was_lost_is_found_to_be_this_drivers_own_and_the_lease_is_kept(tmp_path):
    import time

    store = LandsThenTimesOut(FileLeaseStore(tmp_path / "writer.lease"))
    held = WriterLease(store, "run", "chk-1", ttl_s=0.4)
    held.acquire("out")
    deadline = time.monotonic() + 5
    while store.renewals < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.renewals >= 3, "the lease was not renewed after the lost answer"
    held.check()  # still this driver's, renewed
    held.release()
    assert store.read()[0].expired(time.time())


def test_a_lease_the_thread_could_not_renew_in_time_is_renewed_before_the_next_write(tmp_path):
    store, clock = FileLeaseStore(tmp_path / "writer.lease"), Clock()
    held = moved(store, "run", "chk-1", 60, clock)
    held.acquire("out")
    held._stop.set()  # the endpoint did not answer the thread's renewals
    clock.now += 50
    held.check()  # renewed now, since nobody else took it
    assert store.read()[0].expires_at == clock.now + 60
    held.release()
