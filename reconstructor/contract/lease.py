"""The output's writer lease, stored beside the tables and replaced only by conditional writes.

``LeaseStore`` is the interface: read the lease with a version, write one only if the version is
still the one read.  ``S3LeaseStore`` does it with S3's conditional PUT (``If-None-Match: *`` to
create, ``If-Match: <etag>`` to replace), ``FileLeaseStore`` with a lock file on a local path.
``WriterLease`` takes the lease for a command, renews it from a thread while the command runs,
and tells the sink, before each micro-batch writes, whether it still holds it.

No TTL alone can stop a driver that was paused (a long GC, a frozen VM) past its expiry from
making one more commit once it wakes, before its next check.  On a local output the holder also
keeps a lock on a file beside the lease (``flock``) from taking the lease to releasing it: the
kernel holds it for a paused process and lets go of it when the process dies, and no driver takes
a lease while another process holds that lock.  On ``s3a://`` the log store refuses a commit whose
lease is no longer the output's, and the README says what guards it elsewhere.

The lease's rules (who holds it, until when, what a takeover needs) are ``core.lease``'s; this
module stores it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlparse

from reconstructor.core.lease import Lease, LeaseVerdict, LeaseWatch, left_to_watch, verdict
from reconstructor.errors import LeaseLost, ReconstructorError, UsageError
from reconstructor.settings import S3Settings

__all__ = ["FileLeaseStore", "LeaseStore", "S3LeaseStore", "WriterLease", "lease_store"]

log = logging.getLogger("reconstructor")

#: The lease's object under the output root, beside the tables.
LEASE_NAME = "_reconstructor/writer.lease"


class LeaseStore(Protocol):
    """Where an output's lease lives."""

    location: str

    def read(self) -> tuple[Lease | None, str | None]:
        """The lease and its version (None, None when there is none)."""

    def write(self, lease: Lease, version: str | None) -> str | None:
        """Write ``lease`` if the stored version is still ``version`` (None: if there is none);
        its new version, or None when another driver wrote in between."""


#: The (endpoint, bucket) pairs whose conditional writes this process has seen honoured.
_PROBED: set[tuple[str, str]] = set()


class S3LeaseStore:
    """The lease as an S3 object, replaced by conditional PUTs (S3 has honoured ``If-None-Match``
    and ``If-Match`` on PUT since 2024; the local stack's endpoint does too)."""

    def __init__(self, bucket: str, key: str, s3: S3Settings):
        import boto3
        from botocore.config import Config as BotoConfig

        self.bucket, self.key = bucket, key
        self.location = f"s3a://{bucket}/{key}"
        self._client = boto3.client(
            "s3", endpoint_url=s3.endpoint, region_name=s3.region or "us-east-1",
            aws_access_key_id=s3.access_key, aws_secret_access_key=s3.secret_key,
            config=BotoConfig(s3={"addressing_style": "path" if s3.path_style else "auto"},
                              retries={"max_attempts": 3}, connect_timeout=10, read_timeout=20))

    def read(self) -> tuple[Lease | None, str | None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            got = self._client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None, None
            raise self._failure(exc) from None
        except BotoCoreError as exc:
            raise self._failure(exc) from None
        return Lease.from_json(got["Body"].read().decode("utf-8", "replace")), got["ETag"]

    def write(self, lease: Lease, version: str | None) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        condition: dict[str, Any] = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            put = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=lease.to_json().encode(),
                                          ContentType="application/json", **condition)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict",
                                                            "412", "409"):
                return None
            raise self._failure(exc) from None
        except BotoCoreError as exc:
            raise self._failure(exc) from None
        return put["ETag"]

    def probe(self) -> None:
        """Refuse (exit 2) an endpoint that does not honour conditional writes, on which a lease
        excludes no one: a scratch object beside the lease is created, created again under
        ``If-None-Match: *`` and replaced under an ``If-Match`` it does not match, both of which
        must fail, then deleted.  Once per endpoint and bucket in a process (``_PROBED``)."""
        from botocore.exceptions import BotoCoreError, ClientError

        if (self._client.meta.endpoint_url, self.bucket) in _PROBED:
            return
        key = f"{self.key.rpartition('/')[0]}/probe-{uuid.uuid4().hex}".lstrip("/")
        ignored = []
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=b"1", IfNoneMatch="*")
            conditions: tuple[tuple[str, dict[str, Any]], ...] = (
                ("If-None-Match", {"IfNoneMatch": "*"}), ("If-Match", {"IfMatch": '"not-its-etag"'}))
            for header, condition in conditions:
                try:
                    self._client.put_object(Bucket=self.bucket, Key=key, Body=b"2", **condition)
                    ignored.append(header)
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "412",
                                                                         "ConditionalRequestConflict", "409"):
                        raise
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            raise self._failure(exc) from None
        if ignored:
            raise UsageError(f"the S3 endpoint {self._client.meta.endpoint_url} does not honour conditional writes "
                             f"({' and '.join(ignored)} were ignored on s3a://{self.bucket}/{key}): the writer lease "
                             "cannot keep a second driver out there")
        _PROBED.add((self._client.meta.endpoint_url, self.bucket))

    def _failure(self, exc: Exception) -> ReconstructorError:
        """S3's answer, naming the lease's object (``failures.explain`` names the setting)."""
        return ReconstructorError(f"the writer lease {self.location}: {' '.join(str(exc).split())}")


class FileLeaseStore:
    """The lease as a local file; a lock file makes read-compare-replace one step, and another,
    the holder's (``hold``), is locked by the holding process for as long as it holds the lease."""

    def __init__(self, path: Path):
        self.path = path
        self.location = str(path)
        #: Locked by the holder's process (``writer.holder.lock``), a file apart from the lock of
        #: each replace (``writer.lock``): a driver of an earlier release waits for that one.
        self.holder_lock = path.with_name(f"{path.stem}.holder.lock")

    def hold(self) -> IO[str] | None:
        """The holder's lock, taken for the caller until it closes the file (or its process
        dies); None while another process (or another caller) holds it."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(self.holder_lock, "a")  # held open for the lease's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return None
        return lock

    def held(self) -> bool:
        """Whether a process holds the holder's lock now (it is taken for the look, and let go)."""
        lock = self.hold()
        if lock is not None:
            lock.close()
        return lock is None

    def read(self) -> tuple[Lease | None, str | None]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None, None
        return Lease.from_json(text), _version_of(text)

    def write(self, lease: Lease, version: str | None) -> str | None:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current = self.path.read_text()
            except FileNotFoundError:
                current = None
            if (None if current is None else _version_of(current)) != version:
                return None
            text = lease.to_json()
            tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}")
            tmp.write_text(text)
            os.replace(tmp, self.path)
            return _version_of(text)


def _version_of(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def lease_store(output: str, s3: S3Settings) -> LeaseStore | None:
    """The store of ``output``'s lease: S3 for ``s3a://``/``s3://``, a file for a local path;
    None for another file system, where the run goes on without one (a warning says so)."""
    parsed = urlparse(output)
    if parsed.scheme in ("s3a", "s3"):
        prefix = parsed.path.strip("/")
        return S3LeaseStore(parsed.netloc, f"{prefix}/{LEASE_NAME}" if prefix else LEASE_NAME, s3)
    if parsed.scheme in ("", "file"):
        return FileLeaseStore(Path(parsed.path if parsed.scheme else output) / LEASE_NAME)
    return None


class WriterLease:
    """The lease one command holds on its output while it writes: ``acquire``, then ``check``
    before each write, ``release`` at the end (a crashed driver's lease expires after ``ttl_s``)."""

    def __init__(self, store: LeaseStore, command: str, checkpoint: str | None, ttl_s: float,
                 clock: Callable[[], float] = time.time, say: Callable[[str], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        #: ``clock`` is the wall clock, for what a lease states; ``monotonic`` times the TTL.
        self.store, self.ttl_s, self.clock, self.monotonic, self._sleep = store, ttl_s, clock, monotonic, sleep
        self._say = say or (lambda line: print(f"reconstructor: {line}", file=sys.stderr, flush=True))
        self.me = Lease(command, checkpoint, socket.gethostname(), os.getpid(), uuid.uuid4().hex, 0.0)
        self._version: str | None = None
        #: Until when (``monotonic``) this driver holds the lease: the TTL from its last renewal's send.
        self._held_until = 0.0
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: The store's holder lock, held from taking the lease to releasing it (a local output).
        self._held: IO[str] | None = None

    @property
    def token(self) -> str:
        """This driver's lease token: unique to it, and recorded in each commit it makes."""
        return self.me.token

    def holder(self) -> Lease | None:
        """Another driver's lease on the output that looks live, else None (nothing is taken; one
        that looks expired is only taken after watching it, by ``acquire``)."""
        current, _ = self.store.read()
        if current is None or current.expires_at == 0.0:
            return None
        held = getattr(self.store, "held", None)
        live = held is not None and held()
        if verdict(current, self.me, self.clock(), live=live) in (LeaseVerdict.TAKE, LeaseVerdict.WATCH):
            return None
        return current

    def acquire(self, output: str) -> None:
        """Take the lease, waiting out a crashed driver of this same writer; refuse (exit 2) while
        another writer's lease is live, or on a store whose conditional writes are not honoured."""
        probe = getattr(self.store, "probe", None)
        if probe is not None:
            probe()
        try:
            self._take(output)
        except BaseException:
            self._let_go()
            raise
        self._thread = threading.Thread(target=self._renew_loop, name="writer-lease", daemon=True)
        self._thread.start()

    def _take(self, output: str) -> None:
        hold = getattr(self.store, "hold", None)
        said: LeaseVerdict | None = None
        watch = LeaseWatch()
        while True:
            if hold is not None and self._held is None:
                self._held = hold()
            live = hold is not None and self._held is None
            current, version = self.store.read()
            unchanged = watch.see(version, self.monotonic())
            now = self.clock()
            found = verdict(current, self.me, now, unchanged, self.ttl_s, watch.renewed, live)
            holder = current.describe() if current is not None else "no one"  # a lease to wait for is held
            if found == LeaseVerdict.REFUSE:
                raise UsageError(f"the output {output} is being written by {holder}: one writing "
                                 f"driver at a time; stop it, or wait for its lease to expire")
            if found in (LeaseVerdict.WAIT, LeaseVerdict.WATCH):
                # A lease a live process holds is waited for without end: it is looked at every so often.
                left = left_to_watch(current, unchanged, self.ttl_s, now) if current is not None and not live \
                    else self.ttl_s
                if said != found:
                    self._say(f"the output {output} is leased to {holder}: " + (
                        "waiting for it to end or its lease to expire" if found == LeaseVerdict.WAIT else
                        f"watching its lease, which must stay unrenewed for {unchanged + left:g}s before it "
                        "is taken"))
                    said = found
                if found == LeaseVerdict.WAIT and watch.renewed:
                    watch = LeaseWatch()  # the holder lives on: its TTL is counted anew
                # Often enough to see a live holder's renewals (every quarter of its TTL).
                self._sleep(max(0.05, min(left, self.ttl_s / 8)))
                continue
            sent = self.monotonic()
            taken = self.me.renewed(self.clock(), self.ttl_s)
            new = self.store.write(taken, version)
            if new is not None:
                with self._lock:
                    self.me, self._version, self._held_until = taken, new, sent + self.ttl_s
                return  # else another driver wrote in between: read again

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease is still this driver's with time to spare: called
        before each micro-batch writes.  A lease the thread could not renew in time (the endpoint
        did not answer) is renewed here once more before it counts as lost."""
        with self._lock:
            lost, until = self._lost, self._held_until
        if lost is None and until - self.monotonic() < self.ttl_s / 3:
            try:
                self._renew()
            except Exception as exc:  # noqa: BLE001 - the lease is then lost
                log.warning("could not renew the writer lease at %s: %s", self.store.location, exc)
            with self._lock:
                lost, until = self._lost, self._held_until
            if lost is None and until - self.monotonic() < self.ttl_s / 3:
                lost = "it could not be renewed in time"
        if lost is not None:
            raise LeaseLost(f"this driver lost its lease on the output ({lost}); it stopped before writing "
                            f"again: the next run continues from the checkpoint")

    def keep(self) -> None:
        """Stop renewing the lease and never release it: a write of this driver may still commit,
        so the next writer waits for the lease to expire rather than take it now."""
        self._stop.set()
        with self._lock:
            if self._lost is None and self._version is not None:
                self._lost = "kept until it expires: a write of this driver may still commit"
                self._say(f"the writer lease at {self.store.location} is left to expire (in {self.ttl_s:g}s at "
                          "most): a write of this driver was still in flight when it stopped")

    def release(self) -> None:
        """Give the lease up (the next writer need not wait for it to expire)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            lost, version, me = self._lost, self._version, self.me
        if lost is None and version is not None:
            try:
                self.store.write(me.released(), version)
            except Exception as exc:  # noqa: BLE001 - it expires anyway
                log.warning("could not release the writer lease at %s: %s", self.store.location, exc)
        self._let_go()

    def _let_go(self) -> None:
        """Close the holder's lock (a lease left to expire is then waited out for its TTL)."""
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                if not self._renew():
                    return
            except Exception as exc:  # noqa: BLE001 - tried again until the lease runs out
                log.warning("could not renew the writer lease at %s: %s", self.store.location, exc)

    def _renew(self) -> bool:
        """Extend the lease by ``ttl_s``; False once it is found lost (held by another, removed)."""
        with self._lock:
            me, version, lost = self.me, self._version, self._lost
        if lost is not None:
            return False
        sent = self.monotonic()  # the TTL runs from here: the write lands at or after it
        renewed = me.renewed(self.clock(), self.ttl_s)
        new = self.store.write(renewed, version)
        if new is None:
            # A write whose answer was lost (a timeout after the endpoint applied it) leaves this
            # driver's own lease under a version it never saw: nobody else wrote, so it still
            # holds it, and renews it under that version.
            current, version = self.store.read()
            if current is not None and current.token == me.token:
                new = self.store.write(renewed, version)
                if new is None:
                    current, _ = self.store.read()
        with self._lock:
            if self._lost is not None:
                return False
            if new is None:
                self._lost = f"taken by {current.describe()}" if current is not None else "its object was removed"
                return False
            if sent + self.ttl_s >= self._held_until:
                self.me, self._version, self._held_until = renewed, new, sent + self.ttl_s
        return True
