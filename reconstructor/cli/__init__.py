"""The command line: parsing, the commands, their checks before anything starts, and the one line
every failure ends with.  ``main`` is the entry point (``reconstructor``, ``python -m
reconstructor``, the Databricks and EMR jobs)."""

from reconstructor.cli.app import main

__all__ = ["main"]
