"""The thin Spark shell around the pure core: session builder, Kafka source, stateful step, sinks."""
