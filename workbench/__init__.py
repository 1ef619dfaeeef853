"""The local workbench: what runs the product on one machine, never part of the product itself.

A single-node Kafka broker and an S3 endpoint on 127.0.0.1 (``localstack``, ``s3server``), a Spark
standalone cluster on loopback (``standalone``), the stack smoke pipeline (``smoke``), and the demo
sensor fleet with its producer (``fleet``, ``producer``).  Tests, benchmarks, ``make up``/``make
demo`` and the CLI's ``demo``/``produce`` commands use it.  Nothing in the product (the pipeline,
the Spark shell, the core, the jobs) imports it: a deployment needs none of it.
"""
