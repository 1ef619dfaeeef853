"""An output's writer lease held by a process of its own, as a driver holds it, for the tests of
what a second driver may do while the first lives, is paused (SIGSTOP) or is gone.

``python -m tests.support.lease_holder OUTPUT CHECKPOINT TTL``: takes the lease of a ``run`` of
CHECKPOINT (the S3 endpoint and keys from ``RECON_S3_*``), prints ``held <token>``, answers each
``check`` line on stdin with ``ok`` (or the line the lease was lost with), and releases the lease
at the end of its input."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator


def main(output: str, checkpoint: str, ttl_s: float) -> None:
    from reconstructor.contract.lease import WriterLease, lease_store
    from reconstructor.errors import LeaseLost
    from reconstructor.settings import load

    store = lease_store(output, load(None, env=os.environ).s3)
    assert store is not None
    lease = WriterLease(store, "run", checkpoint, ttl_s, say=lambda line: None)
    lease.acquire(output)
    print(f"held {lease.token}", flush=True)
    for line in sys.stdin:
        if line.strip() == "check":
            try:
                lease.check()
                print("ok", flush=True)
            except LeaseLost as exc:
                print(exc, flush=True)
    lease.release()


class LeaseHolder:
    """The holding process, for the test: ``check`` asks it whether it still holds the lease."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line.startswith("held "), line
        self.token = line.split()[1]

    def check(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("check\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def release(self) -> None:
        """End its input: it releases the lease and exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0


@contextlib.contextmanager
def lease_holder(output: str, checkpoint: str, ttl_s: float, env: dict[str, str] | None = None
                 ) -> Iterator[LeaseHolder]:
    """A process holding ``output``'s lease for a run of ``checkpoint``, killed on exit if still alive."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.lease_holder", output, checkpoint, str(ttl_s)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    with proc:
        try:
            yield LeaseHolder(proc)
        finally:
            if proc.poll() is None:
                proc.kill()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
