"""A local-mode driver's heap is sized from the machine: Spark's 1 GiB default ran a fleet of 8,000
sessions out of memory (exit 52), while the machine had 24 GiB."""

from reconstructor.spark import builder
from reconstructor.spark.builder import local_driver_memory, spark_settings

GIB = 1024 ** 3


def test_a_quarter_of_the_machine_in_whole_gibibytes():
    assert local_driver_memory(24 * GIB) == "6g"
    assert local_driver_memory(8 * GIB) == "2g"
    assert local_driver_memory(10 * GIB) == "2g"


def test_never_below_sparks_own_default_nor_above_the_cap():
    assert local_driver_memory(2 * GIB) == "1g"
    assert local_driver_memory(512 * 1024 ** 2) == "1g"
    assert local_driver_memory(512 * GIB) == f"{builder.LOCAL_DRIVER_MEMORY_CAP_GIB}g"


def test_unknown_memory_leaves_sparks_default():
    assert local_driver_memory(None) is None


def test_the_local_driver_gets_it_and_a_cluster_keeps_its_own(monkeypatch):
    monkeypatch.setattr(builder, "machine_memory", lambda: 24 * GIB)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert spark_settings("local[*]")["spark.driver.memory"] == "6g"
    assert spark_settings("local[4]")["spark.driver.memory"] == "6g"
    assert "spark.driver.memory" not in spark_settings(None)
    assert "spark.driver.memory" not in spark_settings("spark://10.0.0.1:7077")
    assert "spark.driver.memory" not in spark_settings("yarn")


def test_the_operators_setting_wins(monkeypatch):
    monkeypatch.setattr(builder, "machine_memory", lambda: 24 * GIB)
    assert spark_settings("local[*]", conf={"spark.driver.memory": "2g"})["spark.driver.memory"] == "2g"


def test_a_driver_spark_submit_launched_is_left_as_it_was(monkeypatch):
    # Its JVM is already running: a heap setting would say something untrue.
    monkeypatch.setattr(builder, "machine_memory", lambda: 24 * GIB)
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert "spark.driver.memory" not in spark_settings("local[*]")


def test_the_container_limit_counts_when_it_is_lower(tmp_path):
    v2 = tmp_path / "memory.max"
    v2.write_text("4294967296\n")
    assert builder.machine_memory(physical=24 * GIB, limits=(v2,)) == 4 * GIB
    v2.write_text("max\n")
    assert builder.machine_memory(physical=24 * GIB, limits=(v2,)) == 24 * GIB
    v1 = tmp_path / "memory.limit_in_bytes"
    v1.write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert builder.machine_memory(physical=24 * GIB, limits=(v1, tmp_path / "absent")) == 24 * GIB
