"""Spark's bucket function, vectorized, and the stable int64 keys kipcheck buckets by.

A file Spark is to read as bucket i of a bucketed table must hold exactly the rows whose
key Spark itself puts in bucket i: ``pmod(hash(key), N)`` with Spark's Murmur3 x86_32
(seed 42) of the int64 key (`org.apache.spark.sql.catalyst.expressions.Murmur3Hash`,
`HashPartitioning`). The keys are hashes of what identifies the row's group (a connection,
a check entity), never a trace-specific number, so the same group of two runs lands in the
same bucket.
"""

from __future__ import annotations

import hashlib

import numpy as np

SPARK_HASH_SEED = 42


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    k1 = _rotl(k1 * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def spark_hash_long(values: np.ndarray) -> np.ndarray:
    """Spark's `hash(bigint)` (Murmur3_x86_32.hashLong, seed 42) of int64 values, as int32."""
    v = values.astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(np.full(v.shape, SPARK_HASH_SEED, np.uint32), (v & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        h = _mix(h, (v >> np.uint64(32)).astype(np.uint32))
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def spark_bucket(values: np.ndarray, buckets: int) -> np.ndarray:
    """pmod(hash(value), buckets): the bucket Spark assigns an int64 bucket column value."""
    return np.mod(spark_hash_long(values).astype(np.int64), buckets)


def null_bucket(buckets: int) -> int:
    """Spark hashes a null key to the seed."""
    return SPARK_HASH_SEED % buckets


def stable_key(*parts: object) -> int:
    """An int64 key of the parts (blake2b of their text, NUL-separated): the same in every run."""
    digest = hashlib.blake2b("\0".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)
