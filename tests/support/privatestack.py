"""A local stack of a test's own (broker, S3 endpoint) on free ports and in its own folder, for tests
that kill or freeze a server: the shared stack others use is never touched.

``localstack`` reads its ports and folder from the environment on every call, so each call here
runs with this stack's ``RECON_*`` variables in place and the caller's restored afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from workbench import localstack
from workbench.processes import pid_alive


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateStack:
    def __init__(self, folder: Path):
        self.folder = folder
        self.kafka_port, self.controller_port, self.s3_port = _free_port(), _free_port(), _free_port()

    def env(self) -> dict[str, str]:
        """The variables that point ``localstack`` (and a command's S3 settings) at this stack."""
        return {"RECON_STACK_DIR": str(self.folder), "RECON_KAFKA_PORT": str(self.kafka_port),
                "RECON_KAFKA_CONTROLLER_PORT": str(self.controller_port),
                "RECON_S3_PORT": str(self.s3_port)}

    def s3_env(self) -> dict[str, str]:
        """A command's S3 settings for this stack's endpoint."""
        return {"RECON_S3_ENDPOINT": self.s3_endpoint, "RECON_S3_REGION": localstack.S3_REGION,
                "RECON_S3_ACCESS_KEY": localstack.S3_ACCESS_KEY,
                "RECON_S3_SECRET_KEY": localstack.S3_SECRET_KEY, "RECON_S3_PATH_STYLE": "true"}

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @contextmanager
    def _as_current(self):
        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        try:
            yield localstack
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def up(self) -> None:
        with self._as_current() as stack:
            stack.up()

    def create_bucket(self, name: str) -> None:
        with self._as_current() as stack:
            stack.s3_client().create_bucket(Bucket=name)

    def start(self, name: str) -> None:
        """Start one server again (a broker on its data as it was left)."""
        with self._as_current() as stack:
            {"kafka": stack.start_kafka, "s3": stack.start_s3}[name]()

    def kill(self, name: str) -> None:
        """SIGKILL one server and wait until it is gone."""
        with self._as_current() as stack:
            pid = stack.signal_server(name, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid), f"{name} (pid {pid}) outlived SIGKILL"

    def freeze(self, name: str) -> None:
        with self._as_current() as stack:
            stack.signal_server(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        with self._as_current() as stack:
            stack.signal_server(name, signal.SIGCONT)

    def down(self) -> None:
        """Stop both servers (a frozen one is let go first, so it can stop)."""
        with self._as_current() as stack:
            for name in ("kafka", "s3"):
                try:
                    stack.signal_server(name, signal.SIGCONT)
                except localstack.StackError:
                    pass
            stack.down()
