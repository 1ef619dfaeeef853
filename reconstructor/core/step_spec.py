"""The stateful step's one spec, the same for both engines.

``StepSpec`` is built once from the settings (``Settings.step_spec``).  The Python engine takes it
as it is (``spark.stateful``); the JVM engine takes it as versioned JSON that its
``EngineSettings`` reads (``spark.jvm_engine.engine_json``).  What a query's start adds beside it
(the data losses its checkpoint recorded, a replay's chain and session seeds, a replay's forced
await of snapshots) is ``StepStart``.  Adding a setting that the step uses touches this spec, the
code that uses it, and nothing else by hand: a test holds the JVM's reading of both, field by
field, to these definitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.chain import ChainKey, ChainSeed
from reconstructor.core.data_loss import DataLoss
from reconstructor.core.policy import STRICT, IntegrityPolicy
from reconstructor.core.seed import NO_SEEDS, SessionSeeds


@dataclass(frozen=True)
class StepSpec:
    """What the stateful step is configured with for a query: its row schema, the processing
    time after which a silent session times out and after which its state is dropped, whether a
    session's first record must be a snapshot, the integrity policy, and the chain key.

    ``chain_key`` is a secret: it is not in the spec's repr, and only the JVM engine's settings
    document carries it, which is never logged."""

    schema: RowSchema
    session_timeout_ms: int
    state_retention_ms: int
    await_snapshot: bool = False
    policy: IntegrityPolicy = STRICT
    chain_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("session_timeout_ms", "state_retention_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"StepSpec.{name} is a positive number of milliseconds, got {value!r}")

    @property
    def key(self) -> ChainKey:
        """The key the change digests are HMACs with (plain SHA-256 without one)."""
        return ChainKey(self.chain_key)

    def awaits_snapshot(self, start: StepStart) -> bool:
        """Whether a session with no state skips to its first snapshot: as configured, or forced
        by a replay from the last snapshots."""
        return self.await_snapshot or start.await_snapshot


@dataclass(frozen=True)
class StepStart:
    """What a query's start adds to the spec.

    ``losses`` (quarantine mode): the ``DATA_LOSS`` the checkpoint recorded, by (topic,
    partition); each reaches the sessions of its partition (``core.data_loss``).
    ``chain_seeds``: a replay's, the digests the tables hold for the snapshots it starts sessions
    at, by (topic, session, seq).  ``session_seeds``: a replay's, the sessions it does not rebuild
    from Kafka, started where the tables hold them (``core.seed``).  ``await_snapshot``: a replay
    from the last snapshots, where a session whose snapshot lies after its partition's start sees
    updates first."""

    losses: Mapping[tuple[str, int], list[DataLoss]] = field(default_factory=dict)
    chain_seeds: Mapping[tuple[str, str, int], ChainSeed] = field(default_factory=dict)
    session_seeds: SessionSeeds = NO_SEEDS
    await_snapshot: bool = False


#: A start that adds nothing: a run with no loss recorded, or a test of the step alone.
NO_START = StepStart()
