"""Is the target still answering? (issue 24, item 5)

A broker that dies mid-run (a panic on one request, an OOM kill) used to be read as dozens
of broken requirements: every later test failed on a closed connection, charged to its own
requirement ids, and nothing said the broker had stopped. Before each test on a started
target that answered when first used, the plugin asks it for ApiVersions (any bootstrap
broker answering will do, with the target's own security). When it does not answer:

* the test that ran just before on that target is the finding: its row stands as it is
  (usually a failure), and later rows name it: "stopped answering after <test>";
* this test and the following ones are not run: verdict ``not_run``, reason
  ``not run: target down ...``; they are never failures of their requirements;
* each later test probes again (at most every RECHECK_S), so a target that comes back (an
  external cluster restarted) is used again, and the first row after says it resumed.

A slow broker is not a dead one: going down takes PROBE_ATTEMPTS failed probes in a row,
each with PROBE_TIMEOUT_S (a loaded 2-core machine answers ApiVersions in milliseconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from reference_impl.client.raw_client import ClusterClient
from targets.target import Target, probe_capabilities

NOT_RUN_PREFIX = "not run: target down"
PROBE_TIMEOUT_S = 5.0
PROBE_ATTEMPTS = 3
PROBE_PAUSE_S = 1.0
RECHECK_S = 10.0

Probe = Callable[[Target], "str | None"]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text.splitlines()[0]}"


def probe_target(target: Target, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when some bootstrap broker answers ApiVersions and a Metadata naming brokers, else
    why not (one line). Metadata too: a broker whose storage died answers ApiVersions from
    memory but closes every connection that needs its storage (Tansu's sqlite engine after a
    panic, docs/targets.md#tansu)."""
    why = "no bootstrap address"
    for address in target.bootstrap_servers.split(","):
        try:
            security = target.raw_security()
            probe_capabilities(address.strip(), timeout=timeout, security=security)
            with ClusterClient(address.strip(), timeout=timeout, security=security) as cc:
                if not cc.nodes:
                    raise ConnectionError("Metadata names no broker")
            return None
        except Exception as exc:  # noqa: BLE001 - any failure to answer is the reason
            why = f"{address.strip()}: {_one_line(exc)}"
    return why


def describe_request(exchanges: list[dict[str, Any]]) -> str | None:
    """The last raw-client request a test sent, as `EndTxn v4 to host:port`."""
    if not exchanges:
        return None
    last = exchanges[-1]
    return f"{last.get('api')} v{last.get('version')} to {last.get('node')}"


@dataclass
class Down:
    spec: str
    after: str | None  # nodeid of the last test that ran on the target before it went quiet
    last_request: str | None
    why: str
    not_run: int = 0
    checked_at: float = field(default_factory=time.monotonic)

    def reason(self) -> str:
        after = f"; it stopped answering after {self.after}" if self.after else ""
        request = f" (its last request: {self.last_request})" if self.last_request else ""
        return f"{NOT_RUN_PREFIX} ({self.spec} does not answer: {self.why}){after}{request}"

    def as_row(self) -> dict[str, Any]:
        return {"spec": self.spec, "after": self.after, "last_request": self.last_request, "why": self.why}


class TargetHealth:
    """Per pytest process: the last test per target, and the targets that stopped answering."""

    def __init__(self, probe: Probe = probe_target, attempts: int = PROBE_ATTEMPTS, pause_s: float = PROBE_PAUSE_S,
                 recheck_s: float = RECHECK_S) -> None:
        self.probe, self.attempts, self.pause_s, self.recheck_s = probe, attempts, pause_s, recheck_s
        self._watched: dict[str, bool] = {}  # spec -> answered its first probe (only those are watched)
        self._last: dict[str, tuple[str, str | None]] = {}
        self._down: dict[str, Down] = {}
        self._resumed: dict[str, dict[str, Any]] = {}

    def watch(self, spec: str, target: Target) -> None:
        """When a test first gets the started target: probe it once. Only a target that
        answered is watched: one that never did (a test double, a target whose start did not
        wait for it) has not *stopped* answering, and its tests judge it themselves."""
        if spec not in self._watched:
            self._watched[spec] = self.probe(target) is None

    def test_ran(self, spec: str, nodeid: str, exchanges: list[dict[str, Any]]) -> None:
        """After each test on `spec`: it is the one to name if the target is quiet next."""
        self._last[spec] = (nodeid, describe_request(exchanges))

    def check(self, spec: str, target: Target) -> Down | None:
        """Before a test on the started `target`: None to run it, else why it is not run."""
        if not self._watched.get(spec):
            return None
        down = self._down.get(spec)
        if down is not None:
            if time.monotonic() - down.checked_at < self.recheck_s:
                down.not_run += 1
                return down
            down.checked_at = time.monotonic()
            if self.probe(target) is not None:
                down.not_run += 1
                return down
            del self._down[spec]
            self._resumed[spec] = {**down.as_row(), "not_run": down.not_run}
            return None
        why = self._confirm_down(target)
        if why is None:
            return None
        after, request = self._last.get(spec, (None, None))
        down = self._down[spec] = Down(spec, after, request, why, not_run=1)
        return down

    def resumed(self, spec: str) -> dict[str, Any] | None:
        """Once, for the first test after the target answered again: what it had missed."""
        return self._resumed.pop(spec, None)

    def _confirm_down(self, target: Target) -> str | None:
        why = None
        for attempt in range(self.attempts):
            why = self.probe(target)
            if why is None:
                return None
            if attempt + 1 < self.attempts:
                time.sleep(self.pause_s)
        return why
