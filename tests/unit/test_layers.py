"""The package's layers, read from its imports (local ones too): no circle, the pure core free of
Spark and of every outer layer, and nothing in the product importing the workbench."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "reconstructor"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """{module: the modules it imports}, every module of the package, ``from x import y`` read as
    ``x.y`` when that is a module."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in files}
        graph[name] = found
    return graph


GRAPH = _imports()


def test_the_product_imports_no_circle():
    internal = {m: {d for d in deps if d in GRAPH and d != m and not m.startswith(d + ".")}
                for m, deps in GRAPH.items()}
    # Package __init__ modules re-export their own modules; a module importing its package's
    # __init__ is not a circle through it.
    circles = []
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for d in internal[m]:
            if state.get(d) == 1:
                circles.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(internal):
        if m not in state:
            visit(m, [m])
    assert not circles, circles


def test_nothing_in_the_product_imports_the_workbench_or_the_tests():
    offenders = {m: sorted(d for d in deps if d.split(".")[0] in ("workbench", "tests"))
                 for m, deps in GRAPH.items()}
    assert not {m: d for m, d in offenders.items() if d}


@pytest.mark.parametrize("layer,forbidden", [
    # The core is the specification: plain Python, pandas and Arrow, no Spark, no I/O layer.
    ("reconstructor.core", ("pyspark", "delta", "deltalake", "boto3", "confluent_kafka",
                            "reconstructor.spark", "reconstructor.cli", "reconstructor.audit",
                            "reconstructor.metrics", "reconstructor.settings")),
    # The audit reads the tables with delta-rs, never Spark.
    ("reconstructor.audit", ("pyspark", "delta", "reconstructor.spark", "reconstructor.cli")),
    # The contract describes; its one module with I/O is the writer lease's store (lease.py).
    ("reconstructor.contract", ("pyspark", "reconstructor.spark", "reconstructor.cli", "reconstructor.audit")),
    # Only the command line and the test kit sit above the Spark shell.
    ("reconstructor.spark", ("reconstructor.cli", "reconstructor.testing")),
    # The test kit runs the rules without a JVM: none of Spark's or Delta's own modules.
    ("reconstructor.testing", ("pyspark", "delta", "deltalake", "reconstructor.cli")),
])
def test_each_layer_imports_only_what_is_below_it(layer, forbidden):
    offenders = {m: sorted(d for d in deps if any(d == f or d.startswith(f + ".") for f in forbidden))
                 for m, deps in GRAPH.items() if m == layer or m.startswith(layer + ".")}
    assert not {m: d for m, d in offenders.items() if d}


def test_the_wheel_takes_every_package_of_the_product_and_nothing_else():
    """pyproject.toml's packages.find, run as setuptools runs it: every package under reconstructor/
    (a new one included), nothing of the workbench or the tests, and schemas/ by its mapping."""
    import tomllib

    from setuptools.discovery import PEP420PackageFinder

    setuptools_cfg = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    find = setuptools_cfg["packages"]["find"]
    found = set(PEP420PackageFinder.find(str(PACKAGE.parent), exclude=find.get("exclude", ()),
                                         include=find["include"]))
    packages = {_module_name(p.parent) for p in PACKAGE.rglob("__init__.py")}
    assert packages <= found and all(p.split(".")[0] == "reconstructor" for p in found)
    assert setuptools_cfg["package-dir"] == {"reconstructor.schemas": "schemas"}
