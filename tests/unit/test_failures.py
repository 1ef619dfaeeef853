"""Storage and broker failures as one line naming the setting to fix, from the exception texts
Spark and S3A really give (trimmed of their stack frames)."""

from __future__ import annotations

import pytest

from reconstructor.errors import EXIT_FAILURE, IntegrityViolationError, ReconstructorError, UsageError
from reconstructor.failures import endpoint_address, explain
from reconstructor.settings import Settings

NO_BUCKET = (
    "An error occurred while calling o86.exists.\n"
    ": org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://nobucket/chk/metadata': getFileStatus "
    "on s3a://nobucket/chk/metadata: software.amazon.awssdk.services.s3.model.NoSuchBucketException: "
    "The specified bucket does not exist (Service: S3, Status Code: 404, Request ID: x)\n"
    "\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException(S3AUtils.java:262)\n")
ENDPOINT_DOWN = (
    "An error occurred while calling o84.exists.\n"
    ": java.net.ConnectException: getFileStatus on s3a://recon/cp/chk/metadata: "
    "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: "
    "Connect to 127.0.0.1:9 [/127.0.0.1] failed: Connection refused (SDK Attempt Count: 4)\n")
ENDPOINT_FROZEN = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach "
    "batch sink.\n"
    "Caused by: org.apache.hadoop.fs.s3a.AWSApiCallTimeoutException: getFileStatus on "
    "s3a://recon/chk/state/0/1: software.amazon.awssdk.core.exception.ApiCallTimeoutException: Client "
    "execution did not complete before the specified timeout configuration: 60000 millis\n")
NO_CREDENTIALS = (
    "An error occurred while calling o78.exists.\n"
    ": java.nio.file.AccessDeniedException: s3a://recon/x/chk/metadata: "
    "org.apache.hadoop.fs.s3a.auth.NoAuthWithAWSException: No AWS Credentials provided by "
    "TemporaryAWSCredentialsProvider SimpleAWSCredentialsProvider\n")
REFUSED = (
    ": java.nio.file.AccessDeniedException: s3a://recon/x/out/row_changes/_delta_log: getFileStatus "
    "on s3a://recon/x/out/row_changes/_delta_log: software.amazon.awssdk.services.s3.model."
    "S3Exception: The AWS Access Key Id you provided does not exist in our records. (Service: S3, "
    "Status Code: 403, Request ID: x):InvalidAccessKeyId\n")
KAFKA_DOWN = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment. "
    "Call: describeTopics\n")


def config(**s3) -> Settings:
    cfg = Settings(bootstrap_servers="nohost:9092", output="s3a://nobucket/x", checkpoint="s3a://nobucket/chk")
    for key, value in s3.items():
        setattr(cfg.s3, key, value)
    return cfg


def failure(text: str) -> Exception:
    """An error the way the CLI meets one: the command's own, raised from the engine's."""
    try:
        try:
            raise RuntimeError(text)
        except RuntimeError as exc:
            raise ReconstructorError("cannot read the output tables under s3a://nobucket/x") from exc
    except ReconstructorError as exc:
        return exc


@pytest.mark.parametrize("text, cfg, line", [
    (NO_BUCKET, config(), "--checkpoint s3a://nobucket/chk: bucket nobucket does not exist "
                          "(check the bucket and s3.endpoint)"),
    (NO_BUCKET, None, "s3a://nobucket: bucket nobucket does not exist (check the bucket and s3.endpoint)"),
    (ENDPOINT_DOWN, config(endpoint="http://127.0.0.1:9"),
     "S3 endpoint http://127.0.0.1:9 does not answer: check s3.endpoint (RECON_S3_ENDPOINT)"),
    (ENDPOINT_FROZEN, config(endpoint="http://127.0.0.1:9"),
     "S3 endpoint http://127.0.0.1:9 does not answer: check s3.endpoint (RECON_S3_ENDPOINT)"),
    (NO_CREDENTIALS, None, "s3a://recon: no S3 credentials: set s3.access_key and s3.secret_key "
                           "(RECON_S3_ACCESS_KEY, RECON_S3_SECRET_KEY) or the AWS credential chain"),
    (REFUSED, Settings(output="s3a://recon/x/out"), "--output s3a://recon/x/out: S3 refused the credentials: "
     "check s3.access_key and s3.secret_key (RECON_S3_ACCESS_KEY, RECON_S3_SECRET_KEY)"),
    (KAFKA_DOWN, config(), "Kafka at nohost:9092 does not answer: check --bootstrap-servers "
                           "(and that the broker is up)"),
])
def test_a_storage_or_broker_failure_is_one_line_naming_the_setting(text, cfg, line):
    for exc in (RuntimeError(text), failure(text)):
        explained = explain(exc, cfg)
        assert str(explained) == line
        assert explained.exit_code == EXIT_FAILURE


def test_other_failures_keep_their_own_line():
    own = ReconstructorError("no topic matches --topic-pattern 'x'")
    assert explain(own) is own
    usage = UsageError("--output s3a://nobucket/x is refused")
    assert explain(usage) is usage
    violation = IntegrityViolationError("INTEGRITY VIOLATION GAP topic=t")
    assert explain(violation) is violation
    unexpected = explain(RuntimeError("An error occurred while calling o1.x.\n: java.lang.IllegalStateException: boom\n"))
    assert str(unexpected) == "java.lang.IllegalStateException: boom"
    assert unexpected.exit_code == EXIT_FAILURE


@pytest.mark.parametrize("endpoint, address", [
    ("http://127.0.0.1:9000", ("127.0.0.1", 9000)),
    ("https://s3.eu-west-1.amazonaws.com", ("s3.eu-west-1.amazonaws.com", 443)),
    ("http://minio", ("minio", 80)),
    ("minio:9000", ("minio", 9000)),
])
def test_an_endpoint_address_defaults_its_port_by_scheme(endpoint, address):
    assert endpoint_address(endpoint) == address
