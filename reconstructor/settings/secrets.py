"""Which settings hold secrets, and their printed form: ``***`` for the value of a setting whose
name says it is a secret, and for such a Java system property inside any value.  ``config show``,
the logs and ``--help`` only ever print settings through ``redact``."""

from __future__ import annotations

import re
from typing import Any

# A setting holds a secret when a word of its name says so ("ssl.key.password", "fs.s3a.access.key",
# "fs.azure.account.key.<account>", "spark.ssl.keyPassword"), unless its last word says the value is
# only about the secret: where it lives, its kind, the class that provides it ("ssl.keystore.location",
# "key.serializer", "fs.s3a.aws.credentials.provider", "spark.authenticate.secret.file").  Words, not
# letters: "keystore", "keymanager" and "keyprovider" are other words.  Certificates are public.
_SECRET_WORDS = frozenset({"key", "password", "passwd", "passphrase", "secret", "token", "credential",
                           "credentials", "jaas", "sas"})
_DESCRIPTOR_WORDS = frozenset({"location", "path", "file", "type", "provider", "class", "algorithm",
                               "mechanism", "protocol", "serializer", "deserializer", "url", "uri",
                               "endpoint", "enabled", "length", "bits", "size"})
# camelCase words that are one word in dotted names ("spark.ssl.keyStore" is "ssl.keystore").
_COMPOUNDS = {("key", "store"): "keystore", ("trust", "store"): "truststore",
              ("key", "manager"): "keymanager", ("trust", "manager"): "trustmanager"}
REDACTED = "***"
# A Java system property inside a value ("spark.driver.extraJavaOptions" = "-Xss8m -Dapp.password=x"):
# its value is a secret when its name is one, as a setting's is.  A quoted value, or a quoted
# option ("-Dapp.password=x y"), may hold spaces.
_SYSTEM_PROPERTY = re.compile(r"""(?<!\S)(?P<quote>["'])?(?P<head>-D(?P<name>[^\s=]+)=)"""
                              r"""(?(quote)(?:(?!(?P=quote)).)*|(?:"[^"]*"|'[^']*'|\S*))""")


def redact(value: Any, key: str = "") -> Any:
    """``value`` (a setting, or a table of them) as it may be printed: secrets as ``***``."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if value is not None and is_secret(key):
        return REDACTED
    if isinstance(value, str):
        return _SYSTEM_PROPERTY.sub(lambda m: (m["quote"] or "") + m["head"] + REDACTED
                                    if is_secret(m["name"]) else m[0], value)
    return value


def _words(key: str) -> list[str]:
    parts = re.split(r"[._\-\s]+|(?<=[a-z0-9])(?=[A-Z])", key)
    words: list[str] = []
    for part in (p.lower() for p in parts if p):
        if words and (words[-1], part) in _COMPOUNDS:
            words[-1] = _COMPOUNDS[(words[-1], part)]
        else:
            words.append(part)
    return words


def is_secret(key: str) -> bool:
    """Whether the value of setting ``key`` is a secret (see ``_SECRET_WORDS``)."""
    words = _words(key)
    return bool(words) and not _SECRET_WORDS.isdisjoint(words) and words[-1] not in _DESCRIPTOR_WORDS
