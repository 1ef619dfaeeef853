"""The query listener that hands each progress report to the run's metrics.

One per process, added once to the SparkSession's query manager: a query started again after a
transient failure reports to the same totals.
"""

from __future__ import annotations

import json
import logging

from pyspark.sql.streaming import StreamingQueryListener

from reconstructor.metrics.export import MetricsExport

log = logging.getLogger("reconstructor")


class MetricsListener(StreamingQueryListener):
    def __init__(self, export: MetricsExport):
        self.export = export

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        # Spark calls this from its listener thread: a failure here must never reach the query.
        try:
            self.export.progressed(json.loads(event.progress.json))
        except Exception:
            log.warning("metrics: a progress report was not counted", exc_info=True)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
