"""One chaos run: target up, nemesis and workload together, final heal, catch-up, verdict.

Order (Jepsen's): start the target; set the injectors up; start the workload's client
threads and a nemesis thread that follows the seeded schedule, recording every fault
into the same history (process ``"nemesis"``); at the time limit stop the clients, heal
everything, run the workload's catch-up reads; check; tear down. Writes ``history.jsonl``,
``faults.jsonl``, ``check.json`` and ``report.html`` into the output directory.

Verdict: False if any safety anomaly; else "unknown" if a fault did not provably bite
(``effective`` not True), failed to apply, or a committed write stayed unseen
(liveness); else True. A run with no faults (calm) is judged on the history alone.
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


class CouldNotRun(RuntimeError):
    """The run could not happen (target, injector or workload setup failed)."""


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


@dataclass
class RunResult:
    valid: Any
    check: dict
    out: Path
    faults: list[dict]
    ops: int


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


def _wait_ready(workload: Any, clients: threading.Thread, max_wait_s: float) -> float:
    """Seconds until the workload reports ``ready()`` (workloads without it: at once), so
    that the first fault window meets a working client, not one still connecting."""
    ready = getattr(workload, "ready", None)
    t0 = time.monotonic()
    while ready is not None and clients.is_alive() and time.monotonic() - t0 < max_wait_s and not ready():
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


def run(cfg: RunConfig, log=print) -> RunResult:
    specs = parse_faults(cfg.faults)
    windows = schedule(specs, cfg.seed, cfg.time_limit_s)
    cfg.out.mkdir(parents=True, exist_ok=True)
    opts = dict(cfg.workload_options)
    if cfg.workload == "copier":
        opts.setdefault("workdir", cfg.out / "copier")
    if cfg.workload == "share":
        opts.setdefault("faulted", bool(specs))
    workload = make_workload(cfg.workload, cfg.seed, **opts)
    target = create_target(cfg.target)
    rec = Recorder()
    records: list[FaultRecord] = []
    errors: list[str] = []
    nemeses: list = []
    try:
        try:
            nemeses = nemeses_for(target, sorted({s.kind for s in specs}), seed=cfg.seed)
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
            windows = aim_roles(windows, workload.role_keys())
            for n in nemeses:
                if hasattr(n, "bind"):  # client-side faults (hijack) act through the workload
                    n.bind(workload, rec)
        except Exception as exc:
            raise CouldNotRun(f"{type(exc).__name__}: {exc}") from exc
        by_kind = {k: n for n in nemeses for k in n.kinds}
        log(f"running {cfg.workload} for {cfg.time_limit_s:g}s with {len(windows)} scheduled fault(s)")
        stop = threading.Event()
        clients = threading.Thread(target=workload.run, args=(stop,), name="workload", daemon=True)
        clients.start()
        ready_after_s = _wait_ready(workload, clients, READY_WAIT_S)
        t0 = time.monotonic()
        nemesis = threading.Thread(target=_nemesis_loop, args=(windows, by_kind, rec, t0, stop, records, errors),
                                   name="nemesis", daemon=True)
        nemesis.start()
        clients.join(cfg.time_limit_s)
        stop.set()
        nemesis.join(NEMESIS_GRACE_S)
        if nemesis.is_alive():
            raise CouldNotRun(f"the fault being injected did not finish within {NEMESIS_GRACE_S:g}s of the time limit")
        clients.join(STOP_GRACE_S)
        if clients.is_alive():
            raise CouldNotRun(f"the workload did not stop within {STOP_GRACE_S:g}s of the time limit")
        for n in nemeses:
            n.heal_all()
        unsupported = [e for e in errors if e.startswith(UNSUPPORTED)]
        if unsupported:
            raise CouldNotRun(unsupported[0])
        rec.close_open("the run ended with it open")
        log("final heal done; catch-up reads")
        workload.catch_up()
        history = rec.history(getattr(workload, "history_class", History))
        checked = workload.check(history)
    finally:
        for n in nemeses:
            try:
                n.teardown()
            except Exception:  # noqa: BLE001
                pass
        try:
            target.stop()
        except Exception:  # noqa: BLE001
            pass
    faults = [r.to_dict() for r in records]
    result = verdict(checked, faults, calm=not specs)
    result.update({"seed": cfg.seed, "target": cfg.target, "workload": cfg.workload, "faults": cfg.faults,
                   "time_limit_s": cfg.time_limit_s, "ops": len(history), "fault_errors": errors,
                   "ready_after_s": ready_after_s})
    write(cfg.out, history, faults, result)
    return RunResult(result["valid"], result, cfg.out, faults, len(history))


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
