"""franz-go's `pkg/kgo` integration tests as a client suite (client_suites/runner.py)."""
