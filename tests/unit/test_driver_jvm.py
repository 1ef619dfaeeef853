"""What a run says when its driver JVM is gone, and which failures are calls it never answered."""

from __future__ import annotations

from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

from reconstructor.spark.driver_jvm import connection_broke, gone_line


def test_a_jvm_out_of_memory_names_the_two_settings_that_help():
    assert gone_line(52) == (
        "the Spark driver's JVM exited with code 52 (out of memory): give the driver more memory "
        "(spark.driver.memory under [spark]) or read less a batch (--max-offsets-per-trigger); nothing was "
        "lost: the next run carries on from the checkpoint")


def test_a_killed_jvm_names_its_signal_and_any_other_exit_its_code():
    assert gone_line(-9).startswith("the Spark driver's JVM was killed (SIGKILL); nothing was lost")
    assert gone_line(-200).startswith("the Spark driver's JVM was killed (signal 200);")
    assert gone_line(50).startswith("the Spark driver's JVM exited with code 50 (an uncaught exception);")
    assert gone_line(1).startswith("the Spark driver's JVM exited with code 1;")


class _JavaError(Py4JJavaError):
    def __init__(self):  # a Java exception as py4j raises it, without a live JVM to describe it
        Exception.__init__(self, "java.lang.IllegalStateException: boom")

    def __str__(self):
        return "java.lang.IllegalStateException: boom"


def test_a_call_without_an_answer_is_a_broken_connection_and_a_java_exception_is_not():
    assert connection_broke(ConnectionRefusedError(111, "Connection refused"))
    assert connection_broke(Py4JNetworkError("Error while sending or receiving"))
    assert connection_broke(Py4JError("An error occurred while calling o42.awaitTermination"))
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            raise RuntimeError("the query failed")  # noqa: B904 - the implicit chain (__context__) is what is tested
    except RuntimeError as during:
        assert connection_broke(during)
    assert not connection_broke(_JavaError())
    assert not connection_broke(RuntimeError("S3 endpoint does not answer"))
