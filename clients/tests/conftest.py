"""The reference wire tests' fixtures (reference clusters of one and three nodes and a client
of each), shared with the wire tests that moved up here because they use the clients helpers."""

from reference_impl.tests.conftest import client, client3, cluster, cluster3  # noqa: F401 - fixtures, found by name
