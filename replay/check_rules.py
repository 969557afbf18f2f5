"""The rule catalogue of `kipcheck check`: id, requirement ids, what a violation means.

Rule ids are stable (they key the violations table and the summary); requirement ids come
from registers/catalog/*.yaml. `ENGINE` says which part of the job decides the rule:
"row" rules are DataFrame comparisons (Spark) / loops (pure); "replay" rules come from the
per-entity state machines in replay.entity_replay. Share-partition rules take their
requirement ids from rules.share, the one place both checkers read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rules.share import RULE_REQUIREMENTS as SHARE_RULE_REQUIREMENTS


@dataclass(frozen=True)
class Rule:
    id: str
    requirements: tuple[str, ...]
    entity: str  # what the rule is evaluated per
    engine: str  # "row" | "replay"
    flags: str


RULES: tuple[Rule, ...] = (
    Rule("TXN.EPOCH_REGRESSED", ("KIP-98.INIT.001", "KIP-98.FENCE.001"), "transactional id", "replay",
         "a coordinator granted (InitProducerId, EndTxn v5+) a producer epoch not above the last one "
         "granted to the same producer id"),
    Rule("TXN.FENCED_SUCCEEDED", ("KIP-98.FENCE.002", "KIP-98.FENCE.003", "KIP-98.TXNOFF.002", "KIP-98.ENDTXN.003"),
         "transactional id", "replay",
         "a request sent after a newer epoch (or producer id) was granted for the transactional id, "
         "carrying the older one, got a success response"),
    Rule("FETCH.BEYOND_LSO", ("KIP-98.LSO.002", "KIP-98.FETCH.003"), "fetch partition", "row",
         "a read_committed Fetch returned a record batch reaching the last stable offset of the same response"),
    Rule("FETCH.ABORTED_UNLISTED", ("KIP-98.TXN.003", "KIP-98.FETCH.002"), "fetch partition", "row",
         "a read_committed Fetch returned data of a transaction the trace shows aborted, without an "
         "aborted_transactions entry (same producer id, first offset <= batch) that lets the client drop it"),
    Rule("TXN.OFFSETS_BEFORE_MARKER", ("KIP-98.TXNOFF.001", "KIP-98.TXN.002", "KIP-447.TXN.001"), "group", "replay",
         "OffsetFetch returned a transactional offset before its transaction's EndTxn(commit) was sent, "
         "or one whose transaction aborted"),
    Rule("SHARE.DOUBLE_ACQUIRE", SHARE_RULE_REQUIREMENTS["SHARE.DOUBLE_ACQUIRE"], "share-partition", "replay",
         "a record was acquired by a member while another member held it under an unexpired acquisition lock"),
    Rule("SHARE.DELIVERY_COUNT", SHARE_RULE_REQUIREMENTS["SHARE.DELIVERY_COUNT"],
         "share-partition", "replay",
         "an acquired record's delivery count exceeds the delivery limit or is below its previous delivery count"),
    Rule("SHARE.REDELIVERED_FINAL", SHARE_RULE_REQUIREMENTS["SHARE.REDELIVERED_FINAL"], "share-partition", "replay",
         "a record was acquired again after an accepted ACCEPT or REJECT acknowledgement"),
    Rule("SHARE.ACK_NOT_HELD", SHARE_RULE_REQUIREMENTS["SHARE.ACK_NOT_HELD"], "share-partition", "replay",
         "an acknowledgement succeeded for records the member did not hold (acquired by another member, "
         "already acknowledged, or its lock had certainly expired)"),
    Rule("SHARE.SPSO_REGRESSED", SHARE_RULE_REQUIREMENTS["SHARE.SPSO_REGRESSED"], "share-partition", "replay",
         "a reported share-partition start offset (DescribeShareGroupOffsets) is below an earlier report"),
    Rule("SHARE.SESSION_EPOCH", ("KIP-932.SESSION.001", "KIP-932.SESSION.002", "KIP-932.SESSION.004",
                                 "KIP-932.SESSION.005", "KIP-932.SESSION.009", "KIP-932.SESSION.010",
                                 "KIP-932.SESSION.014"), "share session", "replay",
         "a ShareFetch/ShareAcknowledge answer differs from the share-session epoch table (reference "
         "ShareSessionCache replayed per group, member and broker)"),
)

BY_ID = {r.id: r for r in RULES}


def requirements_of(rule_id: str) -> str:
    return ",".join(BY_ID[rule_id].requirements)
