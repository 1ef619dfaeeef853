"""Databricks entry point.

A Python wheel task names package ``sensor-reconstructor`` and entry point ``reconstructor`` (the
console script in the wheel) with the CLI's arguments as ``parameters``; this file is the same
call for a ``spark_python_task`` that points at a file instead.
"""

import sys

from reconstructor.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
