"""One chaos run: target up, nemesis and workload together, final heal, catch-up, verdict.

Order (Jepsen's): claim the output directory (``run.json``, written first; a directory
that already holds a run is refused, so two runs' histories never mix); start the target;
set the injectors up; start the workload's client threads and a nemesis thread that
follows the seeded schedule, recording every fault into the same history (process
``"nemesis"``); at the time limit stop the clients, heal everything, run the workload's
catch-up reads; check; tear down. Writes ``history.jsonl``, ``faults.jsonl``,
``check.json`` and ``report.html`` into the output directory.

Verdict: False if any safety anomaly; else "unknown" if a fault did not provably bite
(``effective`` not True), failed to apply, or a committed write stayed unseen
(liveness); else True. A run with no faults (calm) is judged on the history alone.
A run stopped early (``Interrupt``, a signal) heals, skips the catch-up reads and is
"incomplete" whatever its partial history shows.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.requirements import anomalies
from checkers.result import UNKNOWN
from checkers.history import History
from chaos.nemesis.base import NEMESIS_PROCESS, FaultRecord, FaultWindow
from checkers.recorder import Recorder
from targets.target import NotSupportedByTarget
from chaos.nemesis.registry import nemeses_for
from chaos.report import render
from chaos.schedule import aim_roles, parse_faults, schedule
from chaos.workloads import make_workload
from targets.factory import create_target

STOP_GRACE_S = 60.0
NEMESIS_GRACE_S = 420.0
"""A fault being injected when time is up finishes first (a kafka-native bounce restarts
a JVM and waits for Metadata to list it again: minutes under load); its record must be
complete before the final heal closes open operations."""
UNSUPPORTED = "not supported by target: "
READY_WAIT_S = 90.0
"""How long the fault schedule waits for the workload's first success (clients of a JVM
target under load can take tens of seconds); the time limit counts from then."""


INCOMPLETE = "incomplete"
"""The verdict of a run stopped before its end (exit 2, as certify's interrupted runs)."""
RUN_FILES = ("run.json", "history.jsonl", "faults.jsonl", "check.json", "copier")
"""What a run writes into its directory; any of them there means the directory holds a run."""


class CouldNotRun(RuntimeError):
    """The run could not happen (target, injector or workload setup failed)."""


class OutInUse(ValueError):
    """The output directory already holds a run (or is not a directory): refused, never mixed."""


class Interrupt:
    """A request to stop a run early, set from a signal handler (a plain attribute, no lock:
    the handler runs on the main thread, which may be inside any lock)."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        self.reason = self.reason or reason

    def is_set(self) -> bool:
        return self.reason is not None


@dataclass
class RunConfig:
    target: str
    workload: str
    faults: str = "none"
    seed: int = 0
    time_limit_s: float = 30.0
    out: Path = Path("chaos-out")
    workload_options: dict[str, Any] = field(default_factory=dict)
    target_hook: Any = None
    """Called with the started target (tests only: e.g. to break the reference on purpose)."""

    def meta(self) -> dict[str, Any]:
        """What ``run.json`` records: enough to judge the history again (``--analyze``)."""
        return {"seed": self.seed, "target": self.target, "workload": self.workload, "faults": self.faults,
                "time_limit_s": self.time_limit_s,
                "workload_options": {k: v for k, v in self.workload_options.items() if k != "workdir"}}


@dataclass
class RunResult:
    valid: Any
    check: dict
    out: Path
    faults: list[dict]
    ops: int


def held_run(out: Path) -> str | None:
    """The first run file ``out`` holds (None: no run there)."""
    return next((name for name in RUN_FILES if (out / name).exists()), None)


def claim_out(cfg: RunConfig) -> None:
    """Create ``cfg.out`` and write ``run.json`` in it, refusing a directory that holds a run:
    a copier appending to an old ``copier-history.jsonl`` would merge two runs into one history.
    ``run.json`` is created exclusively, so two runs started at once cannot share it either."""
    out = cfg.out
    if out.exists() and not out.is_dir():
        raise OutInUse(f"--out {out} is a file, not a directory")
    held = held_run(out)
    if held is not None:
        raise OutInUse(f"--out {out} already holds a chaos run ({held})")
    out.mkdir(parents=True, exist_ok=True)
    try:
        with (out / "run.json").open("x") as f:
            json.dump({**cfg.meta(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f, indent=1)
    except FileExistsError:
        raise OutInUse(f"--out {out} already holds a chaos run (run.json)") from None


def _nemesis_loop(windows: list[FaultWindow], by_kind: dict, rec: Recorder, t0: float,
                  stop: threading.Event, records: list[FaultRecord], errors: list[str]) -> None:
    """Apply and heal each scheduled fault at its time (relative to ``t0``)."""
    for w in windows:
        if stop.wait(max(0.0, t0 + w.start_s - time.monotonic())):
            return
        nem = by_kind[w.spec.kind]
        inv = rec.invoke(NEMESIS_PROCESS, "start-fault", {"fault": w.spec.name})
        try:
            r = nem.invoke(w.spec)
        except NotSupportedByTarget as exc:  # this run cannot test the fault at all: end it
            rec.complete(inv, "fail", error=f"not supported by target: {exc.reason}")
            errors.append(f"{UNSUPPORTED}{w.spec.name}: {exc.reason}")
            stop.set()
            return
        except Exception as exc:  # noqa: BLE001 - recorded; the verdict becomes unknown
            r = FaultRecord(w.spec, error=repr(exc), effective=False)
            errors.append(f"{w.spec.name}: {exc!r}")
        records.append(r)
        rec.complete(inv, "ok" if r.error is None else "info", r.to_dict())
        stop.wait(max(0.0, t0 + w.end_s - time.monotonic()))
        inv = rec.invoke(NEMESIS_PROCESS, "stop-fault", {"fault": w.spec.name})
        try:
            nem.heal(r)
        except Exception as exc:  # noqa: BLE001
            r.error = f"heal failed: {exc!r}"
        rec.complete(inv, "ok" if r.error is None else "info", r.to_dict())


def _wait_ready(workload: Any, clients: threading.Thread, max_wait_s: float,
                interrupt: Interrupt | None = None) -> float:
    """Seconds until the workload reports ``ready()`` (workloads without it: at once), so
    that the first fault window meets a working client, not one still connecting."""
    ready = getattr(workload, "ready", None)
    t0 = time.monotonic()
    while (ready is not None and clients.is_alive() and time.monotonic() - t0 < max_wait_s and not ready()
           and not (interrupt is not None and interrupt.is_set())):
        time.sleep(0.2)
    return round(time.monotonic() - t0, 3)


def verdict(check: dict, faults: list[dict], calm: bool) -> dict:
    """Fold the checkers' result, the faults' effectiveness and liveness into check.json."""
    safety, liveness = anomalies(check)
    ineffective = [f["fault"] for f in faults if f.get("effective") is not True]
    because = []
    if ineffective:
        because.append(f"fault(s) not shown effective: {', '.join(ineffective)}")
    if not calm and not faults:
        because.append("no fault was applied (the time limit left no room for one)")
    because += [f"liveness: {a['count']} {a['type']}" for a in liveness]
    for name, r in check.get("results", {}).items():
        because += [f"{name}: {u}" for u in r.get("unknown_because", ()) if "unseen" not in u]
    if safety:
        valid: Any = False
    elif because:
        valid = UNKNOWN
    else:
        valid = True
    return {"valid": valid, "anomalies": safety, "liveness": liveness,
            "unknown_because": because if valid == UNKNOWN else [], "checkers": check}


def _release_out(out: Path) -> None:
    """Setup failed before any client op: give the directory back (only what this run
    created and left empty), so that the same command can be run again once fixed."""
    (out / "run.json").unlink(missing_ok=True)
    try:
        (out / "copier").rmdir()  # only if empty
    except OSError:
        pass


def incomplete(result: dict, why: str) -> dict:
    """A verdict that cannot stand: the run did not reach its end. What its partial history
    shows stays in ``anomalies`` and ``liveness`` for the reader; the verdict is "incomplete"."""
    return {**result, "valid": INCOMPLETE, "unknown_because": [], "incomplete_because": why}


def _drive(cfg: RunConfig, workload: Any, windows: list[FaultWindow], by_kind: dict, rec: Recorder,
           records: list[FaultRecord], errors: list[str], interrupt: Interrupt) -> float:
    """Clients and faults together until the time limit (or an interrupt); both stopped on
    return. Returns how long the workload took to be ready."""
    stop = threading.Event()
    clients = threading.Thread(target=workload.run, args=(stop,), name="workload", daemon=True)
    clients.start()
    ready_after_s = _wait_ready(workload, clients, READY_WAIT_S, interrupt)
    t0 = time.monotonic()
    nemesis = threading.Thread(target=_nemesis_loop, args=(windows, by_kind, rec, t0, stop, records, errors),
                               name="nemesis", daemon=True)
    nemesis.start()
    deadline = t0 + cfg.time_limit_s
    while clients.is_alive() and not interrupt.is_set() and time.monotonic() < deadline:
        clients.join(min(0.2, max(deadline - time.monotonic(), 0.0)))
    stop.set()
    nemesis.join(NEMESIS_GRACE_S)
    if nemesis.is_alive():
        raise CouldNotRun(f"the fault being injected did not finish within {NEMESIS_GRACE_S:g}s of the time limit")
    clients.join(STOP_GRACE_S)
    if clients.is_alive():
        raise CouldNotRun(f"the workload did not stop within {STOP_GRACE_S:g}s of the time limit")
    return ready_after_s


def run_workload(cfg: RunConfig) -> Any:
    """The run's workload, built the same way for a run and for ``--analyze`` (its checks
    depend only on these arguments and the history)."""
    opts = dict(cfg.workload_options)
    if cfg.workload == "copier":
        opts.setdefault("workdir", cfg.out / "copier")
    if cfg.workload == "share":
        opts.setdefault("faulted", bool(parse_faults(cfg.faults)))
    return make_workload(cfg.workload, cfg.seed, **opts)


def _set_up(cfg: RunConfig, target: Any, workload: Any, specs: list, rec: Recorder, nemeses: list) -> None:
    """Injectors (into ``nemeses`` as they come, for the teardown), the target, the workload."""
    nemeses += nemeses_for(target, sorted({s.kind for s in specs}), seed=cfg.seed)
    for n in nemeses:
        n.prepare(target)
    target.start()
    if cfg.target_hook is not None:
        cfg.target_hook(target)
    for n in nemeses:
        n.setup(target)
    clients_see = target
    for n in nemeses:  # a fault carrier the clients must go through (a capture proxy)
        if hasattr(n, "client_view"):
            clients_see = n.client_view(clients_see)
    workload.setup(clients_see, rec)
    for n in nemeses:
        if hasattr(n, "bind"):  # client-side faults (hijack) act through the workload
            n.bind(workload, rec)


def run(cfg: RunConfig, log=print, interrupt: Interrupt | None = None) -> RunResult:
    """One run into ``cfg.out`` (OutInUse if it holds one). ``interrupt`` set (a signal): the
    workload and the faults stop, the cluster is healed, the files are written, "incomplete"."""
    interrupt = interrupt or Interrupt()
    specs = parse_faults(cfg.faults)
    windows = schedule(specs, cfg.seed, cfg.time_limit_s)
    claim_out(cfg)
    workload = run_workload(cfg)
    target = create_target(cfg.target)
    rec = Recorder()
    records: list[FaultRecord] = []
    errors: list[str] = []
    nemeses: list = []
    ready_after_s = None
    caught_up = False
    try:
        try:
            _set_up(cfg, target, workload, specs, rec, nemeses)
        except Exception as exc:
            _release_out(cfg.out)
            raise CouldNotRun(f"{type(exc).__name__}: {exc}") from exc
        windows = aim_roles(windows, workload.role_keys())
        by_kind = {k: n for n in nemeses for k in n.kinds}
        if not interrupt.is_set():
            log(f"running {cfg.workload} for {cfg.time_limit_s:g}s with {len(windows)} scheduled fault(s)")
            ready_after_s = _drive(cfg, workload, windows, by_kind, rec, records, errors, interrupt)
        for n in nemeses:
            n.heal_all()
        unsupported = [e for e in errors if e.startswith(UNSUPPORTED)]
        if unsupported:
            raise CouldNotRun(unsupported[0])
        if interrupt.is_set():
            rec.close_open(f"the run was stopped ({interrupt.reason}) with it open")
            log(f"stopped ({interrupt.reason}): final heal done; no catch-up reads")
        else:
            rec.close_open("the run ended with it open")
            log("final heal done; catch-up reads")
            workload.catch_up()
            caught_up = True
        history = rec.history(getattr(workload, "history_class", History))
        checked = workload.check(history)
    finally:
        _teardown(workload, nemeses, target)
    faults = [r.to_dict() for r in records]
    result = verdict(checked, faults, calm=not specs)
    if interrupt.is_set():
        when = "during the catch-up reads" if caught_up else "before the catch-up reads (none ran)"
        result = incomplete(result, f"stopped by {interrupt.reason} {when}")
    result.update({**cfg.meta(), "ops": len(history), "fault_errors": errors, "ready_after_s": ready_after_s})
    write(cfg.out, history, faults, result)
    return RunResult(result["valid"], result, cfg.out, faults, len(history))


def _teardown(workload: Any, nemeses: list, target: Any) -> None:
    """Stop everything the run started, each step whatever the others did: the workload's
    child processes, the injectors (a Toxiproxy server), the target (broker processes)."""
    for step in [workload.teardown, *(n.teardown for n in nemeses), target.stop]:
        try:
            step()
        except Exception:  # noqa: BLE001 - the others must still run
            pass


def write(out: Path, history: History, faults: list[dict], result: dict) -> None:
    with (out / "history.jsonl").open("w") as f:
        for op in history.to_list():
            f.write(json.dumps(op, default=str) + "\n")
    with (out / "faults.jsonl").open("w") as f:
        for d in faults:
            f.write(json.dumps(d, default=str) + "\n")
    (out / "check.json").write_text(json.dumps(result, indent=1, default=str))
    meta = {k: result[k] for k in ("seed", "target", "workload", "faults", "time_limit_s", "ops")}
    (out / "report.html").write_text(render(history, {**result["checkers"], **result}, faults, meta))
