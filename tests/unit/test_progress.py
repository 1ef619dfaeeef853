import io

from reconstructor.progress import CatchUpProgress


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
