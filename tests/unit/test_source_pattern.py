import re

import pytest

from reconstructor.spark.source import anchored


@pytest.mark.parametrize(
    "pattern, topic, matches",
    [
        ("sensor-.*", "sensor-1", True),
        ("sensor-.*", "old-sensor-1", False),
        ("sensor-(a|b)", "sensor-a-dlq", False),
        ("^sensor-[0-9]+$", "sensor-42", True),
        ("^sensor-[0-9]+$", "sensor-42x", False),
        ("a|b", "ab", False),
        ("a|b", "b", True),
    ],
)
def test_anchored_matches_whole_topic_names_only(pattern, topic, matches):
    assert (re.search(anchored(pattern), topic) is not None) is matches


def test_anchored_rejects_a_pattern_that_does_not_compile():
    with pytest.raises(re.error):
        anchored("sensor-(")
