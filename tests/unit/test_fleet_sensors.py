"""The demo fleet's sensors answering resync requests (``workbench.resync_responder.FleetSensors``):
the snapshot is the sensor's own table at its session's next seq, once per request burst."""

from __future__ import annotations

import random

from workbench.fleet import FleetSpec, expected_tables, hash_partition, inject, plan_fleet
from workbench.resync_responder import FleetSensors

SPEC = FleetSpec(sensors=1, sessions_per_sensor=2, rows=6, updates=12, seed=11)


def test_a_request_is_answered_with_the_sensors_table_at_its_next_seq_whatever_kafka_lost():
    planned = [p for p in plan_fleet(SPEC) if p.message["type"] != "end"]
    sent, culprit = inject(planned, "gap", random.Random(0))
    sensors = FleetSensors.of(planned, sent, {"sensor-0": 3})
    session = culprit.session
    answer = sensors.snapshot(session)
    own = [p for p in planned if p.session == session]
    assert answer.message["type"] == "snapshot" and answer.message["seq"] == own[-1].message["seq"] + 1
    assert {r["id"]: r["values"] for r in answer.message["rows"]} == expected_tables(own)[("sensor-0", session)]
    assert sensors.sensors[session].partition == hash_partition(session, 3)
    assert sensors.snapshot(session) is None  # a second request: the same snapshot answers it
    end = sensors.end(session)
    assert end.message == {"session": session, "seq": answer.message["seq"] + 1, "type": "end",
                           "ts": answer.message["ts"]}
    assert sensors.snapshot(session) is None  # ended: nothing more
    assert sensors.snapshot("no-such-session") is None
