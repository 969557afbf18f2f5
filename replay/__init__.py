"""Traffic capture and traces: a Kafka-protocol-aware capture proxy writing Parquet traces
(`kipcheck record`), and their reader. Replay and the Spark trace checks come next."""
