"""What a failure of the storage or the broker means for the operator: one line naming the setting
to fix, instead of a page of Java stack trace.

Spark, S3A and the Kafka clients report these as exceptions whose text (Py4J carries the Java
one's, with its causes) is all there is to go on; ``explain`` reads it in one place for every
command.  Pure: no Spark, no network.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from reconstructor.errors import (
    DiscrepancyError,
    IntegrityViolationError,
    ReconstructorError,
    UsageError,
    error_line,
    exception_chain,
)

_S3_CREDENTIALS = "s3.access_key and s3.secret_key (RECON_S3_ACCESS_KEY, RECON_S3_SECRET_KEY)"
_S3_URI = re.compile(r"s3a://([a-z0-9][a-z0-9.\-]*[a-z0-9])(/[^\s`'\":]*)?")
_CONNECT_TO = re.compile(r"Connect to ([^\s\[]+)")
_NO_BUCKET = ("NoSuchBucket", "UnknownStoreException", "The specified bucket does not exist")
_NO_CREDENTIALS = ("NoAuthWithAWSException", "No AWS Credentials provided", "Unable to load credentials",
                   "Unable to locate credentials")  # the last: boto3's (the writer lease)
_REFUSED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Status Code: 403",
            "Forbidden")
_UNREACHABLE = ("Connection refused", "UnknownHostException", "Unable to execute HTTP request",
                "connect timed out", "No route to host", "Name or service not known",
                # An endpoint that accepts connections but never answers: the SDK's call timeout.
                "ApiCallTimeoutException", "ApiCallAttemptTimeoutException",
                "Could not connect to the endpoint URL")  # boto3's (the writer lease)
_KAFKA_DOWN = ("Timed out waiting for a node assignment", "Failed to get metadata",
               "Broker transport failure", "Timeout expired while fetching topic metadata")


def s3_endpoint_down(endpoint: str) -> ReconstructorError:
    return ReconstructorError(f"S3 endpoint {endpoint} does not answer: check s3.endpoint "
                              "(RECON_S3_ENDPOINT)")


def kafka_down(bootstrap: str) -> ReconstructorError:
    return ReconstructorError(f"Kafka at {bootstrap} does not answer: check --bootstrap-servers "
                              "(and that the broker is up)")


def kafka_refuses(bootstrap: str, protocol: str, reason: str) -> ReconstructorError:
    return ReconstructorError(f"Kafka at {bootstrap} answers, but the handshake with security.protocol "
                              f"{protocol} fails ({reason}): check the [kafka] security settings")


def endpoint_address(endpoint: str) -> tuple[str, int]:
    """Host and port of an S3 endpoint URL (S3A also takes one without a scheme: HTTPS)."""
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return parts.hostname or endpoint, parts.port or (80 if parts.scheme == "http" else 443)


def explain(exc: BaseException, cfg=None) -> ReconstructorError:
    """The error to report for ``exc``: a storage or broker failure named by its setting, the
    command's own error as it is, anything else as its first meaningful line.

    ``cfg`` (the command's ``Settings``, when known) lets the line name the flag that points at the
    failing place and the endpoint or brokers it used.
    """
    if isinstance(exc, (UsageError, IntegrityViolationError, DiscrepancyError)):
        return exc
    text = "\n".join(reversed(list(_texts(exc))))  # the engine's own text first: it names the place
    found = _storage_failure(text, cfg) or _broker_failure(text, cfg)
    if found is not None:
        return found
    if isinstance(exc, ReconstructorError):
        return exc
    return ReconstructorError(error_line(exc))


def _texts(exc: BaseException) -> Iterator[str]:
    """The text of ``exc`` and of every exception it was raised from or during."""
    for link in exception_chain(exc):
        try:
            yield str(link)
        except Exception:  # noqa: BLE001 - a Java exception whose JVM is gone
            yield type(link).__name__


def _storage_failure(text: str, cfg) -> ReconstructorError | None:
    uri = _S3_URI.search(text)
    if uri is None and "awssdk" not in text:
        return None
    where = _where(uri.group(0), cfg) if uri else "S3"
    if any(s in text for s in _NO_BUCKET) and uri is not None:
        return ReconstructorError(f"{where}: bucket {uri.group(1)} does not exist (check the bucket "
                                  "and s3.endpoint)")
    if any(s in text for s in _NO_CREDENTIALS):
        return ReconstructorError(f"{where}: no S3 credentials: set {_S3_CREDENTIALS} or the AWS "
                                  "credential chain")
    if any(s in text for s in _REFUSED):
        return ReconstructorError(f"{where}: S3 refused the credentials: check {_S3_CREDENTIALS}")
    if any(s in text for s in _UNREACHABLE):
        endpoint = getattr(getattr(cfg, "s3", None), "endpoint", None)
        if endpoint is None:
            address = _CONNECT_TO.search(text)
            endpoint = address.group(1) if address else "(the AWS default)"
        return s3_endpoint_down(endpoint)
    return None


def _where(uri: str, cfg) -> str:
    """``--output s3a://b/x`` when ``uri`` lies under a configured location, else ``uri``."""
    for flag in ("output", "checkpoint"):
        root = getattr(cfg, flag, None)
        if root and (uri == root or uri.startswith(root.rstrip("/") + "/")):
            return f"--{flag} {root}"
    bucket = _S3_URI.match(uri)
    return f"s3a://{bucket.group(1)}" if bucket else uri


def _broker_failure(text: str, cfg) -> ReconstructorError | None:
    if not any(s in text for s in _KAFKA_DOWN):
        return None
    return kafka_down(getattr(cfg, "bootstrap_servers", None) or "the bootstrap servers")
