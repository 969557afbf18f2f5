"""KIP-1289 ShareGroupMetadata: an immutable snapshot of a share consumer's group identity
(group id, member id, member epoch) that a transactional producer hands to the broker with
the acknowledgements it stages. The KIP's summary also lists an optional groupInstanceId,
but its class definition does not, and share groups have no static membership: left out."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShareGroupMetadata:
    group_id: str
    member_id: str
    member_epoch: int
