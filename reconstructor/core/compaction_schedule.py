"""When a run's first compaction is due: a scheduled run every few minutes must not OPTIMIZE and
VACUUM at every start, so the last compaction's time is kept with the output and a run waits out
the rest of the interval from it (``spark.compaction_mark`` keeps it)."""

from __future__ import annotations

import datetime as dt

NOW = dt.timedelta(0)


def wait_before_compaction(last: dt.datetime | None, now: dt.datetime, every: dt.timedelta) -> dt.timedelta:
    """How long a run waits before its first compaction: nothing when none is recorded or one is
    due (``every`` has passed since ``last``), else the rest of the interval.  A ``last`` ahead of
    ``now`` (another machine's clock ahead of this one) waits one interval at most: a compaction
    a little early or late is harmless, one never run is not."""
    if last is None:
        return NOW
    elapsed = now - last
    if elapsed < NOW:
        return every
    return max(NOW, every - elapsed)
