"""Target factory: spec text -> Target instance (providers imported lazily)."""

from __future__ import annotations

from targets.target import Target, TargetSpec, check_target_spec, parse_target_spec


def create_target(spec: TargetSpec | str) -> Target:
    """The provider of `spec`, constructed (nothing started): option names and version are
    checked first (targets.target.KIND_OPTIONS), then the provider checks the values."""
    if isinstance(spec, str):
        spec = parse_target_spec(spec)
    check_target_spec(spec)
    if spec.kind == "reference":
        from targets.reference_target import ReferenceTarget  # per kind, on demand: the broker would add 0.5 s to CLI start-up

        return ReferenceTarget(spec)
    if spec.kind == "kafka-native":
        from targets.kafka_native.provider import KafkaNativeTarget  # per kind, on demand (see the reference line)

        return KafkaNativeTarget(spec)
    if spec.kind == "librdkafka-mock":
        from targets.librdkafka_mock import LibrdkafkaMockTarget  # per kind, on demand (see the reference line)

        return LibrdkafkaMockTarget(spec)
    if spec.kind == "kfake":
        from targets.kfake.provider import KfakeTarget  # per kind, on demand (see the reference line)

        return KfakeTarget(spec)
    if spec.kind == "tansu":
        from targets.tansu.provider import TansuTarget  # per kind, on demand (see the reference line)

        return TansuTarget(spec)
    if spec.kind == "testcontainers":
        from targets.testcontainers_target import TestcontainersTarget  # per kind, on demand (see the reference line)

        return TestcontainersTarget(spec)
    if spec.kind == "external":
        from targets.external import ExternalTarget  # per kind, on demand (see the reference line)

        return ExternalTarget(spec)
    raise ValueError(f"unknown target kind {spec.kind!r}")
