"""Producer id allocation (pure model).

In Kafka 4.x (KRaft) the controller hands out producer ids in blocks
(AllocateProducerIds, block size 1000) and each broker's ProducerIdManager serves
ids from its current block. The reference cluster shares one model state between
its nodes, so one manager serves every node; `block_size` still records where a
block boundary would be, and `next_block_start` is the controller's durable
"next producer id" (what a restarted cluster would continue from).

Non-transactional InitProducerId (idempotent producers) gets a fresh id with epoch 0;
transactional ids get theirs through the transaction coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PRODUCER_ID = (1 << 63) - 1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdManager block size


class ProducerIdsExhausted(Exception):
    """No producer id left (Kafka answers UNKNOWN_SERVER_ERROR / the request fails)."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


class ProducerIdManager:
    """Allocates producer ids: blocks from the controller, ids from the current block."""

    def __init__(self, first_producer_id: int = 0, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if first_producer_id < 0 or block_size < 1:
            raise ValueError("producer ids start at 0 or above and blocks hold at least one id")
        self.block_size = block_size
        self.next_block_start = first_producer_id  # the controller's durable counter
        self.blocks: list[ProducerIdBlock] = []
        self._current: ProducerIdBlock | None = None
        self._next_id = -1

    def allocate_block(self, broker_id: int = -1) -> ProducerIdBlock:
        """The controller side (AllocateProducerIds): the next block of ids."""
        first = self.next_block_start
        if first > MAX_PRODUCER_ID - self.block_size + 1:
            raise ProducerIdsExhausted("producer ids are exhausted")
        block = ProducerIdBlock(broker_id, first, self.block_size)
        self.next_block_start = first + self.block_size
        self.blocks.append(block)
        return block

    def generate_producer_id(self) -> int:
        if self._current is None or self._next_id > self._current.last_producer_id:
            self._current = self.allocate_block()
            self._next_id = self._current.first_producer_id
        pid = self._next_id
        self._next_id += 1
        return pid

    # Shorter alias used by handlers.
    generate = generate_producer_id

    @property
    def issued(self) -> int:
        """How many producer ids have been handed out so far."""
        if self._current is None:
            return 0
        return (len(self.blocks) - 1) * self.block_size + (self._next_id - self._current.first_producer_id)


__all__ = ["MAX_PRODUCER_ID", "PRODUCER_ID_BLOCK_SIZE", "ProducerIdBlock", "ProducerIdManager", "ProducerIdsExhausted"]
