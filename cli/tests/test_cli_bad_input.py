"""Every bad input of issue 24, one row each: the command refuses it before any work with one
line ``kipcheck <command>: error: <what> (<hint>)`` on stderr, exit 2, no traceback, and
nothing written where it was told to write (reports/usage.py; docs/cli.md).

Each row runs the real command line in a subprocess, from an empty directory outside the
checkout, under a deadline. Rows marked with another owner check commands whose bodies live
elsewhere (chaos/, replay/); the format is the same for all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.certify import package_root

ROW_DEADLINE_S = 60.0


def row(command: str, argv: list[str], needle: str, owner: str = "cli") -> pytest.param:
    """`argv` (TMP stands for an empty scratch directory) must be refused by `command`, the
    error line holding `needle`."""
    return pytest.param(command, argv, needle, id=f"{owner}:{command}:{' '.join(argv[1:])[:60]}")


ROWS = [
    # target specs: unknown options for every kind (the reference included), unknown versions
    row("certify", ["certify", "--target", "reference:foo=bar", "--out", "TMP/out"],
        "unknown option(s) foo for reference in 'reference:foo=bar'; known: nodes, port,"),
    row("certify", ["certify", "--target", "reference:node=3", "--out", "TMP/out"], "unknown option(s) node"),
    row("certify", ["certify", "--target", "kafka-native:9.9", "--out", "TMP/out"],
        "unsupported Kafka version '9.9'; supported:"),
    row("certify", ["certify", "--target", "kafka-native:4.4:transaction.version=1", "--out", "TMP/out"],
        "known: nodes, heap,"),
    row("certify", ["certify", "--target", "librdkafka-mock:2.0", "--out", "TMP/out"], "takes no version"),
    row("certify", ["certify", "--target", "kfake:colour=blue", "--out", "TMP/out"], "unknown option(s) colour"),
    row("certify", ["certify", "--target", "testcontainers:flavour=x", "--out", "TMP/out"], "unknown option(s) flavour"),
    row("certify", ["certify", "--target", "external:127.0.0.1:9092:bogus=1", "--out", "TMP/out"],
        "unknown option(s) bogus for external"),
    row("certify", ["certify", "--target", "reference:port=70000", "--out", "TMP/out"], "port must be a number in 0..65535"),
    row("certify", ["certify", "--target", "external:127.0.0.1:9092:config=TMP/none.properties", "--out", "TMP/out"],
        "none.properties"),
    # paths and numbers
    row("certify", ["certify", "--out", ""], "an empty path"),
    row("certify", ["certify", "--test-timeout", "-1", "--out", "TMP/out"], "argument --test-timeout: -1 must be > 0"),
    row("certify", ["certify", "--time-limit", "0", "--out", "TMP/out"], "argument --time-limit: 0 must be > 0"),
    row("certify", ["certify", "--time-limit", "nan", "--out", "TMP/out"], "not a finite number"),
    row("certify", ["certify", "-n", "many", "--out", "TMP/out"], "-n must be a number"),
    row("report", ["report", ""], "an empty path"),
    row("report", ["report", "TMP/missing"], "does not exist"),
    row("report", ["report", "TMP", "--out", ""], "an empty path"),
    row("catalog", ["catalog", "--kip", "999", "--no-collect"], "unknown KIP KIP-999"),
    row("catalog", ["catalog", "--results", "", "--no-collect"], "an empty path"),
    row("broker", ["broker", "--port", "70000"], "argument --port: 70000 must be <= 65535"),
    row("broker", ["broker", "--brokers", "0"], "argument --brokers: 0 must be >= 1"),
    row("broker", ["broker", "--port", "65535", "--brokers", "2"], "out of range for 2 broker(s)"),
    row("target", ["target", "up", "reference:foo=bar"], "unknown option(s) foo"),
    row("target", ["target", "up", "kafka-native:9.9"], "unsupported Kafka version '9.9'"),
    row("target", ["target", "down"], "invalid choice: 'down'"),
    row("record", ["record", "--upstream", "nonsense", "--out", "TMP/out"], "--upstream: expected host:port"),
    row("record", ["record", "--upstream", "127.0.0.1:9092", "--out", "TMP/out", "--segment-max-bytes", "0"],
        "argument --segment-max-bytes: 0 must be >= 1"),
    row("record", ["record", "--upstream", "127.0.0.1:9092", "--out", ""], "an empty path"),
    row("image", ["image", "build", "--kafka", "9.9"], "unsupported Kafka version '9.9'"),
    row("power", ["power", "--bugs", ""], "unknown seeded bug(s) (none given to --bugs)"),
    row("power", ["power", "--bugs", "no-such-bug"], "unknown seeded bug(s) no-such-bug"),
    row("power", ["power", "-n", "-1"], "argument -n/--workers: -1 must be >= 0"),
    row("power", ["power", "--timeout", "0"], "argument --timeout: 0 must be > 0"),
    row("power", ["power", "--shard", "4/4"], "--shard must be K/N"),
    row("power", ["power", "tests_that_are_not_here"], "no such test path"),
    # collects nothing: "could not run", not "MISSED" (one quick pytest run)
    row("power", ["power", "--bugs", "crc-not-checked", "--out", "TMP/power.json", "TMP"],
        "could not run 1 of 1 bug runs (no test reported; crc-not-checked: no test collected"),
    row("frobnicate", ["frobnicate"], "invalid choice: 'frobnicate'"),
    # the same format for the commands other helpers own
    row("replay", ["replay", "TMP", "--target", "reference", "--out", "TMP/out"], "no recorded exchange", owner="F"),
    row("replay", ["replay", "TMP", "--target", "reference", "--out", "TMP/out", "--request-timeout", "-1"],
        "--request-timeout", owner="F"),
    row("check", ["check", "TMP", "--out", "TMP/out", "--lock-duration-ms", "-5"], "--lock-duration-ms", owner="F"),
    row("diff", ["diff", "TMP/a", "TMP/b", "--out", "TMP/out"], "does not exist", owner="F"),
    row("compact", ["compact", "TMP/a", "--out", "TMP/out"], "does not exist", owner="G1"),
    row("compact", ["compact", "TMP", "--out", "TMP/out"], "no completed segment", owner="G1"),
    row("chaos", ["chaos", "--target", "reference:foo=bar", "--workload", "queue", "--nemesis", "none", "--seed", "1",
                  "--time-limit", "5", "--out", "TMP/out"], "foo", owner="B"),
    row("chaos", ["chaos", "--target", "reference", "--workload", "queue", "--nemesis", "none", "--seed", "1",
                  "--time-limit", "0", "--out", "TMP/out"], "--time-limit", owner="B"),
    row("verify", ["verify", "TMP/missing"], "missing", owner="D"),
    row("clients", ["clients", "--suite", "sarama", "--target", "reference", "--out", "TMP/out"],
        "unknown client suite 'sarama' (known: franz-go)", owner="clients"),
    row("clients", ["clients", "--suite", "franz-go:1.18.0", "--target", "reference", "--out", "TMP/out"],
        "franz-go 1.18.0 is not pinned (pinned: 1.22.3", owner="clients"),
    row("clients", ["clients", "--suite", "franz-go", "--target", "reference", "--tests", "(", "--out", "TMP/out"],
        "bad --tests '('", owner="clients"),
    row("clients", ["clients", "--suite", "franz-go", "--target", "reference", "--tests", "^TestNope$",
                    "--out", "TMP/out"], "selects none of franz-go's tests", owner="clients"),
    row("clients", ["clients", "--suite", "franz-go", "--target", "kafka-native:security=sasl_ssl",
                    "--out", "TMP/out"], "plaintext targets only", owner="clients"),
    row("clients", ["clients", "--suite", "franz-go", "--target", "reference", "--records", "0", "--out", "TMP/out"],
        "argument --records: 0 must be >= 1", owner="clients"),
    row("certify", ["certify", "--clients", "sarama", "--out", "TMP/out"], "--clients: unknown client suite 'sarama'",
        owner="clients"),
]


def _fix(name: str) -> str:
    """The row's command name as its error line spells it (`frobnicate` is not a command)."""
    return "" if name == "frobnicate" else f" {name}"


@pytest.mark.deadline(ROW_DEADLINE_S * 2)
@pytest.mark.parametrize("command, argv, needle", ROWS)
def test_bad_input_is_one_line_and_exit_2(command: str, argv: list[str], needle: str, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [a.replace("TMP", str(scratch)) for a in argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package_root()), os.environ.get("PYTHONPATH")]))}
    env.pop("KIPCHECK_EXTERNAL_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=ROW_DEADLINE_S)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert re.match(rf"^kipcheck{_fix(command)}: error: ", lines[0]), lines[0]
    assert needle in lines[0], lines[0]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert not (scratch / "out").exists()  # refused before any work: nothing written
    # nothing in the working directory either (kio imports hypothesis, which makes .hypothesis/)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".hypothesis") == ["scratch"]
