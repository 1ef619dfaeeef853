"""An S3 endpoint of a test's own, with the faults ``workbench.s3server`` can play (conditional
writes ignored, a PUT held until released, an answer lost), for the tests of what a store that
misbehaves, or a second driver racing this one, does to the output.  The shared stack's endpoint is
never touched."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from workbench import localstack

T = TypeVar("T")


@contextmanager
def s3_endpoint_of_its_own(folder: Path, bucket: str, *flags: str) -> Iterator[tuple[str, object]]:
    """A local S3 endpoint started with ``flags`` (its faults), with ``bucket`` made: yields its
    URL and a boto3 client of it; stopped on exit."""
    import boto3

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    log_path = folder / f"s3-{bucket}.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "workbench.s3server", "--port", str(port), *flags],
                                  stdout=subprocess.DEVNULL, stderr=log)
        try:
            endpoint = f"http://127.0.0.1:{port}"
            client = boto3.client("s3", endpoint_url=endpoint, region_name=localstack.S3_REGION,
                                  aws_access_key_id=localstack.S3_ACCESS_KEY,
                                  aws_secret_access_key=localstack.S3_SECRET_KEY)

            def made() -> bool:
                assert server.poll() is None, log_path.read_text()
                try:
                    client.create_bucket(Bucket=bucket)
                    return True
                except Exception:  # noqa: BLE001 - not listening yet
                    return False

            wait_for(made, f"the S3 endpoint on port {port}")
            yield endpoint, client
        finally:
            server.terminate()
            server.wait(timeout=30)


def s3_env(endpoint: str) -> dict[str, str]:
    """A command's S3 settings (``RECON_S3_*``) for ``endpoint``."""
    return {"RECON_S3_ENDPOINT": endpoint, "RECON_S3_REGION": localstack.S3_REGION,
            "RECON_S3_ACCESS_KEY": localstack.S3_ACCESS_KEY, "RECON_S3_SECRET_KEY": localstack.S3_SECRET_KEY,
            "RECON_S3_PATH_STYLE": "true"}


def held(endpoint: str) -> list[str]:
    """The paths of the PUTs the endpoint holds (``--hold-first-put``)."""
    return urllib.request.urlopen(f"{endpoint}/_faults/held").read().decode().split()


def release(endpoint: str) -> None:
    """Let the held PUTs go on."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/_faults/release", method="POST")).read()


def wait_for(ready: Callable[[], T], what: str, seconds: float = 60) -> T:
    """``ready()``'s first true answer, polled; fails the test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (found := ready()):
        assert time.monotonic() < deadline, f"no {what} after {seconds}s"
        time.sleep(0.2)
    return found
