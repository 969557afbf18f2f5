"""Kafka's placement hashes: Java's String.hashCode and Kafka's Utils.abs.

Coordinator placement (`__consumer_offsets`, `__transaction_state`, `__share_group_state`
partitions) is `Utils.abs(key.hashCode()) % partitions`; the reference computes it the same
way so its placement matches a real cluster's for the same partition counts.
"""

from __future__ import annotations


def java_string_hash(value: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for_key(key: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hash(key)) % num_partitions
