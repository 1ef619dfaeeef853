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
from collections.abc import Iterator, Mapping
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


@contextlib.contextmanager
def jvm_output(verbose: bool) -> Iterator[None]:
    """Around the start of the driver JVM (``build_spark``): the JVM inherits this process's
    stdout and stderr there, so for that moment they are the null device and a pipe that forwards
    the JVM's stderr without its own notices.  Python's are put back afterwards.  With ``verbose``
    the JVM writes to the terminal directly."""
    if verbose:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = os.dup(2)  # the forwarder's, closed when the JVM's stderr ends
    read_end, write_end = os.pipe()
    threading.Thread(target=_forward, args=(read_end, terminal), name="jvm-stderr",
                     daemon=True).start()
    saved_out, saved_err = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(write_end, 2)
    os.close(null)
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


def _forward(read_end: int, terminal: int) -> None:
    with open(read_end, "rb") as lines:
        for line in lines:
            if not line.startswith(JVM_NOTICES):
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
