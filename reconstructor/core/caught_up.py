"""Whether a run has anything to do: the rule that lets a scheduled run with nothing new end before
it builds a query.

An ``available-now`` (or ``once``) query runs a micro-batch only when its source's end offsets
differ from those its last batch ended at.  Building the query to find that out costs a scheduled
run more than Spark's own start (the parse's plan, the tables' states, the stateful step), so the
run asks the same question first, of the checkpoint and of Kafka, and asks it conservatively: any
doubt is "not caught up", and the query then runs and decides as it always did.

A run is caught up when:

- the checkpoint's last planned batch is committed (a planned batch that is not runs again);
- every partition that batch ended at is still in Kafka, its end offset where the batch ended (a
  partition gone or moved is the data-loss check's, which runs in a batch);
- every other partition the topic pattern matches holds no offset at all (a new partition with
  records is read from its first);
- the settings that a start acts on (``start_fingerprint``) are those the checkpoint last started
  with: a new row schema, engine, catalog or release starts the query, which evolves the tables,
  registers them or refuses the checkpoint, as a start does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from reconstructor.core.data_loss import Offsets

__all__ = ["caught_up", "start_fingerprint"]


def caught_up(last_planned: int | None, last_committed: int | None, ended_at: Offsets | None,
              kafka_ends: Offsets) -> bool:
    """Whether the checkpoint's last batch already ends where Kafka ends.

    ``last_planned``/``last_committed``: the newest batch ids in the checkpoint's ``offsets/`` and
    ``commits/``; ``ended_at``: the Kafka offsets that batch ended at; ``kafka_ends``: the end
    offset (read_committed) of every partition the topic pattern matches now."""
    if last_committed is None or last_planned != last_committed or ended_at is None:
        return False
    if any(kafka_ends.get(tp) != offset for tp, offset in ended_at.items()):
        return False
    return all(offset == 0 for tp, offset in kafka_ends.items() if tp not in ended_at)


def start_fingerprint(settings: Mapping[str, Any]) -> str:
    """A digest of the settings a start acts on (no secret among them), to compare a run's with
    the checkpoint's last start."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
