"""Target specs: targets.target.parse_target_spec for every kind, and the providers' own option checks."""

from __future__ import annotations

import pytest

from targets.target import (KIND_OPTIONS, KINDS, TargetSpec, check_target_spec, parse_target_spec,
                            split_external_spec)
from targets.factory import create_target
from targets.testcontainers_target import DEFAULT_IMAGE, resolve_image


@pytest.fixture(autouse=True)
def _no_external_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIPCHECK_EXTERNAL_CONFIG", raising=False)
    monkeypatch.delenv("KIPCHECK_EXTERNAL_TIMEOUT", raising=False)


@pytest.mark.parametrize(
    "text, kind, version, nodes, options",
    [
        ("reference", "reference", None, 1, ()),
        ("reference:nodes=3", "reference", None, 3, ()),
        ("reference:nodes=3:port=19092", "reference", None, 3, (("port", "19092"),)),
        ("  reference  ", "reference", None, 1, ()),
        ("kafka-native", "kafka-native", None, 1, ()),
        ("kafka-native:4.2.1", "kafka-native", "4.2.1", 1, ()),
        ("kafka-native:4.2.1:nodes=3", "kafka-native", "4.2.1", 3, ()),
        ("kafka-native:4.2:nodes=3:feature.transaction.version=1", "kafka-native", "4.2", 3,
         (("feature.transaction.version", "1"),)),
        ("librdkafka-mock", "librdkafka-mock", None, 1, ()),
        ("librdkafka-mock:nodes=3", "librdkafka-mock", None, 3, ()),
        ("librdkafka-mock:nodes=2:mode=config:rtt=5", "librdkafka-mock", None, 2, (("mode", "config"), ("rtt", "5"))),
        ("testcontainers", "testcontainers", None, 1, ()),
        ("testcontainers:4.2.1", "testcontainers", "4.2.1", 1, ()),
        ("testcontainers:apache/kafka:4.2.1", "testcontainers", "apache/kafka:4.2.1", 1, ()),
        ("testcontainers:apache/kafka-native:4.1.0:timeout=60", "testcontainers", "apache/kafka-native:4.1.0", 1,
         (("timeout", "60"),)),
        ("testcontainers:apache/kafka:4.2.1:KAFKA_NUM_PARTITIONS=3", "testcontainers", "apache/kafka:4.2.1", 1,
         (("KAFKA_NUM_PARTITIONS", "3"),)),
        ("external:localhost:9092", "external", None, 1, (("bootstrap", "localhost:9092"),)),
        ("external:h1:9092,h2:9093", "external", None, 1, (("bootstrap", "h1:9092,h2:9093"),)),
        ("external:h1:9092:config=/etc/k.properties", "external", None, 1,
         (("bootstrap", "h1:9092:config=/etc/k.properties"),)),
    ],
)
def test_parse_valid_specs(text: str, kind: str, version: str | None, nodes: int, options: tuple) -> None:
    spec = parse_target_spec(text)
    assert (spec.kind, spec.version, spec.nodes, spec.options) == (kind, version, nodes, options)
    assert spec.raw == text.strip()


def test_every_kind_is_parsed_and_has_a_provider() -> None:
    examples = {
        "reference": "reference",
        "kafka-native": "kafka-native:4.2.1",
        "librdkafka-mock": "librdkafka-mock:nodes=2",
        "kfake": "kfake:nodes=2",
        "tansu": "tansu:storage=sqlite",
        "testcontainers": "testcontainers",
        "external": "external:127.0.0.1:9092",
    }
    assert set(examples) == set(KINDS)
    for kind, text in examples.items():
        spec = parse_target_spec(text)
        assert spec.kind == kind
        if kind == "kafka-native":
            continue  # its provider belongs to another module; constructing it may resolve jars
        target = create_target(spec)
        assert target.kind == kind
        assert target.spec is spec


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty target spec"),
        ("   ", "empty target spec"),
        ("kafka", "unknown target kind 'kafka'"),
        ("Reference", "unknown target kind 'Reference'"),
        ("mock:nodes=3", "expected one of reference, kafka-native, librdkafka-mock, kfake, tansu, testcontainers, external"),
        ("reference:nodes=0", "nodes must be a positive integer"),
        ("reference:nodes=-1", "nodes must be a positive integer"),
        ("reference:nodes=three", "nodes must be a positive integer"),
        ("kafka-native:4.2.1:4.3.1", "unexpected '4.3.1'"),
        ("external", "external target needs a bootstrap"),
        ("external:", "external target needs a bootstrap"),
    ],
)
def test_parse_bad_specs(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_target_spec(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "text, message",
    [
        # issue 24: every kind refuses an option it does not know, naming the ones it does
        ("reference:foo=bar", "unknown option(s) foo for reference in 'reference:foo=bar'; known: nodes, port,"),
        ("reference:node=3", "unknown option(s) node for reference"),
        ("reference:4.0", "reference takes no version ('4.0')"),
        ("kafka-native:4.4:transaction.version=1", "known: nodes, heap,"),
        ("kafka-native:9.9", "kafka-native: unsupported Kafka version '9.9'; supported: 3.9.2"),
        ("librdkafka-mock:foo=1", "unknown option(s) foo for librdkafka-mock"),
        ("librdkafka-mock:2.16.0", "librdkafka-mock takes no version ('2.16.0')"),
        ("kfake:9.9", "kfake: unknown version '9.9'"),
        ("kfake:colour=blue", "known: nodes, timeout, partitions, broker.<name>"),
        ("tansu:0.5.0", "tansu: unknown version '0.5.0'; this kipcheck builds Tansu 0.6.0"),
        ("tansu:engine=sqlite", "unknown option(s) engine for tansu"),
        ("testcontainers:4.4.0:flavour=x", "unknown option(s) flavour for testcontainers"),
        ("external:h:9092:bogus=1", "unknown option(s) bogus for external"),
        ("external:h:9092:nodes=3", "unknown option(s) nodes for external"),
    ],
)
def test_unknown_options_and_versions_are_refused(text: str, message: str) -> None:
    spec = parse_target_spec(text)  # the syntax is fine
    for check in (check_target_spec, create_target):
        with pytest.raises(ValueError) as info:
            check(spec)
        assert message in str(info.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("librdkafka-mock:foo=1", "unknown option(s) foo"),
        ("librdkafka-mock:2.16.0", "takes no version"),
        ("librdkafka-mock:mode=fast", "mode must be one of auto, api, config"),
        ("librdkafka-mock:rtt=slow", "rtt must be an integer"),
        ("librdkafka-mock:rtt=-5", "rtt must be >= 0"),
        ("testcontainers:apache/kafka:4.2.1:flavour=x", "unknown option(s) flavour"),
        ("testcontainers:timeout=soon", "timeout must be seconds"),
        ("external:kafka.example.com", "expected HOST:PORT"),
        ("external:h:9092:bogus=1", "unknown option(s) bogus"),
        ("external:h:9092:timeout=abc", "timeout must be a number of seconds"),
        ("external:h:9092:timeout=0", "timeout must be positive"),
        ("external:h:9092:probe=telepathy", "probe must be one of auto, raw, librdkafka"),
        ("external:h:9092:config=x.properties:stray", "put key=value options last"),
        ("reference:port=abc", "port must be a number"),
        ("reference:port=70000", "port must be a number in 0..65535"),
        ("testcontainers:timeout=-1", "timeout must be a positive number of seconds"),
        ("external:h:9092:timeout=inf", "timeout must be positive"),
    ],
)
def test_provider_rejects_bad_options(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        create_target(text)
    assert message in str(info.value)


def test_every_kind_lists_its_options_in_one_table() -> None:
    assert set(KIND_OPTIONS) == set(KINDS)
    assert KIND_OPTIONS["kafka-native"].known("broker.log.retention.ms") and not KIND_OPTIONS["kafka-native"].known("broker.")
    assert KIND_OPTIONS["testcontainers"].known("KAFKA_NUM_PARTITIONS")


def test_label_is_filesystem_safe() -> None:
    spec = parse_target_spec("external:h1:9092,h2:9093:config=/etc/k.properties")
    assert "/" not in spec.label and "," not in spec.label and ":" not in spec.label
    assert parse_target_spec("reference:nodes=3").label == "reference_nodes=3"
    assert TargetSpec("reference").label == "reference"


def test_option_lookup() -> None:
    spec = parse_target_spec("librdkafka-mock:nodes=3:mode=config")
    assert spec.option("mode") == "config"
    assert spec.option("rtt") is None
    assert spec.option("rtt", "0") == "0"


def test_external_spec_options_split_from_bootstrap() -> None:
    assert split_external_spec("h1:9092") == ("h1:9092", {})
    assert split_external_spec("h1:9092,h2:9093:config=/x/y.properties:timeout=3") == (
        "h1:9092,h2:9093",
        {"config": "/x/y.properties", "timeout": "3"},
    )
    assert split_external_spec("[::1]:9092:probe=raw") == ("[::1]:9092", {"probe": "raw"})
    target = create_target("external:h1:9092,h2:9093:timeout=2.5:version=vendor-1.2")
    assert target.bootstrap_servers == "h1:9092,h2:9093"
    assert target.timeout == 2.5
    assert target.version == "vendor-1.2"


def test_testcontainers_image_resolution() -> None:
    assert DEFAULT_IMAGE.startswith("apache/kafka:4.")
    assert resolve_image(None) == DEFAULT_IMAGE
    assert resolve_image("4.2.1") == "apache/kafka:4.2.1"
    assert resolve_image("apache/kafka-native:4.1.0") == "apache/kafka-native:4.1.0"
    assert resolve_image("confluentinc/cp-kafka:7.6.0") == "confluentinc/cp-kafka:7.6.0"
    assert create_target("testcontainers").version == DEFAULT_IMAGE
    assert create_target("testcontainers:4.3.1").version == "apache/kafka:4.3.1"
