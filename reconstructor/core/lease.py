"""One writing driver per output: the lease a driver holds while it writes the tables.

Delta's log store on S3 assumes a single driver commits: two drivers writing one output lose each
other's commits, and two first runs on new tables would both append.  So ``run``, ``replay`` and
``compact`` hold a lease on the output while they write it: a small object beside the tables,
replaced only by a conditional write (on S3 a conditional PUT, ``If-None-Match``/``If-Match``),
renewed while the driver lives, and taken by another driver only once it has expired.

This module is the verdict, pure: what a driver does on finding a lease.  Storing it is
``reconstructor.contract.lease``.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from dataclasses import asdict, dataclass, replace

__all__ = ["Lease", "LeaseVerdict", "LeaseWatch", "left_to_watch", "verdict"]


@dataclass(frozen=True)
class Lease:
    """Who writes an output, until when by its holder's clock (epoch seconds; 0: released), and the
    holder's TTL.  The time is what a refusal names; whether the lease has expired is watched, not
    read from it (``LeaseWatch``), for the longer of the two drivers' TTLs."""

    command: str  # run, replay, compact
    checkpoint: str | None  # the writer's checkpoint (compact has none)
    host: str
    pid: int
    token: str  # this holder's, unique: a renewal must find its own
    expires_at: float
    #: The holder's TTL in seconds; None in a lease of a release that did not record it.
    ttl_s: float | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Lease | None:
        """The lease in ``text``; None for text that holds none (unreadable text is no lease a
        driver could be relying on: it never wrote one)."""
        try:
            data = json.loads(text)
            return cls(str(data["command"]), data.get("checkpoint"), str(data["host"]), int(data["pid"]),
                       str(data["token"]), float(data["expires_at"]), _duration(data.get("ttl_s")))
        except (ValueError, TypeError, KeyError):
            return None

    def renewed(self, now: float, ttl_s: float) -> Lease:
        return replace(self, expires_at=now + ttl_s, ttl_s=ttl_s)

    def released(self) -> Lease:
        return replace(self, expires_at=0.0)

    def expired(self, now: float) -> bool:
        return self.expires_at <= now

    def describe(self) -> str:
        """The holder as a refusal names it."""
        of = f" of the checkpoint {self.checkpoint}" if self.checkpoint else ""
        until = dt.datetime.fromtimestamp(self.expires_at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"a {self.command}{of} on {self.host} (pid {self.pid}), its lease renewed until {until}"


def _duration(value: object) -> float | None:
    """A stated TTL: seconds, finite and above 0; anything else is not known."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        return None
    return float(value)


class LeaseVerdict(enum.Enum):
    TAKE = "take"  # none held, released, watched unrenewed long enough (``left_to_watch``), or this holder's own
    WAIT = "wait"  # held by a previous driver of this same writer (a restart after a crash), or a compact
    WATCH = "watch"  # another writer's, expired by the clocks: taken if it stays unrenewed long enough
    REFUSE = "refuse"  # another writer is live


@dataclass
class LeaseWatch:
    """How long a reader has seen the stored lease unchanged, on the reader's own monotonic clock.

    Expiry is never read off two machines' clocks: a lease is expired for a reader only once the
    reader has watched it stay at one version, unrenewed, for the TTL.  Its holder counts the same
    TTL from when it sent its renewal, and stops writing a third of it early, so the two agree
    whatever the offset between their clocks, as long as neither runs more than a few percent
    fast or slow (the README's bound)."""

    version: str | None = None
    since: float = 0.0
    #: The lease changed while watched: its holder renews it, so it is live.
    renewed: bool = False

    def see(self, version: str | None, now: float) -> float:
        """Seconds the lease has stayed at ``version`` (``now``: the reader's monotonic clock)."""
        if version != self.version:
            self.renewed = self.version is not None
            self.version, self.since = version, now
        return now - self.since


def left_to_watch(current: Lease, unchanged_s: float, ttl_s: float, now: float) -> float:
    """Seconds ``current`` must yet stay unchanged, watched by a driver whose TTL is ``ttl_s``,
    before its holder is gone (0: gone).

    The holder renews every quarter of its own TTL, so a lease is watched for the longer of the
    two TTLs: a taker with a shorter one would otherwise see a live lease stay unchanged between
    two renewals.  A lease of a release that did not record its TTL may have any: it is watched for
    the taker's TTL and until its stated expiry has passed by that TTL on the taker's clock, which
    waits out any holder whose clock runs less than a TTL behind the taker's."""
    if current.ttl_s is not None:
        return max(0.0, max(ttl_s, current.ttl_s) - unchanged_s)
    return max(0.0, ttl_s - unchanged_s, current.expires_at + ttl_s - now)


def verdict(current: Lease | None, me: Lease, now: float, unchanged_s: float = 0.0, ttl_s: float = float("inf"),
            renewed: bool = False, live: bool = False) -> LeaseVerdict:
    """What ``me`` does on finding ``current``, unchanged for ``unchanged_s`` of its own clock
    (``renewed``: it changed while watched).  ``now`` (the reader's wall clock) only hurries a
    refusal: a lease whose stated expiry is still ahead is live; an expired-looking one is watched.
    ``live``: another process holds the output's lock (a local output), so its holder lives,
    running or paused, whatever the TTLs; a lease is only taken once no process holds that lock.

    A driver restarted on the same checkpoint by the same command (a scheduler's retry after a
    crash) waits for the dead one's lease to expire rather than fail, and a stream waits for a
    ``compact`` to finish (it takes minutes, and the stream's own compaction would do the same);
    any other holder is another writer, refused once it shows it is live."""
    if current is not None and current.token == me.token:
        return LeaseVerdict.TAKE
    if live and (current is None or current.expires_at == 0.0):
        return LeaseVerdict.WAIT  # another process is taking the lease, or letting go of it
    if current is None or current.expires_at == 0.0 or \
            (not live and left_to_watch(current, unchanged_s, ttl_s, now) == 0.0):
        return LeaseVerdict.TAKE
    if current.command == "compact" and me.command != "compact":
        return LeaseVerdict.WAIT
    if current.command == me.command and current.checkpoint is not None and \
            _same(current.checkpoint, me.checkpoint):
        return LeaseVerdict.WAIT
    if live or renewed or not current.expired(now):
        return LeaseVerdict.REFUSE
    return LeaseVerdict.WATCH


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")
