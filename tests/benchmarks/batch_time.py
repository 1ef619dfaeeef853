"""Where a streaming run's batches go, read from Spark's event log: which part is Delta's and which
is the query's own.

A micro-batch is one SQL execution (the streaming engine's), and everything it runs (the pass that
computes it, each write, each Delta table-state reconstruction, each phase of a MERGE) is a child
execution with its own description. Per batch this sums, as the union of their time spans (the
MERGEs run side by side, so their spans overlap):

- ``delta_state``: Delta rebuilding a table's state from its log ("Compute snapshot for version").
  Delta 4.4 answers the transaction-id check of an idempotent write from that state, so every
  exactly-once write pays one per table and batch, the limit's streaming Delta sink too;
- ``merge``: the phases of a MERGE (materialising its source, finding the files, rewriting them);
- ``other``: every other child that runs Spark jobs: the pass that computes the batch, the
  appends' write jobs;
- ``driver``: the batch's time in none of these: planning, Delta's commits, Python (a write
  command is itself a child execution, with the ones above inside it, and runs no job of its own).

The event log is Spark's own (``spark.eventLog.*``, see ``event_log_conf``), read after the
SparkSession stops, when Spark has written all of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: Child executions by the start of their description's last line (after "batch = N").
DELTA_STATE = "Compute snapshot for version"
MERGE = "MERGE operation"

CATEGORIES = ("delta_state", "merge", "other")


def event_log_conf(directory: Path) -> dict[str, str]:
    """A SparkSession's settings for an uncompressed event log in ``directory`` (one file)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": directory.resolve().as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


@dataclass(frozen=True)
class Execution:
    id: int
    root: int
    start_ms: int
    end_ms: int
    description: str
    runs_jobs: bool

    @property
    def last_line(self) -> str:
        return self.description.rsplit("\n", 1)[-1]

    def field(self, name: str) -> str | None:
        """A field of a streaming batch's description (``id``, ``runId``, ``batch``)."""
        for line in self.description.splitlines():
            key, sep, value = line.partition(" = ")
            if sep and key.strip() == name:
                return value.split(":", 1)[0].split(" - ", 1)[0].strip()
        return None


def read_executions(directory: Path) -> list[Execution]:
    """Every finished SQL execution in the event logs under ``directory``."""
    starts: dict[int, dict] = {}
    ends: dict[int, int] = {}
    with_jobs: set[int] = set()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if "SQLExecution" not in line and "SparkListenerJobStart" not in line:
                    continue
                event = json.loads(line)
                kind = event["Event"]
                if kind == "SparkListenerJobStart":
                    execution = (event.get("Properties") or {}).get("spark.sql.execution.id")
                    if execution is not None:
                        with_jobs.add(int(execution))
                elif kind.endswith("SparkListenerSQLExecutionStart"):
                    starts[event["executionId"]] = event
                elif kind.endswith("SparkListenerSQLExecutionEnd"):
                    ends[event["executionId"]] = event["time"]
    done = []
    for id_, start in starts.items():
        if id_ in ends:
            root = start.get("rootExecutionId")
            done.append(Execution(id_, id_ if root is None else root, start["time"], ends[id_],
                                  start.get("description") or "", id_ in with_jobs))
    return sorted(done, key=lambda e: e.id)


def _union_ms(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _category(execution: Execution) -> str | None:
    """A child's kind; None for a command that only holds other children (its own time is the driver's)."""
    line = execution.last_line
    if DELTA_STATE in line:
        return "delta_state"
    if MERGE in line:
        return "merge"
    return "other" if execution.runs_jobs else None


def split(executions: list[Execution], run_id: str) -> list[dict]:
    """The batches of the streaming run ``run_id``, each as its seconds: wall, per category, driver."""
    children: dict[int, list[Execution]] = {}
    for e in executions:
        if e.root != e.id:
            children.setdefault(e.root, []).append(e)
    out = []
    for batch in executions:
        if batch.root != batch.id or batch.field("runId") != run_id:
            continue
        kinds = [(_category(k), (k.start_ms, k.end_ms)) for k in children.get(batch.id, [])]
        row = {"batch": int(batch.field("batch") or -1), "wall_s": (batch.end_ms - batch.start_ms) / 1000}
        for category in CATEGORIES:
            row[category + "_s"] = _union_ms([span for kind, span in kinds if kind == category]) / 1000
        counted = [span for kind, span in kinds if kind is not None]
        row["driver_s"] = (batch.end_ms - batch.start_ms - _union_ms(counted)) / 1000
        row["delta_states"] = sum(kind == "delta_state" for kind, _ in kinds)
        out.append(row)
    return sorted(out, key=lambda r: r["batch"])


def print_split(label: str, batches: list[dict]) -> None:
    """One run's batches, then its totals, as a Markdown table."""
    if not batches:
        print(f"{label}: no batches in the event log")
        return
    print(f"\n{label}\n\n| batch | wall | Delta table state (count) | MERGE phases | other jobs | driver |\n"
          "|---:|---:|---:|---:|---:|---:|")
    for b in batches + [_total(batches)]:
        print(f"| {b['batch']} | {b['wall_s']:.2f} | {b['delta_state_s']:.2f} ({b['delta_states']}) | "
              f"{b['merge_s']:.2f} | {b['other_s']:.2f} | {b['driver_s']:.2f} |")


def _total(batches: list[dict]) -> dict:
    total = {key: sum(b[key] for b in batches) for key in batches[0] if key != "batch"}
    return {"batch": "all", **total}
