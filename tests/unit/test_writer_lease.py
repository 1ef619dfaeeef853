"""The writer lease: one writing driver per output, a crashed one's successor after expiry.

The verdict is pure; the lease is exercised on a local file store with a clock the test moves
(the S3 store, on the real local endpoint, is in tests/integration/test_writer_lease.py)."""

from __future__ import annotations

import pytest

from reconstructor.contract.lease import FileLeaseStore, WriterLease
from reconstructor.core.lease import Lease, LeaseVerdict, LeaseWatch, verdict
from reconstructor.errors import LeaseLost, UsageError

NOW = 1_800_000_000.0


def lease(command="run", checkpoint="s3a://b/chk", token="t-1", expires_at=NOW + 60):
    return Lease(command, checkpoint, "host-a", 41, token, expires_at)


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

    first._stop.set()  # the first driver stops renewing (crashed), and its time runs out
    clock.now += 41
    assert other.holder() is None
    before = clock.now
    other.acquire("out")  # after watching it unrenewed for the TTL
    assert clock.now - before >= 40
    with pytest.raises(LeaseLost):
        first.check()
    other.release()
    assert WriterLease(store, "compact", None, ttl_s=40, clock=clock).holder() is None


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
