import io

from reconstructor.cli.progress import CatchUpProgress


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
