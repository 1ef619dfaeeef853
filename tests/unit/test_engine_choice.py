"""Which engine a query runs when ``--engine`` is given or not (``spark.engines.engine_for``)."""

from __future__ import annotations

import itertools

import pytest

from reconstructor.settings import StatefulEngine, load
from reconstructor.spark.engines import chosen, engine_for

ENGINES = (None, StatefulEngine.PYTHON, StatefulEngine.JVM)


@pytest.mark.parametrize(("asked", "written", "jar_loaded"), list(itertools.product(ENGINES, ENGINES, (False, True))))
def test_the_flag_wins_then_the_checkpoint_then_the_jar(asked, written, jar_loaded):
    engine = engine_for(asked, written, jar_loaded)
    if asked is not None:
        assert engine == asked  # a mismatch with the checkpoint is refused later, with its way over
    elif written is not None:
        assert engine == written  # an existing checkpoint never starts failing for want of the flag
    else:
        assert engine == (StatefulEngine.JVM if jar_loaded else StatefulEngine.PYTHON)


def test_the_engine_is_unset_unless_named_and_a_query_is_never_built_on_an_unchosen_one():
    assert load(None, env={}).engine is None
    assert load(None, env={"RECON_ENGINE": "jvm"}).engine == StatefulEngine.JVM
    with pytest.raises(ValueError, match="with_engine"):
        chosen(None)
