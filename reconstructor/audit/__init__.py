"""The tables at rest, audited and looked back on: no Spark, no JVM.

``fold`` replays ``row_changes`` into each session's table; ``checks`` holds the tables to each
other (``reconstructor verify``); ``delta_tables`` is the thin reader over delta-rs that feeds them
Arrow batches, an ``hour`` partition at a time.
"""
