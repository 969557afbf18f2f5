"""Named chaos scenarios: fixed, deterministic reproductions of known bug classes
(``kipcheck chaos --scenario NAME``), each recording what the target did."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCENARIOS = ("kafka-17754", "kafka-19632")


@dataclass(frozen=True)
class ScenarioResult:
    summary: str  # one line: what the target did
    verdict: str
    explanation: str
    wrong: bool  # the bug showed (exit 1)
    known: bool = True  # False: the run could not tell (exit 3)


def run_named(name: str, target_spec: str, out_dir: Path, transaction_version: str | int = "auto") -> ScenarioResult:
    """Run scenario ``name`` (one of SCENARIOS) on a fresh target; it writes ``scenario.json``."""
    if name == "kafka-19632":
        from chaos.scenarios import kafka_19632  # Kafka clients: loaded only when a scenario runs (CLI start-up)
        o = kafka_19632.run_spec(target_spec, out_dir)
        return ScenarioResult(o.summary(), o.verdict, o.explanation, o.wrong, o.known)
    from chaos.scenarios import kafka_17754  # Kafka clients: loaded only when a scenario runs (CLI start-up)
    res = kafka_17754.run_spec(target_spec, out_dir, transaction_version=transaction_version)
    summary = (f"target={res.target} transaction_version={res.transaction_version} end_txn=v{res.end_txn_version} "
               f"late_end_txn={res.late_end_txn_error} abort2={res.abort2_error or 'NONE'} visible={res.visible}")
    return ScenarioResult(summary, res.verdict, res.explanation, res.wrong)
