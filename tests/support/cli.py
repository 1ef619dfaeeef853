"""The command line as a user runs it: a subprocess of this interpreter."""

from __future__ import annotations

import subprocess
import sys


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "reconstructor", *args], capture_output=True,
                          text=True, timeout=timeout)


def refusal_line(result) -> str:
    """The one ``reconstructor:`` line of a command refused as bad usage (exit 2)."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("reconstructor:")]
    return line
