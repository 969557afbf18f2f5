"""The fencing rule (``fenced_ok``), shared by every fencing check: the chaos copier's
history checker (``checkers/fencing.py``), the trace checker (``replay/entity_replay.py``,
TXN.FENCED_SUCCEEDED) and KIP-447's stale-generation cases.

Holders of a transactional id (or of a group's offsets) are granted in turn; once a newer
holder's grant is known, an operation *invoked* later by a holder it supersedes must not
succeed. One invoked before the grant may (its EndTxn can reach the coordinator first and
commit, KIP-98.TXN.005). Who supersedes whom is the caller's table: producer (id, epoch)
pairs (``epoch_supersedes``, KIP-98 and KIP-890's EndTxn v5+ bump) or holders in a known
order (``rank_supersedes``: copier incarnations, group generations). No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence


@dataclass(frozen=True)
class Grant:
    holder: Hashable
    at: int
    """When the grant is known to have happened (response time / a later invoke)."""


@dataclass(frozen=True)
class Use:
    holder: Hashable
    at: int
    """When the operation was invoked (request time)."""
    ok: bool
    ref: Any = None


Supersedes = Callable[[Hashable, Hashable, Sequence[Hashable]], bool]
"""(current holder, using holder, holders granted before current) -> is the user fenced?"""


def fenced_ok(steps: Iterable[Grant | Use], supersedes: Supersedes) -> list[tuple[Use, Grant]]:
    """Uses that succeeded although invoked after a grant that fences their holder.

    ``steps`` in observation order; a step that both uses and grants (EndTxn v5+) comes
    as its Use, then its Grant."""
    out: list[tuple[Use, Grant]] = []
    current: Grant | None = None
    before: list[Hashable] = []
    for step in steps:
        if isinstance(step, Grant):
            if current is not None:
                before.append(current.holder)
            current = step
        elif step.ok and current is not None and step.at > current.at \
                and supersedes(current.holder, step.holder, before):
            out.append((step, current))
    return out


def epoch_supersedes(current: Hashable, holder: Hashable, before: Sequence[Hashable]) -> bool:
    """(producer id, epoch) holders: a lower epoch of the current id, or an id granted earlier."""
    (cur_pid, cur_epoch), (pid, epoch) = current, holder
    if pid == cur_pid:
        return epoch < cur_epoch
    return any(p == pid for p, _ in before)


def rank_supersedes(rank: Mapping[Hashable, int]) -> Supersedes:
    """Holders in a known order (incarnations, generations): any older one is fenced."""
    return lambda current, holder, before: holder in rank and rank[holder] < rank[current]
