"""What one session carries from one micro-batch to the next: its status, seqs, offsets and table."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from reconstructor.core.blob import to_frame
from reconstructor.core.session_status import SessionStatus


@dataclass
class SessionState:
    """What is carried between micro-batches for one session (the blob holds its table).

    The seqs and offsets are those of applied messages; they are None only for a session
    quarantined before any of its messages applied (its first record was a violation).
    """

    partition: int
    status: SessionStatus
    first_seq: int | None
    last_seq: int | None
    last_offset: int | None
    snapshot_seq: int | None
    snapshot_offset: int | None
    started_ts: pd.Timestamp | None
    last_event_ts: pd.Timestamp | None
    #: The session table as held: pandas indexed by ``row_id``, or Arrow (``row_id`` first) as read
    #: from the state blob.  A plain update batch goes from blob to blob in Arrow
    #: (``batch.apply_update_run``) and never pays for pandas; ``table`` converts on first use.
    stored: pd.DataFrame | pa.Table = field(repr=False)

    @property
    def table(self) -> pd.DataFrame:
        """The session table as pandas, indexed by ``row_id``."""
        if isinstance(self.stored, pa.Table):
            self.stored = to_frame(self.stored)
        return self.stored

    @table.setter
    def table(self, frame: pd.DataFrame) -> None:
        self.stored = frame

    @property
    def row_count(self) -> int:
        return len(self.stored)
