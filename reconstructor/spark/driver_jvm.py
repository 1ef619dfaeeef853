"""Whether the driver's JVM is still there.

A JVM that died (out of memory, killed) takes the SparkSession with it: a run cannot restart its
query on it, and each call into it fails with a broken connection.  The run says so in one line,
with the JVM's exit status, and ends (exit 1); the checkpoint keeps its place for the next run.

Only a JVM this process started is known here (``build_spark``: local mode, a client driver);
under ``spark-submit`` the JVM started this process, and its end ends this one too.
"""

from __future__ import annotations

import subprocess

from reconstructor.errors import exception_chain, signal_name

#: The exit codes Spark gives a JVM it ends itself (``org.apache.spark.util.SparkExitCode``).
SPARK_EXIT_CODES = {50: "an uncaught exception", 51: "an uncaught exception in its handler",
                    52: "out of memory"}
OUT_OF_MEMORY = 52
#: How long a JVM whose connection broke may take to be seen to have exited.
EXIT_WAIT_S = 10.0


def _started_here(spark) -> subprocess.Popen | None:
    """The driver JVM's process when this process started it (``build_spark``), else None."""
    return getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)


def exit_status(spark, *, wait_s: float = 0.0) -> int | None:
    """The exit status of the driver JVM this process started (negative: the signal that killed
    it); None while it runs, or when another process started it."""
    proc = _started_here(spark)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=wait_s) if wait_s > 0 else proc.poll()
    except subprocess.TimeoutExpired:
        return None


def stop(spark, *, wait_s: float = 30.0) -> bool:
    """End the driver JVM this process started, at once (SIGKILL: its threads, a batch's still
    writing among them, stop where they are): True once it has exited, so that nothing of this
    driver can start a commit any more; False when another process started it, or it outlived
    ``wait_s``."""
    proc = _started_here(spark)
    if proc is None:
        return False
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def connection_broke(exc: BaseException) -> bool:
    """Whether ``exc`` (or one it was raised from or during) is a call into the JVM that got no
    answer, as a JVM that died leaves them; a Java exception is an answer."""
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

    return any(isinstance(link, (Py4JNetworkError, ConnectionError)) or (
        isinstance(link, Py4JError) and not isinstance(link, Py4JJavaError)) for link in exception_chain(exc))


def gone(spark, exc: BaseException) -> int | None:
    """After the failure ``exc``: the driver JVM's exit status if it is gone (waiting a little for
    it when the failure is a broken connection), else None."""
    return exit_status(spark, wait_s=EXIT_WAIT_S if connection_broke(exc) else 0.0)


def gone_line(status: int) -> str:
    """What a run says when its driver JVM ended with ``status``."""
    if status < 0:
        what = f"was killed ({signal_name(-status)})"
    else:
        reason = SPARK_EXIT_CODES.get(status)
        what = f"exited with code {status}" + (f" ({reason})" if reason else "")
    hint = (": give the driver more memory (spark.driver.memory under [spark]) or read less a batch "
            "(--max-offsets-per-trigger)" if status == OUT_OF_MEMORY else "")
    return (f"the Spark driver's JVM {what}{hint}; nothing was lost: the next run carries on from the "
            "checkpoint")
