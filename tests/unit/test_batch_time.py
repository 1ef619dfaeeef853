import json

from tests.benchmarks.batch_time import read_executions, split

RUN = "run-1"
START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
END = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"


def _execution(id_, root, start, end, last_line, jobs=True, run=RUN):
    head = f"\nid = q\nrunId = {run}\n"
    events = [{"Event": START, "executionId": id_, "rootExecutionId": root, "time": start,
               "description": head + last_line}]
    if jobs:
        events.append({"Event": "SparkListenerJobStart", "Job ID": id_,
                       "Properties": {"spark.sql.execution.id": str(id_)}})
    return events + [{"Event": END, "executionId": id_, "time": end}]


def _log(tmp_path, *executions):
    lines = [json.dumps(e) for ex in executions for e in ex]
    (tmp_path / "events").write_text("\n".join(["{\"Event\": \"SparkListenerLogStart\"}", *lines]) + "\n")
    return read_executions(tmp_path)


def test_a_batch_splits_into_delta_state_merge_phases_other_jobs_and_driver_time(tmp_path):
    executions = _log(
        tmp_path,
        _execution(10, 10, 0, 3000, "batch = 2", jobs=False),
        _execution(11, 10, 100, 600, "batch = 2"),  # the pass that computes the batch
        _execution(12, 10, 700, 1300, "batch = 2", jobs=False),  # the append command: its time is the driver's
        _execution(13, 10, 750, 1050, "batch = 2: Compute snapshot for version: 3"),
        _execution(14, 10, 1100, 1200, "batch = 2"),  # the append's write job
        # two MERGEs side by side: their state reconstructions overlap each other
        _execution(15, 10, 1400, 1800, "batch = 2: Compute snapshot for version: 3"),
        _execution(16, 10, 1500, 1900, "batch = 2: Compute snapshot for version: 3"),
        _execution(17, 10, 1900, 2900, "batch = 2 - MERGE operation - scanning files for matches"),
        _execution(20, 20, 5000, 6000, "batch = 0", run="another run"),
    )
    [batch] = split(executions, RUN)
    assert batch == {"batch": 2, "wall_s": 3.0, "delta_state_s": 0.8, "merge_s": 1.0, "other_s": 0.6,
                     "driver_s": 0.6, "delta_states": 3}


def test_an_execution_still_running_when_the_log_ends_is_left_out(tmp_path):
    executions = _log(tmp_path, _execution(1, 1, 0, 500, "batch = 0"),
                      _execution(2, 2, 600, 900, "batch = 1")[:-1])
    assert [b["batch"] for b in split(executions, RUN)] == [0]
