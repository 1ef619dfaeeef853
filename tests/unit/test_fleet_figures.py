from tests.benchmarks.fleet_figures import Commit, keeps_up, lag_series, latencies, measured_batches, percentile

TP0, TP1 = ("sensor-0", 0), ("sensor-0", 1)


def test_percentile_interpolates_between_closest_ranks():
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([10, 20], 95) == 19.5
    assert percentile([7], 95) == 7
    assert percentile([], 50) is None


def test_latency_is_the_commit_time_of_the_batch_that_passes_the_offset():
    commits = [Commit(0, 0.0, 10.0, {TP0: 2, TP1: 1}), Commit(1, 30.0, 35.0, {TP0: 5, TP1: 1})]
    deliveries = {TP0: [(0, 1.0), (1, 2.0), (2, 20.0), (4, 25.0), (5, 40.0)], TP1: [(0, 3.0)]}
    lats, missing = latencies(deliveries, commits)
    assert sorted(lats) == [7.0, 8.0, 9.0, 10.0, 15.0]
    assert missing == 1  # offset 5 of TP0: no batch has reached it


def test_latency_counts_only_records_stamped_from_the_warm_up_on():
    commits = [Commit(0, 0.0, 10.0, {TP0: 3})]
    lats, missing = latencies({TP0: [(0, 1.0), (1, 5.0), (2, 6.0)]}, commits, since=5.0)
    assert sorted(lats) == [4.0, 5.0] and missing == 0


def test_latency_of_a_partition_a_later_batch_did_not_read_keeps_its_earlier_end():
    commits = [Commit(0, 0.0, 10.0, {TP0: 2}), Commit(1, 20.0, 25.0, {TP1: 1})]
    lats, missing = latencies({TP0: [(1, 4.0), (2, 12.0)], TP1: [(0, 15.0)]}, commits)
    assert sorted(lats) == [6.0, 10.0] and missing == 1


def test_lag_is_end_offsets_minus_the_last_committed_end_offsets():
    commits = [Commit(0, 0.0, 10.0, {TP0: 5, TP1: 2})]
    highs = [(5.0, {TP0: 6, TP1: 2}), (10.0, {TP0: 8, TP1: 4}), (12.0, {TP0: 9, TP1: 4})]
    assert lag_series(highs, commits) == [(5.0, 8), (10.0, 5), (12.0, 6)]


def test_an_engine_keeps_up_with_quick_batches_and_bounded_lag():
    lag = [(t, 300 + (t % 30) * 10) for t in range(0, 180, 5)]  # a saw-tooth under 2 x 10 x 30
    verdict = keeps_up([8.0, 9.0, 12.0], lag, (60, 180), sessions=10, trigger_s=30)
    assert verdict.keeps_up, verdict.reason


def test_an_engine_with_batches_longer_than_the_interval_falls_behind():
    verdict = keeps_up([31.0, 40.0, 45.0], [(170, 10)], (60, 180), sessions=10, trigger_s=30)
    assert not verdict.keeps_up and "median batch" in verdict.reason


def test_an_engine_whose_lag_grows_past_two_intervals_falls_behind():
    lag = [(t, 20 * t) for t in range(0, 180, 5)]
    verdict = keeps_up([20.0, 25.0], lag, (60, 180), sessions=10, trigger_s=30)
    assert not verdict.keeps_up and "lag" in verdict.reason


def test_no_batch_in_the_window_is_not_keeping_up():
    assert not keeps_up([], [(170, 0)], (60, 180), sessions=10, trigger_s=30).keeps_up


def test_the_batches_measured_are_those_started_in_the_window():
    commits = [Commit(0, 0.0, 70.0, {}), Commit(1, 70.0, 80.0, {}), Commit(2, 80.0, 85.0, {})]
    assert [c.batch for c in measured_batches(commits, (60, 180))] == [1, 2]


def test_a_batch_that_spans_the_whole_window_is_measured():
    commits = [Commit(0, 0.0, 10.0, {}), Commit(1, 10.0, 200.0, {})]
    assert [c.batch for c in measured_batches(commits, (60, 180))] == [1]
