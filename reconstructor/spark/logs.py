"""How loud the engine is under the CLI: only the command's own lines and real errors, unless ``-v``.

The driver JVM writes to the terminal through four channels, each silenced where it starts:

- log4j: the JVM starts with this package's ``log4j2.properties`` (root ERROR; WARN with ``-v``),
  passed as ``spark.driver.extraJavaOptions`` because log4j reads its configuration once, when the
  JVM starts.  That also drops Spark's "default log4j profile" banner, which it prints only when it
  falls back to its own configuration.
- notices printed on the JVM's stderr outside log4j ("WARNING: Using incubator modules", printed
  by the module system for the options Spark's launcher always adds, and SLF4J's lines about its
  own bindings), with no switch to turn them off: the JVM's stderr is a pipe that forwards every
  other line.
- the JVM's stdout carries nothing a command prints (commands print from Python), only libraries'
  console lines such as Delta's "Deleted 0 files" after a VACUUM: it goes to the null device.
- py4j logs a failed query's Java stack trace, and Spark logs it again, while the CLI reports it in
  one line: both are left to ``-v``; so are py4j's and pyspark's tracebacks of calls a JVM gone
  never answered (``driver_jvm``).

In local mode the executors run in the driver JVM, so this covers their log too.  Where the JVM was
started by someone else (``spark-submit``), only the levels set at run time apply.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from reconstructor.spark.jvm_gateway import jvm_of

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# The level the properties file reads, so one file serves both ``-v`` and the default.
LEVEL_PROPERTY = "reconstructor.log.level"
# Tests and jobs set the engine's level with this (``build_spark`` reads it); it wins here too.
LEVEL_ENV = "RECON_SPARK_LOG_LEVEL"
# Lines printed on the JVM's stderr whatever log4j says: the module system's notice, and the one
# of the SLF4J 1 copy inside the AWS SDK bundle that finds no binding (so it logs nothing).
JVM_NOTICES = (b"WARNING: Using incubator modules", b"SLF4J: ", b"SLF4J(")
# Logs a failed query's stack trace, which the CLI reports as one line.
QUERY_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"


def engine_level(verbose: bool) -> str:
    return os.environ.get(LEVEL_ENV) or ("WARN" if verbose else "ERROR")


def driver_conf(conf: Mapping[str, str], verbose: bool) -> dict[str, str]:
    """``conf`` with the driver JVM's log configuration added to its Java options.

    A log4j configuration already given there (``-Dlog4j2.configurationFile``) is kept as it is.
    """
    merged = dict(conf)
    options = merged.get(DRIVER_JAVA_OPTIONS, "")
    if "log4j2.configurationFile" not in options:
        ours = (f"-Dlog4j2.configurationFile={shlex.quote(str(LOG4J2_CONFIG))} "
                f"-D{LEVEL_PROPERTY}={engine_level(verbose)}")
        merged[DRIVER_JAVA_OPTIONS] = f"{options} {ours}".strip()
    return merged


class StartLines:
    """The lines the driver JVM's launcher writes on stderr while it starts, recorded, and held
    back from the terminal unless ``hold`` is false: Spark's report of resolving
    ``spark.jars.packages`` (``jar_route``) is a page long, and names the one line worth printing
    when the resolution fails.  ``release`` forwards what the caller keeps of the held lines, and
    every later line as it comes."""

    _MARK = b"\0reconstructor-start-lines\n"

    def __init__(self, hold: bool = True):
        self.lines: list[str] = []
        self._hold = hold
        self._recording = True
        self._lock = threading.Lock()
        self._terminal: int | None = None
        self._marked = threading.Event()

    def _take(self, line: bytes, terminal: int) -> None:
        if line == self._MARK:
            self._marked.set()
            return
        with self._lock:
            self._terminal = terminal
            if self._recording:
                self.lines.append(line.decode("utf-8", "replace"))
            if self._hold:
                return
        os.write(terminal, line)

    def settle(self, timeout: float = 10.0) -> None:
        """Until the forwarder has read every line written so far (a launcher that died wrote its
        last ones just before): a mark written after them comes back."""
        self._marked.clear()
        os.write(2, self._MARK)
        self._marked.wait(timeout)

    def release(self, keep: Callable[[list[str]], list[str]] = lambda lines: lines) -> None:
        """Stop recording and holding: forward ``keep(the lines held)``, and every later line."""
        with self._lock:
            held, self._hold, self._recording = self._hold, False, False
            if held and self._terminal is not None:
                for line in keep(self.lines):
                    os.write(self._terminal, line.encode("utf-8"))


@contextlib.contextmanager
def jvm_output(verbose: bool, start: StartLines | None = None) -> Iterator[None]:
    """Around the start of the driver JVM (``build_spark``): the JVM inherits this process's
    stdout and stderr there, so for that moment they are the null device and a pipe that forwards
    the JVM's stderr without its own notices (and, with ``start``, records its lines there, held
    until released).  Python's are put back afterwards.  With ``verbose`` the JVM writes to the
    terminal directly, or through the pipe unfiltered and unheld when there is a ``start``."""
    if verbose and start is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = os.dup(2)  # the forwarder's, closed when the JVM's stderr ends
    read_end, write_end = os.pipe()
    threading.Thread(target=_forward, args=(read_end, terminal, not verbose, start), name="jvm-stderr",
                     daemon=True).start()
    saved_out, saved_err = os.dup(1), os.dup(2)
    if not verbose:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)


def _forward(read_end: int, terminal: int, quiet: bool = True, start: StartLines | None = None) -> None:
    with open(read_end, "rb") as lines:
        for line in lines:
            if quiet and line.startswith(JVM_NOTICES):
                continue
            if start is not None:
                start._take(line, terminal)
            else:
                os.write(terminal, line)
    os.close(terminal)


def quiet_python(verbose: bool) -> None:
    """Python's side: warnings become log records (shown with ``-v``), and py4j's copy of a failed
    call's Java stack trace is dropped unless ``-v``."""
    logging.captureWarnings(True)
    if not verbose:
        logging.getLogger("py.warnings").setLevel(logging.ERROR)
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        # py4j logs a call that got no answer (a JVM gone) on the root logger, with its traceback.
        logging.getLogger().addFilter(_not_py4j)


def _not_py4j(record: logging.LogRecord) -> bool:
    return "py4j" not in record.pathname.replace("\\", "/").split("/")


def set_engine_level(spark, verbose: bool) -> None:
    """The levels a running JVM keeps: its root logger's, and without ``verbose`` none for the
    streaming query's own report of its failure (the CLI prints it as one line)."""
    spark.sparkContext.setLogLevel(engine_level(verbose))
    if verbose:
        return
    # pyspark's accumulator server prints a traceback when the JVM's connection to it ends (a JVM
    # gone): the run reports that in one line.
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None
    try:
        jvm = jvm_of(spark)
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            QUERY_LOGGER, jvm.org.apache.logging.log4j.Level.OFF)
    except Exception:  # noqa: BLE001 - not classic Spark (Connect): leave its logging alone
        pass
