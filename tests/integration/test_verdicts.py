"""Verdicts on the real stack: the same line and exit code whatever the micro-batch split, and for
any session id (spaces, letters beyond ASCII, control characters)."""

from __future__ import annotations

import pytest

# The CLI in this process, over the suite's SparkSession: the process boundary is not their subject.
from tests.support.cli import cli_in_process as cli
from tests.support.kafka import create_topics, send, snapshot, update

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("spark")]


def run_cli(bootstrap: str, pattern: str, tmp_path, name: str, *extra: str):
    return cli("run", "--bootstrap-servers", bootstrap, "--topic-pattern", pattern,
               "--output", str(tmp_path / name / "out"), "--checkpoint", str(tmp_path / name / "chk"),
               "--compact-every", "off", *extra)


def test_two_swapped_updates_give_the_same_line_in_one_batch_and_in_one_record_batches(stack, run_id, tmp_path):
    bootstrap, topic = stack.bootstrap_servers(), f"swap{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    # Offsets 0..2: the snapshot (seq 150), then seq 152 before seq 151.
    send(bootstrap, topic, "s-1", [snapshot(150), update(152, "z"), update(151, "y")])
    whole = run_cli(bootstrap, topic, tmp_path, "whole")
    one_by_one = run_cli(bootstrap, topic, tmp_path, "split", "--max-offsets-per-trigger", "1")
    line = (f"reconstructor: INTEGRITY VIOLATION GAP topic={topic} partition=0 offset=1 session=s-1 "
            "expected_seq=151 found_seq=152")
    for ran in (whole, one_by_one):
        assert ran.returncode == 3, ran.stderr[-3000:]
        assert ran.stderr.strip().splitlines()[-1].startswith(line)


@pytest.mark.parametrize("session, printed", [
    ("cabin 7 ünïcode", "cabin 7 ünïcode"),
    ("line\nbreak\tand\x1bescape", "line\\nbreak\\tand\\x1bescape"),
])
def test_any_session_id_gives_exit_3_and_one_escaped_line(stack, run_id, tmp_path, session, printed):
    bootstrap, topic = stack.bootstrap_servers(), f"ids{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    send(bootstrap, topic, session, [snapshot(0), update(1, "y"), update(3, "z")])
    ran = run_cli(bootstrap, topic, tmp_path, "ids")
    assert ran.returncode == 3, ran.stderr[-3000:]
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith(f"reconstructor: INTEGRITY VIOLATION GAP topic={topic} partition=0 offset=2 "
                           f"session={printed} expected_seq=2 found_seq=3")


def test_a_seq_at_the_largest_long_followed_by_another_message_is_a_duplicate_not_a_crash(stack, run_id, tmp_path):
    bootstrap, topic = stack.bootstrap_servers(), f"max{run_id}-sensor-0"
    create_topics(bootstrap, {topic: 1})
    top = 2**63 - 1
    send(bootstrap, topic, "s-1", [snapshot(top - 1), update(top, "y"), update(top, "z")])
    ran = run_cli(bootstrap, topic, tmp_path, "max")
    assert ran.returncode == 3, ran.stderr[-3000:]
    assert ran.stderr.strip().splitlines()[-1].startswith(
        f"reconstructor: INTEGRITY VIOLATION DUPLICATE topic={topic} partition=0 offset=2 session=s-1 "
        f"expected_seq={2**63} found_seq={top}")
