"""The distributions as a registry and a builder see them: the sdist (no Maven needed to make it)
carries what builds the wheel, its metadata passes ``twine check``, a wheel build without JDK and
Maven stops with one line instead of yielding a wheel without the engine jar, and an editable
install needs neither and places no jar.

Each builds from a copy of the checkout's files (git's, tracked or new, not ignored), so nothing is
written into the checkout and a file lying there untracked (a jar) cannot slip in.  The builds run
in isolated environments (``build``'s and pip's default), which fetch setuptools like any build.
The wheel itself, jar and all, is built and listed by tests/integration/test_wheel_jobs.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from build_hooks import ENGINE_JAR as BUILT_JAR
from reconstructor.jars import ENGINE_JAR

ROOT = Path(__file__).resolve().parents[2]
NOTHING_ON_PATH = {"PATH": os.devnull}  # no mvn, no javac: build and pip run by absolute paths


def _checkout_copy(into: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAVA_HOME")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sdist")
    source = _checkout_copy(root / "src")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "-o", str(root / "dist"), str(source)],
                   check=True, capture_output=True, env=_env(**NOTHING_ON_PATH), timeout=600)
    (built,) = (root / "dist").glob("sensor_reconstructor-*.tar.gz")
    return built


def test_the_sdist_carries_what_builds_the_wheel_and_its_metadata_passes_twine(sdist):
    with tarfile.open(sdist) as tar:
        top, _, _ = tar.getnames()[0].partition("/")
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
    tracked = subprocess.run(["git", "ls-files", "jvm", "schemas", "reconstructor"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    assert tracked and not set(tracked) - names
    assert {"build_hooks.py", "infra/maven/settings.xml", "LICENSE", "pyproject.toml"} <= names
    assert not [n for n in names if n.endswith(".jar")]
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist)], capture_output=True,
                             text=True, timeout=120)
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr


def test_the_registry_metadata_names_the_project_and_its_license():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert {"Homepage", "Repository", "Documentation"} <= set(project["urls"])
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert {"build", "twine"} <= {d.split(">")[0].split("<")[0] for d in project["optional-dependencies"]["dev"]}


def test_a_wheel_build_without_jdk_and_maven_stops_with_one_line_and_no_wheel(sdist, tmp_path):
    failed = subprocess.run([sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"), str(sdist)],
                            capture_output=True, text=True, env=_env(**NOTHING_ON_PATH), timeout=600)
    assert failed.returncode != 0
    said = [line for line in (failed.stdout + failed.stderr).splitlines() if ENGINE_JAR in line]
    assert said == [f"error: building the wheel needs JDK 17 and Maven (mvn) to build {ENGINE_JAR}: mvn not found "
                    "on PATH; javac (a JDK) not found on PATH (apt-get install openjdk-17-jdk-headless maven)"]
    assert not list(tmp_path.glob("dist/*.whl"))


def test_an_editable_install_needs_no_maven_and_places_no_jar(tmp_path):
    source = _checkout_copy(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "-e", str(source)], check=True, env=_env(**NOTHING_ON_PATH), timeout=600)
    assert not list(source.rglob("*.jar")) and not list(venv.rglob("*.jar"))
    # The package and its schemas (package-dir's reconstructor.schemas) resolve to the checkout.
    probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "from importlib import resources; import reconstructor.jars as j; "
                            "print(resources.files('reconstructor.schemas').joinpath('demo_sensor.json')); "
                            "print(j.packaged_engine_jar())"],
                           cwd=tmp_path, check=True, capture_output=True, text=True, env=_env(), timeout=120)
    assert probe.stdout.split() == [str(source / "schemas" / "demo_sensor.json"), "None"]


def test_the_build_hook_names_the_jar_the_package_looks_for():
    assert BUILT_JAR == ENGINE_JAR
