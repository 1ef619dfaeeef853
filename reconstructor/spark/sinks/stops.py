"""Why a computed micro-batch stops before it writes anything: a violation, a loss of Kafka data,
a lost writer lease, or a batch that is to run again.

What it stopped on is kept for the driver to report as it is (a query's failure reaches the caller
only as text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reconstructor.core.violations import ViolationRecord
from reconstructor.errors import IntegrityViolationError

if TYPE_CHECKING:
    from reconstructor.spark.data_loss import KafkaLossCheck, LossRegistry


@dataclass(frozen=True)
class RunAgain:
    """Why a micro-batch stopped to run again from the checkpoint, nothing of it written: it found
    a ``DATA_LOSS`` the run had not recorded yet (quarantine mode: the batch runs again with the
    sessions of the lost partitions told, ``reconstructor.spark.data_loss.LossRegistry``), or a
    topic created again, which the batch then reads from its new first offset.  Not a failure:
    the query ends with it (``Running.await_termination`` returns it) and its caller starts the
    query again."""

    reason: str

    @classmethod
    def after_losses(cls, losses) -> RunAgain:
        where = ", ".join(f"{d.topic}[{d.partition}]" for d in losses)
        return cls(f"DATA_LOSS on {where} recorded: the batch runs again, the sessions there are quarantined")

    @classmethod
    def to_reread(cls, partitions) -> RunAgain:
        where = ", ".join(f"{t}[{p}]" for t, p in partitions)
        return cls(f"{where} was deleted and created again after its sessions were done: the batch runs "
                   f"again and reads it from its new first offset")

    def __str__(self) -> str:
        return self.reason


class _BatchRunsAgain(Exception):
    """Private to this module: raised inside a micro-batch to end it (and so the query) before it
    writes, once ``BatchStops.run_again`` is set; the driver reads that record, never this."""


@dataclass
class BatchStops:
    """The checks a batch passes before it writes, and what the last one stopped on."""

    #: Asked, once a batch's records were fetched, which records never processed are gone from
    #: Kafka (``reconstructor.spark.data_loss``); the first one stops the batch before it writes.
    loss_check: KafkaLossCheck | None = None
    #: Quarantine mode: where the losses the run goes on past are kept (``LossRegistry``); in fail
    #: mode (None) a loss stops the run.
    loss_registry: LossRegistry | None = None
    #: Checked before each micro-batch writes (``WriterLease.check``): raises once this driver no
    #: longer holds the output's writer lease.
    lease_check: Callable[[], None] | None = None
    #: The violation a batch stopped on.
    violation: ViolationRecord | None = field(default=None, init=False)
    #: The error a batch stopped on that is not the engine's (a lost lease, writes that cannot be
    #: told).
    stopped_by: Exception | None = field(default=None, init=False)
    #: Why the batch stopped to run again (losses newly recorded, a topic created again): the query
    #: starts again from its checkpoint.
    run_again: RunAgain | None = field(default=None, init=False)

    def losses(self, batch_id: int) -> list:
        """The batch's losses the run goes on past (quarantine mode, all recorded before); raises on
        a loss in fail mode, and to run again on losses newly recorded or partitions to read again."""
        losses = self.loss_check(batch_id) if self.loss_check is not None else []
        if losses and self.loss_registry is None:
            self.violation = losses[0].violation()
            raise IntegrityViolationError(self.violation)
        if losses and self.loss_registry is not None:
            new = self.loss_registry.add(losses)
            if new:
                self.run_again = RunAgain.after_losses(new)
                raise _BatchRunsAgain(str(self.run_again))
        if self.loss_check is not None and self.loss_check.reread:
            self.run_again = RunAgain.to_reread(self.loss_check.reread)
            self.loss_check.read_again(batch_id)
            raise _BatchRunsAgain(str(self.run_again))
        if losses and self.loss_check is not None:
            self.loss_check.accept()
        return losses

    def check_violation(self, violation: str | None) -> None:
        """Stop on the batch's first violation (its JSON, from the stats), if any."""
        if violation is not None:
            self.violation = ViolationRecord.from_json(violation)
            raise IntegrityViolationError(self.violation)

    def check_lease(self) -> None:
        """Stop once this driver no longer holds the output's writer lease."""
        if self.lease_check is not None:
            try:
                self.lease_check()
            except Exception as exc:
                self.stopped_by = exc
                raise
