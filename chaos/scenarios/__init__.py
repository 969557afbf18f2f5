"""Named chaos scenarios: fixed, deterministic reproductions of known bug classes
(``kipcheck chaos --scenario NAME``), each recording what the target did."""

SCENARIOS = ("kafka-17754",)
