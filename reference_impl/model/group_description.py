"""What ConsumerGroupDescribe (KIP-848) and ShareGroupDescribe (KIP-932) say about one group:
the two RPCs share every group-level field; only the member entries differ."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class GroupDescription(Generic[M]):
    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[M, ...] = ()
