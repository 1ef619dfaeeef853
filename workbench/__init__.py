"""The local workbench: what runs the product on one machine, never part of the product itself.

A single-node Kafka broker and an S3 endpoint on 127.0.0.1 (``localstack``, ``s3server``), a Spark
standalone cluster on loopback (``standalone``), the stack smoke pipeline (``smoke``), and the demo
sensor fleet with its producer (``fleet``, ``producer``), and its commands (``python -m workbench
demo|produce``).  Tests, benchmarks and ``make up``/``make demo`` use it.  It lives in the checkout,
not in the wheel, and nothing in the product imports it: a deployment needs none of it.
"""
