"""`kipcheck chaos`: one seeded chaos run against a target (see docs/chaos-workloads.md).

Prints the seed first. Exit 0 valid, 1 a safety anomaly, 2 the run could not happen
(bad input, target or injector not available, an --out that already holds a run) or was
stopped early ("incomplete"), 3 valid "unknown" (a fault that did not provably bite, or
committed writes left unseen: neither a pass nor an anomaly). Every non-zero exit of a run
prints the command that replays it (into a fresh ``OUT-replay``).

SIGINT or SIGTERM stops the run cleanly: the workload and the faults stop, the cluster
is healed, the history, the faults and a check.json whose verdict is "incomplete" are
written, every child process is gone (exit 2). A second signal stops at once (no verdict).
``--analyze DIR`` judges a recorded run again (chaos/analyze.py), with the same exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shlex
import signal
import sys
from pathlib import Path
from typing import Iterator

from chaos.scenarios import SCENARIOS, run_named
from chaos.schedule import parse_faults
from reports.usage import UsageError, non_empty_path, positive_float, positive_int, usage_line
from targets.target import check_target_spec, parse_target_spec

EXIT_VALID, EXIT_ANOMALY, EXIT_COULD_NOT_RUN, EXIT_UNKNOWN = 0, 1, 2, 3
MAX_TIME_LIMIT_S = 3600.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="reference:nodes=3", help="target spec (default: reference:nodes=3)")
    p.add_argument("--workload", default="copier", help="queue | copier | share (default: copier)")
    p.add_argument("--nemesis", "--faults", dest="nemesis", default="kill", metavar="N[,N...]",
                   help="faults, e.g. kill, kill:minority, kill:txn-coordinator; none = calm run")
    p.add_argument("--seed", type=int, default=None, help="seed of the schedule and the clients (default: random)")
    p.add_argument("--time-limit", type=positive_float(MAX_TIME_LIMIT_S), default=30.0, metavar="SECONDS",
                   help="how long clients and faults run before the final heal, at most 3600 (default: 30)")
    p.add_argument("--out", type=non_empty_path, default=None,
                   help="output directory, new or without a run in it (default: chaos-out/SEED)")
    p.add_argument("--analyze", type=non_empty_path, default=None, metavar="DIR",
                   help="judge the recorded run in DIR again (writes DIR/check-analyzed.json; check.json is kept)")
    p.add_argument("--copier-client", default="confluent",
                   help="copier only: confluent (TV1) | reference-tv1 | reference-tv2")
    p.add_argument("--group-protocol", default=None, choices=("classic", "consumer"),
                   help="copier only: subscribe as a member of a classic or consumer (KIP-848) group, so "
                        "its offsets are fenced by generation / member epoch (default: assign(), no membership)")
    p.add_argument("--scenario", default=None, metavar="NAME",
                   help="run a named scenario instead of a workload: kafka-17754 (uses --target and --out)")
    p.add_argument("--transaction-version", default="auto", choices=("auto", "1", "2"),
                   help="scenario only: the client's transaction version (default: what the target finalised)")
    p.add_argument("--share-client", default="reference", help="share only: reference | confluent")
    p.add_argument("--replication-factor", type=positive_int(), default=None, metavar="N",
                   help="queue only: the topic's replication factor (default: the target's default)")
    p.add_argument("--max-ops", type=positive_int(), default=None, metavar="N",
                   help="queue only: how many client operations at most (default: 400)")


def replay_command(args: argparse.Namespace, seed: int, out: Path) -> str:
    """The command that replays the run, into a fresh directory (``out`` holds this run)."""
    parts = ["kipcheck", "chaos", "--target", args.target, "--workload", args.workload, "--nemesis",
             args.nemesis, "--seed", str(seed), "--time-limit", f"{args.time_limit:g}",
             "--out", str(out.with_name(out.name + "-replay"))]
    if args.workload == "copier" and args.copier_client != "confluent":
        parts += ["--copier-client", args.copier_client]
    if args.workload == "copier" and args.group_protocol is not None:
        parts += ["--group-protocol", args.group_protocol]
    if args.workload == "share" and args.share_client != "reference":
        parts += ["--share-client", args.share_client]
    for flag, value in (("--replication-factor", args.replication_factor), ("--max-ops", args.max_ops)):
        if args.workload == "queue" and value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _validate(args: argparse.Namespace) -> dict:
    """Raise UsageError for bad input before anything starts; the workload options."""
    from chaos.nemesis.registry import known_kinds  # injectors and clients, ~0.5 s: kipcheck --help imports this module
    from chaos.workloads import WORKLOADS  # loads the workloads' clients (see known_kinds above)

    try:
        check_target_spec(parse_target_spec(args.target))
    except ValueError as exc:
        raise UsageError(f"bad --target {args.target!r}: {exc}", "see docs/targets.md") from None
    try:
        specs = parse_faults(args.nemesis)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    unknown = sorted({s.kind for s in specs} - set(known_kinds()))
    if unknown:
        raise UsageError(f"no injector for fault kind(s) {', '.join(unknown)}; known: {', '.join(known_kinds())}")
    if args.workload not in WORKLOADS:
        raise UsageError(f"unknown workload {args.workload!r}; expected one of {', '.join(WORKLOADS)}")
    if args.workload == "copier":
        from chaos.workloads.copier import CLIENTS  # the workloads' clients (see known_kinds above)
        if args.copier_client not in CLIENTS:
            raise UsageError(f"--copier-client must be one of {', '.join(CLIENTS)}")
        if args.group_protocol is not None and args.copier_client != "confluent":
            raise UsageError("--group-protocol needs --copier-client confluent (the reference consumer only assigns)")
        return {"client": args.copier_client, "group_protocol": args.group_protocol}
    if args.group_protocol is not None:
        raise UsageError("--group-protocol is a copier option")
    if args.workload == "share":
        from chaos.workloads.share import CLIENTS as SHARE_CLIENTS  # the workloads' clients (see known_kinds above)
        if args.share_client not in SHARE_CLIENTS:
            raise UsageError(f"--share-client must be one of {', '.join(SHARE_CLIENTS)}")
        return {"client": args.share_client}
    return {k: v for k, v in (("replication_factor", args.replication_factor), ("max_ops", args.max_ops))  # queue
            if v is not None}


def run_scenario(args: argparse.Namespace) -> int:
    """``--scenario NAME``: a fixed reproduction; exit 0 correct, 1 wrong, 2 could not run."""
    if args.scenario not in SCENARIOS:
        print(usage_line("chaos", f"unknown scenario {args.scenario!r}", f"expected one of {', '.join(SCENARIOS)}"),
              file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN
    try:
        parse_target_spec(args.target)
    except ValueError as exc:
        print(usage_line("chaos", f"bad --target {args.target!r}: {exc}"), file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN
    out_dir = Path(args.out) if args.out else Path("chaos-out") / args.scenario
    replay = shlex.join(["kipcheck", "chaos", "--scenario", args.scenario, "--target", args.target, "--out", str(out_dir),
                         "--transaction-version", args.transaction_version])
    tv = args.transaction_version if args.transaction_version == "auto" else int(args.transaction_version)
    try:
        res = run_named(args.scenario, args.target, out_dir, transaction_version=tv)
    except Exception as exc:  # noqa: BLE001 - any failure to run is exit 2, one line
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(usage_line("chaos", f"scenario could not run: {why}"), file=sys.stderr, flush=True)
        print(f"replay: {replay}", flush=True)
        return EXIT_COULD_NOT_RUN
    print(res.summary)
    print(f"verdict: {res.verdict} ({res.explanation})")
    if res.wrong or not res.known:
        print(f"replay: {replay}", flush=True)
    return EXIT_ANOMALY if res.wrong else EXIT_VALID if res.known else EXIT_UNKNOWN


@contextlib.contextmanager
def stop_on_signals(interrupt) -> Iterator[None]:
    """While the run goes: the first SIGINT or SIGTERM asks it to stop cleanly (``interrupt``);
    the next one restores the previous handlers and raises KeyboardInterrupt, which unwinds
    the run through its teardown at once."""
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def handle(signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        if interrupt.is_set():
            for s, h in previous.items():
                signal.signal(s, h)
            raise KeyboardInterrupt(name)
        interrupt.request(name)
        # os.write, not print: the main thread may be inside a print when the signal lands.
        os.write(2, f"kipcheck: {name}: stopping the workload and the faults, healing, writing the history "
                    f"(send it again to stop at once)\n".encode())

    for s in STOP_SIGNALS:
        signal.signal(s, handle)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def print_verdict(check: dict) -> int:
    """Print a verdict (check.json's shape) and return its exit code."""
    for a in check["anomalies"]:
        print(f"anomaly: {a['type']} x{a['count']} ({a['checker']}) violates {', '.join(a['requirements'])}")
    for a in check["liveness"]:
        print(f"liveness: {a['type']} x{a['count']} (not a safety violation)")
    valid = check["valid"]
    if valid is True:
        print("valid=true")
        return EXIT_VALID
    if valid is False:
        print("valid=false")
        return EXIT_ANOMALY
    print(f"valid={valid}")
    for why in check.get("unknown_because", []):
        print(f"unknown because: {why}")
    if valid == "unknown":
        return EXIT_UNKNOWN
    print(f"incomplete because: {check.get('incomplete_because', '?')}")
    return EXIT_COULD_NOT_RUN


def run_analyze(path: str) -> int:
    """``--analyze DIR``: judge a recorded run again (chaos/analyze.py); same exit codes."""
    from chaos.analyze import ANALYZED, NotARun, analyze  # the workloads' clients (see known_kinds in _validate)

    try:
        check = analyze(Path(path))
    except NotARun as exc:
        raise UsageError(str(exc), "a directory written by `kipcheck chaos`") from None
    print(f"analyzed {check['workload']} run, seed={check['seed']}, target={check['target']}, "
          f"faults={check['faults']}: ops={check['ops']} (recorded verdict: {check['recorded_valid']})")
    code = print_verdict(check)
    print(f"written: {Path(path) / ANALYZED}", flush=True)
    return code


def run(args: argparse.Namespace) -> int:
    if args.analyze is not None:
        return run_analyze(args.analyze)
    if args.scenario is not None:
        return run_scenario(args)

    from chaos.runner import CouldNotRun, Interrupt, OutInUse, RunConfig  # injectors and clients, as known_kinds in _validate
    from chaos.runner import run as run_chaos  # injectors and clients, as known_kinds in _validate

    options = _validate(args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    out = Path(args.out) if args.out else Path("chaos-out") / str(seed)
    print(f"seed={seed}", flush=True)
    replay = replay_command(args, seed, out)
    cfg = RunConfig(target=args.target, workload=args.workload, faults=args.nemesis, seed=seed,
                    time_limit_s=args.time_limit, out=out, workload_options=options)
    interrupt = Interrupt()
    try:
        with stop_on_signals(interrupt):
            res = run_chaos(cfg, log=lambda m: print(m, flush=True), interrupt=interrupt)
    except OutInUse as exc:
        raise UsageError(str(exc), "choose a new --out: two runs never share one") from None
    except KeyboardInterrupt as exc:
        print(usage_line("chaos", f"stopped at once by a second {exc or 'interrupt'}: no verdict written"),
              file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN
    except (CouldNotRun, Exception) as exc:  # noqa: BLE001 - any failure to run is exit 2, one line
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(usage_line("chaos", f"the run could not happen: {why}"), file=sys.stderr, flush=True)
        print(f"replay: {replay}", flush=True)
        return EXIT_COULD_NOT_RUN
    print(f"ops={res.ops} faults={len(res.faults)} out={out}")
    code = print_verdict(res.check)
    if code != EXIT_VALID:
        print(f"replay: {replay}", flush=True)
    return code
