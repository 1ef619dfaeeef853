"""Metrics: each batch's counts (``batch``), where they go (``export``: Prometheus and a JSON log),
and the Spark listener that feeds them (``listener``)."""
