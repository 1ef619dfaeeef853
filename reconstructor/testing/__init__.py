"""The reconstructor's test kit: its rules without Spark, for the teams around the pipeline.

``TestDriver`` pipes records through the parse and the stateful step in batches you cut and
returns what the tables would hold and how ``run`` would end.  ``reconstructor.testing.strategies``
(needs the ``[testing]`` extra, hypothesis) draws valid sessions, fleets, faults and batch splits.
See ``docs/testing.md``.  The names below load on first use, so that importing a strategy or a
``Message`` does not load the driver.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"KafkaRecord": "reconstructor.core.record_parse", "ManualClock": "reconstructor.testing.driver",
          "TestDriver": "reconstructor.testing.driver", "Verdict": "reconstructor.testing.driver",
          "Message": "reconstructor.testing.messages"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'reconstructor.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
