"""The JVM jars of a driver that no ``jars_dir`` serves: Spark resolves them from Maven through
``spark.jars.packages`` (``builder._jar_settings`` has the rule).  Here: what Spark's report of
that resolution says when it fails (one line, exit 2, instead of the launcher's page and pyspark's
``JAVA_GATEWAY_EXITED``), and ``reconstructor jars DIR``, which resolves them once into a folder
that serves as the ``jars_dir`` of hosts that cannot reach Maven.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from reconstructor.errors import UsageError
from reconstructor.jars import ENGINE_JAR, packaged_engine_jar

#: The launcher's own line when it fails (SparkSubmit ends with the exception's text).
_LAUNCHER_FAILED = 'Exception in thread "main" '
#: The stack of a failure while resolving packages, or while loading the Ivy settings for it.
_RESOLVING = ("MavenUtils", "resolveMavenDependencies", "Ivy settings")
#: Where Ivy's report lists the errors that made the resolution fail.
_IVY_ERRORS = ":::: ERRORS"
#: The last line of Ivy's report of a resolution that succeeded.
_IVY_RETRIEVED = " artifacts copied, "


def what_resolves(s3a: bool) -> str:
    return "Delta, the Kafka source and S3A (hadoop-aws)" if s3a else "Delta and the Kafka source"


def resolution_failure(lines: Sequence[str]) -> str | None:
    """Why the resolution of ``spark.jars.packages`` failed, in the launcher's stderr ``lines``:
    the first of Ivy's errors (it names the repository and the cause: a refused connection, a
    refused login), else the failure's own first item; None when the lines tell of no such failure."""
    failed = next((i for i, line in enumerate(lines) if line.startswith(_LAUNCHER_FAILED)), None)
    if failed is None or not any(mark in line for line in lines[failed:] for mark in _RESOLVING):
        return None
    errors = next((i for i, line in enumerate(lines) if line.strip() == _IVY_ERRORS), None)
    if errors is not None:
        first = next((line.strip() for line in lines[errors + 1:] if line.strip()), "")
        if first and not first.startswith("::"):
            return first
    message = lines[failed][len(_LAUNCHER_FAILED):].strip()
    message = message.split(": ", 1)[1] if ": " in message else message  # the exception's class
    return message.strip("[]").split(", ")[0]


def unresolved(detail: str, s3a: bool) -> UsageError:
    """The one line of a driver that could not get its jars from Maven."""
    return UsageError(
        f"could not resolve {what_resolves(s3a)} from Maven through spark.jars.packages ({detail}): on a machine "
        f"that reaches Maven Central run 'reconstructor jars DIR{' --s3a' if s3a else ''}', bring DIR here, and "
        "set jars_dir / RECON_JARS_DIR to DIR")


def without_ivy_report(lines: list[str]) -> list[str]:
    """The launcher's ``lines`` of a start that succeeded, without Ivy's report of resolving the
    packages (shown with ``-v``)."""
    end = next((i for i in range(len(lines) - 1, -1, -1) if _IVY_RETRIEVED in lines[i]), None)
    return lines if end is None else lines[end + 1:]


# ---------------------------------------------------------------------------------------------- jars


def engine_jar_to_copy(checkout_jars: Path | None) -> Path:
    """The engine jar to write out: the installed package's, else the one in ``checkout_jars/spark``
    (the jars_dir: in a checkout, what ``make jars`` built); a ``UsageError`` saying how to get one
    when neither is there."""
    jar = packaged_engine_jar()
    if jar is not None:
        return jar
    built = checkout_jars / "spark" / ENGINE_JAR if checkout_jars is not None else None
    if built is not None and built.is_file():
        return built
    raise UsageError(f"this installation carries no {ENGINE_JAR} (an editable install from a checkout has "
                     f"none until 'make jars' builds it into .jars/spark): run 'make jars' in the checkout, "
                     f"or install the wheel")


def fill_jars_dir(target: Path, *, s3a: bool, engine_only: bool, engine: Path, conf: Mapping[str, str],
                  verbose: bool, tell: Callable[[str], None]) -> list[Path]:
    """Fill ``target`` so that it serves as a ``jars_dir``: ``target/spark`` holds the jars Spark
    resolves from Maven (``spark.jars.packages``: Delta, the Kafka source, with ``s3a`` S3A; Ivy
    caches them, so a host that resolved them before downloads nothing) and ``engine``.  Jars of
    an earlier fill that this one does not write are removed: every jar there goes on the
    classpath.  With ``engine_only``: ``target/<engine jar>`` alone, for a deployment to ship.
    The files written."""
    target.mkdir(parents=True, exist_ok=True)
    if engine_only:
        return [_copy(engine, target / ENGINE_JAR)]
    resolved = resolve_packages(s3a=s3a, conf=conf, verbose=verbose, tell=tell)
    folder = target / "spark"
    folder.mkdir(exist_ok=True)
    written = [_copy(jar, folder / _maven_name(jar)) for jar in resolved]
    written.append(_copy(engine, folder / ENGINE_JAR))
    for stale in sorted(set(folder.glob("*.jar")) - set(written)):
        tell(f"removing {stale.name} (not among the jars resolved now)")
        stale.unlink()
    return written


def _copy(jar: Path, out: Path) -> Path:
    if not (out.exists() and out.samefile(jar)):
        shutil.copyfile(jar, out)
    return out


def _maven_name(jar: Path) -> str:
    """``artifact-version.jar`` (as ``make jars`` names it) of Ivy's ``group_artifact-version.jar``."""
    return jar.name.split("_", 1)[1] if "_" in jar.name else jar.name


def resolve_packages(*, s3a: bool, conf: Mapping[str, str], verbose: bool,
                     tell: Callable[[str], None]) -> list[Path]:
    """The jars Spark's Ivy resolves for the driver's packages, as local files in Ivy's folder.

    Resolved as a driver resolves them (``builder``'s settings, ``conf``'s ``spark.jars.*`` over
    them): a JVM gateway is launched with them, asked for the ``spark.jars`` it ended with, and
    stopped.  Ivy's ``downloading`` lines are the progress (all its lines with ``verbose``)."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    from reconstructor.spark.builder import JARS_KEY, _jar_settings, ivy_settings_file

    settings = {**_jar_settings(None, s3a=s3a, launches=True, engine_jar=None),
                **{k: v for k, v in conf.items() if k.startswith("spark.jars.")}}
    with ivy_settings_file(settings) as ivy, tempfile.NamedTemporaryFile(prefix="reconstructor-ivy-") as output:
        spark_conf = SparkConf(loadDefaults=False).setAll(list({**settings, **ivy}.items()))
        report = _Report(Path(output.name), verbose, tell)
        try:
            gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": output, "stderr": output})
        except Exception as exc:  # the launcher's report says why
            detail = resolution_failure(report.stop())
            if detail is None:
                raise
            raise unresolved(detail, s3a) from exc
        try:
            listed = gateway.jvm.java.lang.System.getProperty(JARS_KEY) or ""
        finally:
            _stop(gateway)
            report.stop()
    jars = [Path(unquote(urlsplit(uri).path)) for uri in listed.split(",") if uri]
    return [jar for jar in jars if jar.suffix == ".jar"]


class _Report:
    """The launcher's output, read from its file as it grows: Ivy's downloads told as they start
    (every line printed with ``verbose``); ``stop`` gives every line."""

    def __init__(self, path: Path, verbose: bool, tell: Callable[[str], None]):
        self._path, self._verbose, self._tell = path, verbose, tell
        self._lines: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="ivy-report", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        with open(self._path, "rb") as stream:
            pending = b""
            while True:
                done = self._done.is_set()  # read once more after the launcher stopped writing
                pending += stream.read()
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    self._take(raw.decode("utf-8", "replace"))
                if done:
                    if pending:
                        self._take(pending.decode("utf-8", "replace"))
                    return
                self._done.wait(0.2)

    def _take(self, line: str) -> None:
        self._lines.append(line)
        if self._verbose:
            print(line, file=sys.stderr, flush=True)
        elif line.startswith("downloading "):
            self._tell(f"downloading {line.split()[1].rsplit('/', 1)[-1]}")

    def stop(self) -> list[str]:
        self._done.set()
        self._thread.join(30)
        return self._lines


def _stop(gateway) -> None:
    """The gateway's JVM ends when its stdin does (pyspark's ``PythonGatewayServer``)."""
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - the JVM goes either way
        pass
    if proc is not None:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

