"""Names that say what a module holds: a file name that repeats across the package's layers is one
concept at each layer, and each such module's docstring names the others; every module that
``docs/architecture.md`` names exists."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "reconstructor"


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def _repeated() -> dict[str, list[Path]]:
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            by_name[path.name].append(path)
    return {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}


REPEATED = _repeated()


def test_the_walk_finds_the_repeated_names():
    assert "timestamps.py" in REPEATED  # a walk that found nothing would pass the test below


@pytest.mark.parametrize("name", sorted(REPEATED))
def test_a_name_repeated_across_layers_is_one_concept_whose_modules_name_each_other(name):
    for path in REPEATED[name]:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for other in REPEATED[name]:
            if other != path:
                assert _dotted(other) in doc, f"{_dotted(path)}'s docstring does not name {_dotted(other)}"


#: A package folder's heading in docs/architecture.md, and a module named in its table.
_HEADING = re.compile(r"^\*\*`reconstructor/([\w/]*)`\*\*")
_ROW = re.compile(r"^\| `([\w/]+\.py)` \|")
_PATH = re.compile(r"`((?:reconstructor|workbench|tests|jobs)/[\w/]+\.py)`")


def test_every_module_that_the_architecture_names_exists():
    named: list[str] = []
    folder = None  # the folder whose table the lines are in
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        heading = _HEADING.match(line)
        if heading:
            folder = f"reconstructor/{heading.group(1)}"
        elif line.startswith("## The workbench"):
            folder = "workbench/"
        elif line.startswith(("**", "#")):
            folder = None
        row = _ROW.match(line)
        if row and folder is not None:
            named.append(folder + row.group(1))
        named += _PATH.findall(line)
    assert len(named) > 50, named
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, missing
