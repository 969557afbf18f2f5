"""The registers, each with its one loader (floor 1: imports nothing first-party but
`reference_impl`): the requirement catalog (`catalog`, `catalog/*.yaml`), the divergence
register (`divergences`, `divergences.yaml`: KIP text vs Kafka releases) and the deviation
register (`deviations`, `deviations/*.yaml`: known failures of one target)."""
