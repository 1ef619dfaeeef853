"""The pure core: integrity checks, the session table and its Arrow state blob. No Spark here."""

from reconstructor.core.violations import IntegrityViolation, ViolationKind

__all__ = ["IntegrityViolation", "ViolationKind"]
