"""The wheel's build step (pyproject.toml's ``[tool.setuptools.cmdclass]``): setuptools' ``build_py``
with two additions.

* A package that ``package-dir`` maps is built even where ``packages.find`` does not find it
  (``reconstructor.schemas`` is the top-level ``schemas/``, outside find's reach).
* Maven builds ``reconstructor-engine.jar`` (jvm/) in a temporary folder, and the jar goes into the
  wheel as ``reconstructor/jars/reconstructor-engine.jar``, so a wheel never lacks it: without JDK 17
  and Maven the build stops with one line.  An editable install (``pip install -e``) runs no Maven and
  places no jar: a checkout has ``make jars`` for that.

The source distribution carries jvm/ and infra/maven/settings.xml (MANIFEST.in) so that a wheel builds
from it too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.errors import ExecError, PlatformError

ROOT = Path(__file__).resolve().parent
ENGINE_JAR = "reconstructor-engine.jar"  # reconstructor.jars.ENGINE_JAR; the build cannot import the package
JAR_PACKAGE = "reconstructor/jars"


def missing_tools() -> str | None:
    """What of Maven and a JDK the jar's build lacks (Maven compiles with its JDK's javac), or None."""
    java_home = os.environ.get("JAVA_HOME")
    lacking = [] if shutil.which("mvn") else ["mvn not found on PATH"]
    if java_home and not Path(java_home, "bin", "javac").is_file():
        lacking.append(f"no javac in JAVA_HOME ({java_home})")
    elif not java_home and not shutil.which("javac"):
        lacking.append("javac (a JDK) not found on PATH")
    return "; ".join(lacking) or None


def build_engine_jar(into: Path, source: Path = ROOT) -> Path:
    """Build the jar with Maven, outside the source tree (jvm/pom.xml's ``jars.dir`` is a temporary
    folder), and copy it to ``into``; ExecError with one line if Maven fails (its log's end above)."""
    with tempfile.TemporaryDirectory(prefix="reconstructor-engine-") as tmp:
        log = Path(tmp) / "mvn.log"
        with log.open("w") as out:
            done = subprocess.run(
                ["mvn", "-q", "-B", "-s", str(source / "infra/maven/settings.xml"), "-f", str(source / "jvm/pom.xml"),
                 f"-Djars.dir={tmp}", "package"], stdout=out, stderr=subprocess.STDOUT, check=False)
        built = Path(tmp) / "spark" / ENGINE_JAR
        if done.returncode != 0 or not built.is_file():
            sys.stderr.writelines(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
            raise ExecError(f"Maven did not build {ENGINE_JAR} (exit {done.returncode}; its output above)")
        into.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, into)
    return into


class BuildPy(build_py):
    """build_py, plus the packages package-dir maps and, in a wheel, the engine jar."""

    def finalize_options(self) -> None:
        dist = self.distribution
        found = list(dist.packages or [])
        dist.packages = found + [p for p in (dist.package_dir or {}) if p and p not in found]
        super().finalize_options()

    def run(self) -> None:
        if self.editable_mode:
            super().run()
            return
        # First, before anything is built: a wheel without the jar is never the outcome.
        lacking = missing_tools()
        if lacking:
            raise PlatformError(f"building the wheel needs JDK 17 and Maven (mvn) to build {ENGINE_JAR}: "
                                f"{lacking} (apt-get install openjdk-17-jdk-headless maven)")
        # setuptools keeps build/lib between builds of a checkout: a module deleted from the source
        # would still ship.  Each wheel's product is copied afresh.
        shutil.rmtree(Path(self.build_lib, "reconstructor"), ignore_errors=True)
        super().run()
        build_engine_jar(self._jar())

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else [*outputs, str(self._jar())]

    def _jar(self) -> Path:
        return Path(self.build_lib, JAR_PACKAGE, ENGINE_JAR)
