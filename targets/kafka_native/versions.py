"""The Apache Kafka releases the kafka-native target supports, pinned.

Each entry was checked against Maven Central
(https://repo1.maven.org/maven2/org/apache/kafka/kafka_2.13/maven-metadata.xml).
The logging backend is what the release's own tarball ships; the Maven POM of
kafka_2.13 has none:

* 4.x: log4j2 with the SLF4J 1.x binding (``log4j-slf4j-impl``). 4.1.2+ POMs of
  ``kafka-server`` declare log4j-api/core as runtime dependencies (2.25.3 in 4.1.2,
  2.25.4 in 4.2.1 and 4.3.1, 2.25.5 in 4.4.0); 4.0.2's POMs name none, 2.25.3 is the
  version of its tarball.
* 3.9: reload4j 1.2.25 + slf4j-reload4j 1.7.36 (3.9's Log4jController calls the
  log4j 1.x API directly).

Spec versions: an exact version from the table (``4.2.1``) or a release line
(``4.2`` -> newest patch in the table); no version means DEFAULT_VERSION.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaRelease:
    version: str
    logging: str  # "log4j2" or "reload4j"
    logging_version: str
    # --feature NAME=LEVEL passed to StorageTool format.
    format_features: tuple[tuple[str, int], ...] = ()
    # Finalized feature levels the started broker must advertise at least
    # (checked after start unless a spec option overrides that feature).
    min_features: tuple[tuple[str, int], ...] = ()
    notes: str = ""

    @property
    def line(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def maven_properties(self) -> dict[str, str]:
        """-D properties for targets/kafka_native/pom.xml."""
        props = {"kafka.version": self.version}
        if self.logging == "log4j2":
            props["log4j.version"] = self.logging_version
        elif self.logging == "reload4j":
            props["reload4j.version"] = self.logging_version
        else:  # pragma: no cover - table error
            raise ValueError(f"unknown logging backend {self.logging!r}")
        return props

    @property
    def logging_config_name(self) -> str:
        """Logging config file in this package for the release's backend."""
        return "log4j2.properties" if self.logging == "log4j2" else "log4j.properties"

    @property
    def logging_system_property(self) -> str:
        return "log4j2.configurationFile" if self.logging == "log4j2" else "log4j.configuration"


_TV2 = (("transaction.version", 2),)

RELEASES: dict[str, KafkaRelease] = {
    r.version: r
    for r in (
        KafkaRelease(
            "3.9.2",
            "reload4j",
            "1.2.25",
            notes="last 3.x; no share groups; transaction.version stays at the release default "
            "(TV_2 was not production-ready in 3.9)",
        ),
        KafkaRelease(
            "4.0.2",
            "log4j2",
            "2.25.3",
            format_features=_TV2,
            min_features=_TV2,
            notes="share groups are early access (v0 RPCs, unusable with 4.1+ clients): not enabled",
        ),
        KafkaRelease(
            "4.1.2",
            "log4j2",
            "2.25.3",
            format_features=_TV2 + (("share.version", 1),),
            min_features=_TV2 + (("share.version", 1),),
            notes="share groups preview: share.version=1 must be finalized explicitly",
        ),
        KafkaRelease(
            "4.2.1",
            "log4j2",
            "2.25.4",
            format_features=_TV2,
            min_features=_TV2 + (("share.version", 1),),
            notes="share groups GA, share.version=1 on by default",
        ),
        KafkaRelease(
            "4.3.1",
            "log4j2",
            "2.25.4",
            format_features=_TV2,
            min_features=_TV2 + (("share.version", 1),),
        ),
        KafkaRelease(
            "4.4.0",
            "log4j2",
            "2.25.5",
            format_features=_TV2,
            min_features=_TV2 + (("share.version", 1),),
        ),
    )
}

DEFAULT_VERSION = "4.4.0"
"""Newest 4.x release on Maven Central when this table was last updated."""


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def supported_versions() -> list[str]:
    return sorted(RELEASES, key=_key)


def resolve_release(version: str | None) -> KafkaRelease:
    """Map a spec version (None, a line like '4.2', or an exact '4.2.1') to a release."""
    if version is None or version in ("", "default", "latest"):
        return RELEASES[DEFAULT_VERSION]
    version = version.strip()
    if version in RELEASES:
        return RELEASES[version]
    candidates = [v for v in RELEASES if v.startswith(version + ".")] if version.count(".") == 1 else []
    if candidates:
        return RELEASES[max(candidates, key=_key)]
    raise ValueError(
        f"kafka-native: unsupported Kafka version {version!r}; supported: "
        f"{', '.join(supported_versions())} (or a line such as "
        f"{', '.join(sorted({r.line for r in RELEASES.values()}, key=_key))}); "
        f"default {DEFAULT_VERSION}"
    )
