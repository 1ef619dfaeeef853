import io

from reconstructor.cli.progress import CatchUpProgress, batch_line


def test_progress_counts_offsets_done_of_offsets_to_do():
    out = io.StringIO()
    p = CatchUpProgress(out, starting='{"t": {"0": 0, "1": 0}}')
    p({"batchId": 0, "sources": [{"startOffset": None, "endOffset": {"t": {"0": 60, "1": 40}},
                                  "latestOffset": {"t": {"0": 400, "1": 50}}}]})
    p({"batchId": 1, "sources": [{"startOffset": {"t": {"0": 60, "1": 40}},
                                  "endOffset": {"t": {"0": 100, "1": 50}},
                                  "latestOffset": {"t": {"0": 400, "1": 50}}}]})
    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith("batch 0: 100/450 offsets ( 22.2%)")
    assert lines[1].startswith("batch 1: 150/450 offsets ( 33.3%)")
    assert "offsets/s" in lines[1] and "left" in lines[1]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_redraws_one_line_on_the_terminal_it_writes_to_by_default(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    p = CatchUpProgress(starting='{"t": {"0": 0}}')  # as replay builds it: stderr, not a given stream
    for batch, end in enumerate((40, 100)):
        p({"batchId": batch, "sources": [{"startOffset": None, "endOffset": {"t": {"0": end}},
                                          "latestOffset": {"t": {"0": 100}}}]})
    out = terminal.getvalue()
    assert "\n" not in out
    assert out.count("\r") == 2
    assert out.startswith("\rbatch 0: 40/100 offsets") and "\rbatch 1: 100/100 offsets" in out


def test_progress_ends_its_redrawn_line_so_that_the_next_line_starts_on_its_own():
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        p = CatchUpProgress(stream)
        p.end_line()  # nothing drawn yet: nothing to end
        p({"batchId": 0, "sources": [{"startOffset": None, "endOffset": {"t": {"0": 10}},
                                      "latestOffset": {"t": {"0": 10}}}]})
        p.end_line()
        p.end_line()  # a second end (a restarted query's) adds no empty line
    assert terminal.getvalue().startswith("\rbatch 0: 10/10 offsets") and terminal.getvalue().endswith("\033[K\n")
    assert pipe.getvalue().startswith("batch 0: 10/10 offsets") and pipe.getvalue().count("\n") == 1


def _batch(rows: int, end: int, latest: int) -> dict:
    return {"batchId": 4, "numInputRows": rows, "durationMs": {"triggerExecution": 33_900},
            "sources": [{"startOffset": {"t": {"0": end - rows}}, "endOffset": {"t": {"0": end}},
                         "latestOffset": {"t": {"0": latest}}}]}


def test_a_run_says_how_many_records_wait_behind_a_batch_and_when_its_cap_held_it_back():
    # Caught up: the plain line.
    assert batch_line(_batch(1_000, 5_000, 5_000), cap=200_000, continuous=True) == "batch 4: 1,000 records in 33.9s"
    # Behind, the batch short of the cap (the records came in while it ran).
    assert batch_line(_batch(1_000, 5_000, 9_000), cap=200_000, continuous=True) == (
        "batch 4: 1,000 records in 33.9s; 4,000 more waiting")
    # Behind and read up to the cap under an interval trigger: the cap may be what holds it back.
    assert batch_line(_batch(199_995, 300_000, 883_600), cap=200_000, continuous=True) == (
        "batch 4: 199,995 records in 33.9s; 583,600 more waiting (the batch read its cap: "
        "--max-offsets-per-trigger 200,000)")
    # A run that ends once caught up splits its backlog by the cap on purpose: no word of it.
    assert batch_line(_batch(199_995, 300_000, 883_600), cap=200_000, continuous=False) == (
        "batch 4: 199,995 records in 33.9s; 583,600 more waiting")
    assert batch_line(_batch(199_995, 300_000, 883_600), cap=None, continuous=True).endswith("583,600 more waiting")
    # No source progress (a no-data batch): the plain line.
    assert batch_line({"batchId": 5, "numInputRows": 0, "durationMs": {"triggerExecution": 100}},
                      cap=200_000, continuous=True) == "batch 5: 0 records in 0.1s"
