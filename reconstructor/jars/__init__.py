"""The project's JVM artefacts as the installed package carries them.

The wheel ships ``reconstructor-engine.jar`` (the JVM engine and the put-if-absent Delta log store)
in this package, built when the wheel is built.  An editable install from a checkout has none here:
there ``make jars`` builds it into ``.jars/spark/``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: The project's jar: the JVM engine (``--engine jvm``) and ``reconstructor.delta.PutIfAbsentLogStore``.
ENGINE_JAR = "reconstructor-engine.jar"


def packaged_engine_jar() -> Path | None:
    """The engine jar inside the installed package, or None (an editable install from a checkout)."""
    jar = resources.files(__name__) / ENGINE_JAR
    return Path(str(jar)) if jar.is_file() else None
