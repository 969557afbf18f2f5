"""Traffic capture, replay and trace verification (capture proxy, Parquet traces, Spark jobs).

Not built yet: this package is reserved for the traffic-replay issue.
"""
