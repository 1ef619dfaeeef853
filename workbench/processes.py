"""What the workbench's detached servers share: where their state lives and whether one is alive.

The local stack (``localstack``) and the standalone Spark cluster (``standalone``) both start
processes that outlive the command that started them, and keep their pids, logs and data in the
stack folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def checkout_root() -> Path:
    """The checkout the workbench lives in (it holds ``infra/maven/pom.xml`` and ``.stack``)."""
    return Path(__file__).resolve().parent.parent


def stack_dir() -> Path:
    """The workbench's state folder: ``RECON_STACK_DIR``, else ``.stack`` in the checkout."""
    return Path(os.environ.get("RECON_STACK_DIR", checkout_root() / ".stack"))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs; a zombie (exited, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); look at its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
