"""The JVM jars a driver needs besides pyspark's own, as Maven coordinates: the one list that both
``infra/maven/pom.xml`` (``make jars``) and the run-time route through ``spark.jars.packages``
follow (a unit test holds the pom to it).  Pure constants: nothing here loads pyspark.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

SCALA_BINARY = "2.13"
SPARK_VERSION = "4.2.0"

#: Delta for Spark 4.2 (the Python package is delta-spark 4.4.1; Maven Central's newest JVM build
#: for Spark 4.2 is 4.4.0).
DELTA = f"io.delta:delta-spark_4.2_{SCALA_BINARY}:4.4.0"
#: Spark's Kafka source (its token provider comes with it, at the same version).
KAFKA_SOURCE = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}"
#: S3A (``s3a://`` outputs and checkpoints); it must match pyspark's hadoop-client-api.  Its AWS SDK
#: bundle is about 700 MB: it is asked for only when an ``s3a://`` location is involved.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"

#: What every driver started with the packages needs, and what ``s3a://`` adds.
PACKAGES = (DELTA, KAFKA_SOURCE)
S3A_PACKAGES = (HADOOP_AWS,)

#: ``group:artifact`` of the jars pyspark 4.2.0 already ships (other versions come in through the
#: packages' own dependencies), and of the few it needs none of: the copy in pyspark's jars folder
#: must be the only one on the classpath.  The pom's spark profile excludes the same.
EXCLUDES = (
    "org.roaringbitmap:RoaringBitmap",
    "org.roaringbitmap:shims",
    "io.airlift:aircompressor",
    "commons-pool:commons-pool",
    "commons-logging:commons-logging",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "com.fasterxml.jackson.core:jackson-annotations",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-databind",
    "com.google.code.findbugs:jsr305",
    "org.locationtech.jts:jts-core",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.apache.parquet:parquet-column",
    "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-jackson",
    "org.scala-lang:scala-library",
    "org.slf4j:slf4j-api",
    "org.xerial.snappy:snappy-java",
    "com.github.luben:zstd-jni",
    "org.lz4:lz4-java",
    "at.yawk.lz4:lz4-java",
    f"org.apache.spark:spark-tags_{SCALA_BINARY}",
    f"org.scala-lang.modules:scala-parallel-collections_{SCALA_BINARY}",
    "org.antlr:antlr4-runtime",
)

#: Where the packages are resolved from unless ``spark.jars.repositories`` or
#: ``spark.jars.ivySettings`` say otherwise (``DEFAULT_ARTIFACT_REPOSITORY`` replaces it, as it
#: does Spark's own default).
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"


def packages(s3a: bool) -> tuple[str, ...]:
    """The coordinates a driver resolves: with ``s3a``, S3A too."""
    return PACKAGES + (S3A_PACKAGES if s3a else ())


def artifact(coordinate: str) -> str:
    """``group:artifact:version``'s artifact id."""
    return coordinate.split(":")[1]


def ivy_settings(root: str) -> str:
    """Ivy settings whose one resolver is the Maven repository at ``root`` (``~/.m2`` left out):
    the text of the file ``spark.jars.ivySettings`` names."""
    return f"""<ivysettings>
  <property name="ivy.maven.lookup.sources" value="false"/>
  <property name="ivy.maven.lookup.javadoc" value="false"/>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" usepoms="true" root="{escape(root, {'"': '&quot;'})}"/>
  </resolvers>
</ivysettings>
"""
