"""`kipcheck chaos`: one seeded chaos run against a target (see docs/chaos-workloads.md).

Prints the seed first. Exit 0 valid, 1 a safety anomaly, 2 the run could not happen
(bad input, target or injector not available), 3 valid "unknown" (a fault that did not
provably bite, or committed writes left unseen: neither a pass nor an anomaly). Every
non-zero exit prints the command that replays the run.
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
from pathlib import Path

from chaos.scenarios import SCENARIOS
from chaos.schedule import parse_faults
from targets.target import parse_target_spec

EXIT_VALID, EXIT_ANOMALY, EXIT_COULD_NOT_RUN, EXIT_UNKNOWN = 0, 1, 2, 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="reference:nodes=3", help="target spec (default: reference:nodes=3)")
    p.add_argument("--workload", default="copier", help="queue | copier | share (default: copier)")
    p.add_argument("--nemesis", "--faults", dest="nemesis", default="kill", metavar="N[,N...]",
                   help="faults, e.g. kill, kill:minority, kill:txn-coordinator; none = calm run")
    p.add_argument("--seed", type=int, default=None, help="seed of the schedule and the clients (default: random)")
    p.add_argument("--time-limit", type=float, default=30.0, metavar="SECONDS",
                   help="how long clients and faults run before the final heal (default: 30)")
    p.add_argument("--out", default=None, help="output directory (default: chaos-out/SEED)")
    p.add_argument("--copier-client", default="confluent",
                   help="copier only: confluent (TV1) | reference-tv1 | reference-tv2")
    p.add_argument("--scenario", default=None, metavar="NAME",
                   help="run a named scenario instead of a workload: kafka-17754 (uses --target and --out)")
    p.add_argument("--transaction-version", default="auto", choices=("auto", "1", "2"),
                   help="scenario only: the client's transaction version (default: what the target finalised)")
    p.add_argument("--share-client", default="reference", help="share only: reference | confluent")
    p.add_argument("--replication-factor", type=int, default=None, metavar="N",
                   help="queue only: the topic's replication factor (default: the target's default)")
    p.add_argument("--max-ops", type=int, default=None, metavar="N",
                   help="queue only: how many client operations at most (default: 400)")


def replay_command(args: argparse.Namespace, seed: int, out: Path) -> str:
    parts = ["kipcheck", "chaos", "--target", args.target, "--workload", args.workload, "--nemesis",
             args.nemesis, "--seed", str(seed), "--time-limit", f"{args.time_limit:g}", "--out", str(out)]
    if args.workload == "copier" and args.copier_client != "confluent":
        parts += ["--copier-client", args.copier_client]
    if args.workload == "share" and args.share_client != "reference":
        parts += ["--share-client", args.share_client]
    for flag, value in (("--replication-factor", args.replication_factor), ("--max-ops", args.max_ops)):
        if args.workload == "queue" and value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


class UsageError(ValueError):
    """Bad input: one line on stderr, exit 2 (printed here, so that it holds however the
    CLI module was loaded)."""


def _validate(args: argparse.Namespace) -> dict:
    """Raise UsageError for bad input before anything starts; the workload options."""
    from chaos.nemesis.registry import known_kinds  # injectors and clients, ~0.5 s: kipcheck --help imports this module
    from chaos.workloads import WORKLOADS  # loads the workloads' clients (see known_kinds above)

    try:
        parse_target_spec(args.target)
        specs = parse_faults(args.nemesis)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    unknown = sorted({s.kind for s in specs} - set(known_kinds()))
    if unknown:
        raise UsageError(f"no injector for fault kind(s) {', '.join(unknown)}; known: {', '.join(known_kinds())}")
    if args.workload not in WORKLOADS:
        raise UsageError(f"unknown workload {args.workload!r}; expected one of {', '.join(WORKLOADS)}")
    if not 0 < args.time_limit <= 3600:
        raise UsageError("--time-limit must be in (0, 3600] seconds")
    if args.workload == "copier":
        from chaos.workloads.copier import CLIENTS  # the workloads' clients (see known_kinds above)
        if args.copier_client not in CLIENTS:
            raise UsageError(f"--copier-client must be one of {', '.join(CLIENTS)}")
        return {"client": args.copier_client}
    if args.workload == "share":
        from chaos.workloads.share import CLIENTS as SHARE_CLIENTS  # the workloads' clients (see known_kinds above)
        if args.share_client not in SHARE_CLIENTS:
            raise UsageError(f"--share-client must be one of {', '.join(SHARE_CLIENTS)}")
        return {"client": args.share_client}
    return _queue_options(args) if args.workload == "queue" else {}


def _queue_options(args: argparse.Namespace) -> dict:
    options = {}
    if args.replication_factor is not None:
        if args.replication_factor < 1:
            raise UsageError("--replication-factor must be at least 1")
        options["replication_factor"] = args.replication_factor
    if args.max_ops is not None:
        if args.max_ops < 1:
            raise UsageError("--max-ops must be at least 1")
        options["max_ops"] = args.max_ops
    return options


def run_scenario(args: argparse.Namespace) -> int:
    """``--scenario NAME``: a fixed reproduction; exit 0 correct, 1 wrong, 2 could not run."""
    if args.scenario not in SCENARIOS:
        print(f"kipcheck: error: unknown scenario {args.scenario!r}; expected one of {', '.join(SCENARIOS)}",
              file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN
    from chaos.scenarios import kafka_17754  # its clients, as known_kinds in _validate
    try:
        parse_target_spec(args.target)
    except ValueError as exc:
        print(f"kipcheck: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN
    out_dir = Path(args.out) if args.out else Path("chaos-out") / args.scenario
    replay = shlex.join(["kipcheck", "chaos", "--scenario", args.scenario, "--target", args.target, "--out", str(out_dir),
                         "--transaction-version", args.transaction_version])
    tv = args.transaction_version if args.transaction_version == "auto" else int(args.transaction_version)
    try:
        res = kafka_17754.run_spec(args.target, out_dir, transaction_version=tv)
    except Exception as exc:  # noqa: BLE001 - any failure to run is exit 2, one line
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"kipcheck: error: scenario could not run: {why}", file=sys.stderr, flush=True)
        print(f"replay: {replay}", flush=True)
        return EXIT_COULD_NOT_RUN
    print(f"target={res.target} transaction_version={res.transaction_version} end_txn=v{res.end_txn_version} "
          f"late_end_txn={res.late_end_txn_error} abort2={res.abort2_error or 'NONE'} visible={res.visible}")
    print(f"verdict: {res.verdict} ({res.explanation})")
    if res.wrong:
        print(f"replay: {replay}", flush=True)
        return EXIT_ANOMALY
    return EXIT_VALID


def run(args: argparse.Namespace) -> int:
    if args.scenario is not None:
        return run_scenario(args)

    from chaos.runner import CouldNotRun, RunConfig  # injectors and clients, as known_kinds in _validate
    from chaos.runner import run as run_chaos  # injectors and clients, as known_kinds in _validate

    try:
        options = _validate(args)
    except UsageError as exc:
        print(f"kipcheck: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    out = Path(args.out) if args.out else Path("chaos-out") / str(seed)
    print(f"seed={seed}", flush=True)
    replay = replay_command(args, seed, out)
    cfg = RunConfig(target=args.target, workload=args.workload, faults=args.nemesis, seed=seed,
                    time_limit_s=args.time_limit, out=out, workload_options=options)
    try:
        res = run_chaos(cfg, log=lambda m: print(m, flush=True))
    except (CouldNotRun, Exception) as exc:  # noqa: BLE001 - any failure to run is exit 2, one line
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"kipcheck: error: chaos run could not happen: {why}", file=sys.stderr, flush=True)
        print(f"replay: {replay}", flush=True)
        return EXIT_COULD_NOT_RUN
    print(f"ops={res.ops} faults={len(res.faults)} out={out}")
    for a in res.check["anomalies"]:
        print(f"anomaly: {a['type']} x{a['count']} ({a['checker']}) violates {', '.join(a['requirements'])}")
    for a in res.check["liveness"]:
        print(f"liveness: {a['type']} x{a['count']} (not a safety violation)")
    if res.valid is True:
        print("valid=true")
        return EXIT_VALID
    if res.valid is False:
        print("valid=false")
        print(f"replay: {replay}", flush=True)
        return EXIT_ANOMALY
    print("valid=unknown")
    for why in res.check.get("unknown_because", []):
        print(f"unknown because: {why}")
    print(f"replay: {replay}", flush=True)
    return EXIT_UNKNOWN
