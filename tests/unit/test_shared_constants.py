"""The constants that the JVM engine and the Python core both define, held equal: the violation
kinds, the session statuses, the kinds of output record, and every value whose text reaches the
tables or the state.  Read from the Java sources, so that a difference fails here, before the
differential test has to draw a stream that shows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconstructor.contract.tables import RecordKind
from reconstructor.core import chain, jvm_blob, quarantine, seal
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.violations import ViolationKind
from reconstructor.spark import jvm_engine

JAVA = Path(__file__).resolve().parents[2] / "jvm" / "src" / "main" / "java" / "reconstructor" / "jvm"

_DECLARATION = re.compile(r"static\s+final\s+(String|byte\[\])\s+(.*?);", re.S)
_ASSIGNMENT = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def java_constants(file: str, scope: str | None = None) -> dict[str, str]:
    """The ``static final`` String (and ``byte[]`` from a string literal) constants of a Java file,
    by name; ``scope``: only those inside the nested class of that name."""
    text = (JAVA / file).read_text()
    if scope is not None:
        text = text[text.index(f"class {scope}"):]
    found: dict[str, str] = {}
    for _, body in _DECLARATION.findall(text):
        for name, literal in _ASSIGNMENT.findall(body):
            found.setdefault(name, literal.encode("ascii").decode("unicode_escape"))
    return found


def test_the_reader_finds_the_constants():
    # A reader that found nothing would pass every test below.
    assert java_constants("Violation.java")["GAP"] == "GAP"
    assert java_constants("Chain.java")["SEAL_DOMAIN"] == "reconstructor.session-seal.v2\n"


def test_the_violation_kinds_are_the_same_on_both_sides():
    kinds = {n: v for n, v in java_constants("Violation.java").items() if n.isupper()}
    assert kinds == {k.name: k.value for k in ViolationKind}


def test_the_session_statuses_are_the_same_on_both_sides():
    statuses = java_constants("SessionState.java")
    assert {n: v for n, v in statuses.items() if n.isupper()} == {s.name: s.value for s in SessionStatus}


def test_the_output_record_kinds_are_the_same_on_both_sides():
    records = java_constants("StateFunction.java", scope="Records")
    assert {n: v for n, v in records.items() if n.isupper()} == {k.name: k.value for k in RecordKind}


@pytest.mark.parametrize("java,name,python", [
    ("Engine.java", "VERSION", jvm_engine.ENGINE_VERSION),
    ("BatchStep.java", "SET_ASIDE", quarantine.SET_ASIDE),
    ("Chain.java", "START", chain.CHAIN_START),
    ("Chain.java", "SEAL_DOMAIN", seal.SEAL_DOMAIN.decode("ascii")),
    ("SessionTable.java", "MAGIC", jvm_blob.MAGIC.decode("ascii")),
    ("SessionTable.java", "TYPES", "".join(chr(code) for code in jvm_blob._TYPES)),
])
def test_each_shared_constant_is_the_same_on_both_sides(java, name, python):
    assert java_constants(java)[name] == python, f"{java} {name}"
