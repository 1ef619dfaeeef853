"""The command line as a user runs it: a subprocess of this interpreter."""

from __future__ import annotations

import subprocess
import sys


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "reconstructor", *args], capture_output=True,
                          text=True, timeout=timeout)
