"""The local stack: a single-node KRaft Kafka broker and an S3 endpoint on 127.0.0.1.

Tests, ``make up``/``make down`` and the ``demo`` command use it.  Both servers are real processes
(the broker from the Maven Central jars under ``.jars/kafka``, the S3 endpoint from moto's server
mode), started detached, idempotently, with readiness waits.  Their logs and data live under the
stack folder (``.stack/`` at the repository root, or ``RECON_STACK_DIR``).

Usage: ``python -m workbench.localstack up|down|status|jars``.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from reconstructor.kafka_admin import broker_metadata
from workbench.processes import checkout_root, pid_alive, stack_dir

S3_ACCESS_KEY = "test"
S3_SECRET_KEY = "test"
S3_REGION = "us-east-1"
S3_BUCKET = "recon"


class StackError(RuntimeError):
    """A problem with the local stack, worded as one line saying what is wrong and what to do."""


def jars_dir() -> Path:
    """The folder ``make jars`` fills: ``RECON_JARS_DIR`` (the ``jars_dir`` setting), else the
    checkout's ``.jars``."""
    return Path(os.environ.get("RECON_JARS_DIR") or checkout_root() / ".jars")


@dataclass(frozen=True)
class Ports:
    kafka: int
    controller: int
    s3: int

    @classmethod
    def from_env(cls) -> Ports:
        kafka = _port_env("RECON_KAFKA_PORT", 9092)
        return cls(
            kafka=kafka,
            controller=_port_env("RECON_KAFKA_CONTROLLER_PORT", kafka + 1),
            s3=_port_env("RECON_S3_PORT", 9000),
        )


def _port_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        port = int(raw)
    except ValueError:
        raise StackError(f"{name}={raw!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise StackError(f"{name}={raw!r} is not a port number (1-65535)")
    return port


def bootstrap_servers() -> str:
    return f"127.0.0.1:{Ports.from_env().kafka}"


def s3_endpoint() -> str:
    return f"http://127.0.0.1:{Ports.from_env().s3}"


# --------------------------------------------------------------------------------------------------
# JVM jars


def ensure_jars(profile: str) -> Path:
    """Resolve the jars of one pom profile (``spark`` or ``kafka``) with Maven, once."""
    out = jars_dir() / profile
    stamp = out / ".resolved"
    pom = checkout_root() / "infra" / "maven" / "pom.xml"
    if stamp.exists() and (not pom.exists() or stamp.stat().st_mtime >= pom.stat().st_mtime):
        return out
    if not pom.exists():
        if out.exists() and any(out.glob("*.jar")):
            return out
        raise StackError(f"no jars in {out} and no infra/maven/pom.xml to resolve them from")
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is not installed: install it (apt-get install maven) and retry")
    _require_java()
    cmd = [
        "mvn", "-q", "-B",
        "-s", str(pom.parent / "settings.xml"),
        "-f", str(pom),
        "-P", profile,
        f"-Djars.dir={jars_dir()}",
        "package",
    ]
    log = stack_dir() / "logs" / f"mvn-{profile}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"resolving {profile} jars from Maven Central into {out} (log: {log})", file=sys.stderr)
    with open(log, "w") as fh:
        rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if rc != 0:
        reason = _first_error_line(log)
        raise StackError(
            f"Maven could not resolve the {profile} jars ({reason}); check network access to Maven "
            f"Central and see {log}"
        )
    stamp.touch()
    return out


def _first_error_line(log: Path) -> str:
    for line in log.read_text(errors="replace").splitlines():
        if "[ERROR]" in line:
            return line.split("[ERROR]", 1)[1].strip()[:300]
    return "mvn failed"


def _require_java() -> str:
    java = shutil.which("java")
    if java is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        java = str(candidate) if candidate.exists() else None
    if java is None:
        raise StackError("Java is not installed: install OpenJDK 17 (apt-get install openjdk-17-jdk-headless) "
                         "or set JAVA_HOME")
    return java


# --------------------------------------------------------------------------------------------------
# processes


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _read_pid(name: str) -> int | None:
    pidfile = stack_dir() / "run" / f"{name}.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


#: The servers this process started, by pid: kept, so that a server outliving its handle is not a
#: "subprocess still running" warning, and reaped when this process stops or kills it (no zombie).
_STARTED: dict[int, subprocess.Popen] = {}


def _reap(pid: int, timeout: float = 10.0) -> None:
    proc = _STARTED.pop(pid, None)
    if proc is not None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _STARTED[pid] = proc


def _spawn(name: str, cmd: list[str], env: dict[str, str] | None = None) -> int:
    run = stack_dir() / "run"
    logs = stack_dir() / "logs"
    run.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the caller (make up returns), stopped by `down`
            env={**os.environ, **(env or {})},
        )
    (run / f"{name}.pid").write_text(str(proc.pid))
    _STARTED[proc.pid] = proc
    return proc.pid


def _stop(name: str, timeout: float = 20.0) -> bool:
    pid = _read_pid(name)
    pidfile = stack_dir() / "run" / f"{name}.pid"
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap(pid)
    pidfile.unlink(missing_ok=True)
    return True


def _wait(what: str, ready, pid_name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if _read_pid(pid_name) is None:
            log = stack_dir() / "logs" / f"{pid_name}.log"
            raise StackError(f"{what} exited during start-up; see {log}")
        time.sleep(0.5)
    raise StackError(f"{what} did not answer within {timeout:.0f}s; see {stack_dir() / 'logs'}")


# --------------------------------------------------------------------------------------------------
# Kafka (KRaft, single node)

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
"""


def _kafka_properties(ports: Ports, data: Path) -> str:
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{ports.controller}
listeners=PLAINTEXT://127.0.0.1:{ports.kafka},CONTROLLER://127.0.0.1:{ports.controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{ports.kafka}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=-1
log.retention.bytes=-1
message.max.bytes=16777216
"""


def kafka_ready(port: int | None = None, timeout: float = 2.0) -> bool:
    """True once the broker answers a metadata request (not merely accepts TCP)."""
    port = port or Ports.from_env().kafka
    if not _port_open(port):
        return False
    try:
        return bool(broker_metadata(f"127.0.0.1:{port}", timeout).brokers)
    except Exception:  # noqa: BLE001 - whatever the failure, no broker answers there
        return False


def start_kafka(timeout: float = 90.0) -> str:
    ports = Ports.from_env()
    if _read_pid("kafka") is not None and kafka_ready(ports.kafka):
        return f"kafka already running on 127.0.0.1:{ports.kafka}"
    for port in (ports.kafka, ports.controller):
        if _port_open(port) and _read_pid("kafka") is None:
            raise StackError(
                f"port {port} on 127.0.0.1 is in use by another process; stop it or move the broker "
                f"with RECON_KAFKA_PORT / RECON_KAFKA_CONTROLLER_PORT"
            )
    java = _require_java()
    jars = ensure_jars("kafka")
    home = stack_dir() / "kafka"
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    props.write_text(_kafka_properties(ports, data))
    (home / "log4j2.properties").write_text(_LOG4J2)
    base = [java, "-Xms256m", "-Xmx768m", "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            "-cp", f"{jars}/*"]
    if not (data / "meta.properties").exists():
        shutil.rmtree(data, ignore_errors=True)
        cluster_id = _kafka_cluster_id()
        log = stack_dir() / "logs" / "kafka-format.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as fh:
            rc = subprocess.call(base + ["kafka.tools.StorageTool", "format", "-t", cluster_id,
                                         "-c", str(props)], stdout=fh, stderr=subprocess.STDOUT)
        if rc != 0:
            raise StackError(f"formatting the Kafka storage failed; see {log}")
    _spawn("kafka", base + ["kafka.Kafka", str(props)])
    _wait(f"Kafka broker on 127.0.0.1:{ports.kafka}", lambda: kafka_ready(ports.kafka), "kafka", timeout)
    return f"kafka started on 127.0.0.1:{ports.kafka} (logs: {stack_dir() / 'logs' / 'kafka.log'})"


def _kafka_cluster_id() -> str:
    # Kafka wants a base64url-encoded 16-byte UUID (22 chars, no padding); one that starts with
    # '-' is read by the storage tool as an option (Kafka's own Uuid.randomUuid draws again too).
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


# --------------------------------------------------------------------------------------------------
# S3 (moto's S3 emulation in a real HTTP server process on loopback, see workbench.s3server)


def s3_ready(port: int | None = None) -> bool:
    port = port or Ports.from_env().s3
    if not _port_open(port):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001 - whatever the failure, no S3 endpoint answers there
        return False


def s3_client():
    import boto3  # boto3 takes a while to import, and only the stack's S3 checks need it

    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint(),
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        region_name=S3_REGION,
    )


def start_s3(timeout: float = 60.0) -> str:
    ports = Ports.from_env()
    if _read_pid("s3") is not None and s3_ready(ports.s3):
        _ensure_bucket()
        return f"s3 already running on {s3_endpoint()}"
    if _port_open(ports.s3):
        raise StackError(
            f"port {ports.s3} on 127.0.0.1 is in use by another process; stop it or move the S3 "
            f"endpoint with RECON_S3_PORT"
        )
    try:
        import moto.server  # noqa: F401 - imported to learn whether it is installed
        import waitress  # noqa: F401 - imported to learn whether it is installed
    except ImportError:
        raise StackError("moto[server] and waitress are not installed: pip install -e '.[stack]'") from None
    _spawn("s3", [sys.executable, "-m", "workbench.s3server", "--port", str(ports.s3)],
           env={"MOTO_ALLOW_NONEXISTENT_REGION": "true"})
    _wait(f"S3 endpoint on {s3_endpoint()}", lambda: s3_ready(ports.s3), "s3", timeout)
    _ensure_bucket()
    return f"s3 started on {s3_endpoint()} bucket {S3_BUCKET} (logs: {stack_dir() / 'logs' / 's3.log'})"


def _ensure_bucket() -> None:
    client = s3_client()
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if S3_BUCKET not in existing:
        client.create_bucket(Bucket=S3_BUCKET)


def signal_server(name: str, sig: int) -> int:
    """Send ``sig`` to one server of this stack ("kafka" or "s3") and its process group; returns its
    pid.  Outage tests kill one (SIGKILL, then ``start_kafka``/``start_s3`` on the same data) or
    freeze it (SIGSTOP, then SIGCONT) on a stack folder and ports of their own."""
    pid = _read_pid(name)
    if pid is None:
        raise StackError(f"{name} is not running in {stack_dir()}")
    os.killpg(pid, sig)
    if sig == signal.SIGKILL:
        _reap(pid)
    return pid


# --------------------------------------------------------------------------------------------------


def up() -> list[str]:
    """Start both servers if they are not running; return what was done.  One caller at a time
    (the test workers of ``make test`` each call it): the next finds them running."""
    stack_dir().mkdir(parents=True, exist_ok=True)
    with open(stack_dir() / "up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return [start_kafka(), start_s3()]


def down() -> list[str]:
    said = []
    for name in ("kafka", "s3"):
        said.append(f"{name} stopped" if _stop(name) else f"{name} was not running")
    return said


def status() -> list[str]:
    ports = Ports.from_env()
    k = "up" if kafka_ready(ports.kafka) else "down"
    s = "up" if s3_ready(ports.s3) else "down"
    return [f"kafka 127.0.0.1:{ports.kafka}: {k}", f"s3 {s3_endpoint()}: {s}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbench.localstack",
        description="Start or stop the local Kafka broker (KRaft) and S3 endpoint on 127.0.0.1.",
    )
    parser.add_argument("action", choices=["up", "down", "status", "jars"])
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            lines = up()
        elif args.action == "down":
            lines = down()
        elif args.action == "status":
            lines = status()
        else:
            lines = [f"{p} jars in {ensure_jars(p)}" for p in ("spark", "kafka")]
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
