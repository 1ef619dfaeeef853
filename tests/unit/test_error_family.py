"""One error family: every exception class the product defines derives from
``reconstructor.errors.ReconstructorError`` and is defined in that one module, with its exit code,
unless it is private to the one module that raises and catches it.  Records are not exceptions."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import reconstructor
from reconstructor import errors
from reconstructor.failures import explain

PACKAGE = Path(reconstructor.__file__).parent
EXIT_CODES = {errors.EXIT_FAILURE, errors.EXIT_USAGE, errors.EXIT_INTEGRITY}


def _modules():
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="reconstructor."):
        if not info.name.endswith("__main__"):
            yield importlib.import_module(info.name)


def _exceptions_defined() -> dict[str, type[BaseException]]:
    found = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = obj
    return found


DEFINED = _exceptions_defined()


def test_the_walk_finds_the_products_exceptions():
    # A walk that found nothing would pass every test below.
    assert "reconstructor.errors.IntegrityViolationError" in DEFINED
    assert "reconstructor.audit.checks._Found" in DEFINED


@pytest.mark.parametrize("where", sorted(DEFINED))
def test_every_exception_class_is_in_the_family_or_private_to_its_module(where):
    cls = DEFINED[where]
    module = cls.__module__
    if cls.__name__.startswith("_"):
        # Private: no other module names it, and its docstring says so.
        source = Path(importlib.import_module(module).__file__ or "").resolve()
        elsewhere = [p for p in PACKAGE.rglob("*.py") if p.resolve() != source and cls.__name__ in p.read_text()]
        assert not elsewhere, elsewhere
        assert "Private to this module" in (cls.__doc__ or ""), cls.__doc__
        return
    assert module == "reconstructor.errors", f"{where}: the product's exceptions live in reconstructor.errors"
    assert issubclass(cls, errors.ReconstructorError), where


def test_every_error_of_the_family_ends_a_command_with_a_known_exit_code():
    family = [c for c in DEFINED.values() if c.__module__ == "reconstructor.errors"]
    assert len(family) >= 9, family
    for cls in family:
        if cls is errors.StoppedBySignal:  # 128 + the signal's number, set by each stop
            assert errors.StoppedBySignal(15, "after batch 1").exit_code == errors.EXIT_SIGTERM
            continue
        assert cls.exit_code in EXIT_CODES, cls


def test_a_record_is_a_dataclass_not_an_exception():
    from reconstructor.core.violations import ViolationKind, ViolationRecord
    from reconstructor.spark.sinks.stops import RunAgain

    for record in (ViolationRecord, RunAgain):
        assert dataclasses.is_dataclass(record) and not issubclass(record, BaseException), record
    skipped = ViolationRecord(ViolationKind.SKIPPED, "t", 0, 4, "s", 3, 3, "not a violation")
    assert not isinstance(skipped, BaseException)


def test_a_foreign_failure_reaches_the_command_line_as_one_of_the_family():
    # What cli/app.py reports is always of the family: its exit code and one line.
    for exc in (ValueError("bad"), KeyError("k"), RuntimeError("An error occurred while calling o95.x.\nboom")):
        failure = explain(exc)
        assert isinstance(failure, errors.ReconstructorError) and failure.exit_code == errors.EXIT_FAILURE
    assert explain(errors.SchemaError("schema x: bad")).exit_code == errors.EXIT_USAGE
    # A table's refusal that left the core would be the violation it names.
    assert errors.Rejected.exit_code == errors.EXIT_INTEGRITY
